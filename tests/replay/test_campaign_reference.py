"""The campaign reference (evalkit/replay/CAMPAIGN.md) and its JSON Schema
(evalkit/replay/schemas/campaign.schema.json) against the reader: the same keys in every
table, the same defaults, every bundled and example campaign valid under both, and invalid
campaigns refused by both."""

from __future__ import annotations

import copy
import fnmatch
import inspect
import json
import re
import tomllib
from dataclasses import fields
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from evalkit.errors import InputError
from evalkit.replay import campaign as C
from evalkit.replay.backends.sim.model import SimConfig
from evalkit.replay.traces.generate import ARRIVALS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = resources.files("evalkit.replay")
SCHEMA = json.loads(PACKAGE.joinpath("schemas/campaign.schema.json").read_text())
REFERENCE = PACKAGE.joinpath("CAMPAIGN.md").read_text()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

# the keys of a generator [trace] that the job builder takes before the generator's own
GENERATOR_TABLE_KEYS = {"generator", "prompt_tokens", "output_tokens", "name"}
# CAMPAIGN.md's section headings, by table
SECTIONS = {"top": "Top level", "slo": "`[slo]`", "trace generator": "`[trace]` with a generator",
            "trace file": "`[trace]` from a file", "backend": "`[backend]`",
            "sim config": "`[backend.config]` of the simulator", "policies": "`[[policies]]`",
            "design": "`[design]`"}


def generator_parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"rng", "seed", "details"}


def reader_keys() -> dict[str, set[str]]:
    """Every key the reader accepts, by table."""
    generators = set().union(*(generator_parameters(fn) for fn in ARRIVALS.values()))
    return {"top": set(C.TOP_KEYS), "slo": set(C.SLO_KEYS),
            "trace generator": GENERATOR_TABLE_KEYS | generators,
            "trace file": set(C.TRACE_FILE_KEYS), "backend": set(C.BACKEND_KEYS),
            "sim config": {f.name for f in fields(SimConfig)}, "policies": set(C.POLICY_KEYS),
            "design": set(C.DESIGN_KEYS)}


def trace_variants(kind: str) -> list[dict]:
    return [v for v in SCHEMA["properties"]["trace"]["oneOf"] if kind in v["required"]]


def schema_keys() -> dict[str, set[str]]:
    props = SCHEMA["properties"]
    return {"top": set(props), "slo": set(props["slo"]["properties"]),
            "trace generator": set().union(*(v["properties"] for v in
                                             trace_variants("generator"))),
            "trace file": set().union(*(v["properties"] for v in trace_variants("path"))),
            "backend": set(props["backend"]["properties"]),
            "sim config": set(SCHEMA["$defs"]["sim_config"]["properties"]),
            "policies": set(props["policies"]["items"]["properties"]),
            "design": set(props["design"]["properties"])}


def reference_rows(text: str = REFERENCE) -> dict[str, dict[str, list[str]]]:
    """CAMPAIGN.md's tables: heading -> {key: [type, default, range, meaning]}."""
    out: dict[str, dict[str, list[str]]] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            out[heading] = {}
            continue
        m = re.match(r"^\| `([^`]+)` \|(.*)\|\s*$", line)
        if m and heading is not None:
            out[heading][m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return out


def reference_keys() -> dict[str, set[str]]:
    rows = reference_rows()
    return {table: set(rows.get(heading, {})) for table, heading in SECTIONS.items()}


@pytest.mark.parametrize("table", sorted(SECTIONS))
def test_reference_schema_and_reader_name_the_same_keys(table):
    accepted = reader_keys()[table]
    assert schema_keys()[table] == accepted, table
    assert reference_keys()[table] == accepted, table


@pytest.mark.parametrize("name", sorted(ARRIVALS))
def test_each_generator_takes_exactly_its_parameters_in_the_schema(name):
    variants = [v for v in trace_variants("generator")
                if name in v["properties"]["generator"]["enum"]]
    assert len(variants) == 1
    assert set(variants[0]["properties"]) == GENERATOR_TABLE_KEYS | generator_parameters(
        ARRIVALS[name])


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


MINIMAL = {"regime": "r", "seeds": 2, "horizon_s": 600.0, "slo": {"e2e_s": 8.0},
           "trace": {"generator": "poisson", "rate": 1.0}, "policies": [{"name": "wa"}]}
# top-level key -> the Campaign attribute its default lands in
TOP_DEFAULTS = {"matched_random_draws": "draws", "merge_duration_s": "merge_duration_s",
                "inner_step_s": "inner_step_s", "h_min": "h_min", "h_max": "h_max",
                "description": "description"}


def cell_number(cell: str):
    try:
        return json.loads(cell.strip("`").replace(",", ""))
    except ValueError:
        return None


def test_top_level_defaults_agree_in_schema_reference_and_reader():
    camp = C.parse_campaign(copy.deepcopy(MINIMAL))
    rows = reference_rows()[SECTIONS["top"]]
    for key, attr in TOP_DEFAULTS.items():
        assert SCHEMA["properties"][key]["default"] == getattr(camp, attr), key
        documented = rows[key][1]
        assert (cell_number(documented) if key != "description" else
                json.loads(documented.strip("`"))) == getattr(camp, attr), key
    assert SCHEMA["properties"]["design"]["properties"]["kind"]["default"] == \
        camp.design["kind"] == "fixed"


def test_simulator_defaults_agree_in_schema_reference_and_reader():
    defaults = SimConfig().as_dict()
    schema = SCHEMA["$defs"]["sim_config"]["properties"]
    rows = reference_rows()[SECTIONS["sim config"]]
    for key, value in defaults.items():
        assert schema[key]["default"] == value, key
        documented = rows[key][1]
        if documented == "none":
            assert value is None, key
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            assert cell_number(documented) == value, key


def campaign_files() -> list[Path]:
    """The bundled campaign and every example campaign (a TOML file with [[policies]])."""
    files = sorted((REPO / "evalkit/replay/campaigns").glob("*.toml"))
    files += sorted(p for p in (REPO / "examples").rglob("*.toml") if not p.is_symlink()
                    and "[[policies]]" in p.read_text())
    return files


def test_there_are_example_campaigns_to_check():
    names = {p.name for p in campaign_files()}
    assert {"bursty.toml", "sequential.toml", "azure.toml", "nonperiodic.toml"} <= names


@pytest.mark.parametrize("path", campaign_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_bundled_and_example_campaigns_are_valid_under_schema_and_reader(path):
    data = tomllib.loads(path.read_text())
    assert [e.message for e in VALIDATOR.iter_errors(data)] == []
    C.load_campaign(path)


def maximal_campaign() -> dict:
    """A campaign that sets every key of every table the reader reads (a generator trace)."""
    sim = {"max_batch": 64, "prefill_budget_tokens": 1024, "kv_capacity_tokens": 100_000,
           "iter_base_s": 0.005, "decode_per_seq_s": 2e-5, "prefill_per_token_s": 2e-5,
           "train_colocated": True, "train_slowdown": 1.3, "merge_mechanisms": ["gpu", "host"],
           "merge_extra": {"gpu": 1.2}, "step_jitter_cv": 0.01, "send_jitter_s": 0.001,
           "tokens_per_step": 2048, "merge_bytes": 1000, "drain_limit_s": 100.0,
           "prefill_base_s": 0.001, "prefill_pass": True, "merge_slowdown": 1.5,
           "merge_duration_quantiles": [7.0, 8.0, 9.0], "send_lag_quantiles": [0.0, 0.002],
           "response_overhead_s": 0.01, "step_s": 0.5, "twin_sha256": "0" * 64,
           "twin_name": "t"}
    return {"regime": "full", "description": "every key", "seeds": [0, 3, 5],
            "matched_random_draws": 2, "horizon_s": 600.0, "merge_duration_s": 8.0,
            "inner_step_s": 0.5, "h_min": 40, "h_max": 200, "min_gap_s": 20.0,
            "max_gap_s": 100.0, "slo": {"e2e_s": 8.0, "ttft_s": 1.0, "tpot_s": 0.1},
            "trace": {"generator": "square_wave", "period_s": 60.0, "burst_s": 20.0,
                      "quiet_rate": 1.0, "busy_rate": 5.0, "phase_s": 5.0,
                      "duration_s": 600.0, "name": "sq", "prompt_tokens": "lognormal:256,0.5",
                      "output_tokens": 64},
            "backend": {"name": "sim", "config": sim,
                        "sim_params": str(REPO / "examples" / "cpu_real" / "twin.toml")},
            "policies": [{"name": "wa", "label": "wa-1", "params": {"tau": 0.1}, "draws": 1},
                         {"name": "calibrated_offline", "params": {"k_from": "wa-1"}}],
            "design": {"kind": "sequential", "max_seeds": 3, "batch": 2, "first_look": 2,
                       "spending": "hwang-shih-decani", "gamma": -2.0, "futility": "rising"}}


def file_trace_campaign() -> dict:
    data = maximal_campaign()
    data["trace"] = {"path": "trace.parquet", "format": "parquet", "start_s": 0.0,
                     "end_s": 500.0, "time_scale": 1.5, "name": "t", "sort": True,
                     "seed_stride_s": 30.0}
    return data


def set_keys(data: dict) -> dict[str, set[str]]:
    return {"top": set(data), "slo": set(data["slo"]), "trace": set(data["trace"]),
            "backend": set(data["backend"]), "sim config": set(data["backend"]["config"]),
            "policies": set().union(*map(set, data["policies"])), "design": set(data["design"])}


def test_a_campaign_setting_every_key_is_valid_under_schema_and_reader():
    readers = reader_keys()
    for data, trace_table in ((maximal_campaign(), "trace generator"),
                              (file_trace_campaign(), "trace file")):
        keys = set_keys(data)
        for table in ("top", "slo", "backend", "sim config", "policies", "design"):
            assert keys[table] == readers[table], table
        assert keys["trace"] <= readers[trace_table]
        assert [e.message for e in VALIDATOR.iter_errors(data)] == []
        C.parse_campaign(data)


def with_change(edit):
    data = maximal_campaign()
    edit(data)
    return data


INVALID = {
    "unknown top-level key": lambda d: d.update(runs=3),
    "no regime": lambda d: d.pop("regime"),
    "regime with a space": lambda d: d.update(regime="two words"),
    "seeds = 0": lambda d: d.update(seeds=0),
    "repeated seeds": lambda d: d.update(seeds=[1, 1]),
    "negative draws": lambda d: d.update(matched_random_draws=-1),
    "horizon over 30 days": lambda d: d.update(horizon_s=3.0e6),
    "zero merge duration": lambda d: d.update(merge_duration_s=0.0),
    "h_min = 0": lambda d: d.update(h_min=0),
    "slo without e2e_s": lambda d: d["slo"].pop("e2e_s"),
    "unknown slo key": lambda d: d["slo"].update(p99_s=2.0),
    "trace with generator and path": lambda d: d["trace"].update(path="t.parquet"),
    "unknown generator": lambda d: d["trace"].update(generator="uniform"),
    "unknown trace-file key": lambda d: d.update(trace={"path": "t.parquet", "speed": 2.0}),
    "unknown backend": lambda d: d["backend"].update(name="tpu"),
    "unknown simulator setting": lambda d: d["backend"]["config"].update(warp=9),
    "negative simulator jitter": lambda d: d["backend"]["config"].update(send_jitter_s=-1.0),
    "unknown merge mechanism": lambda d: d["backend"]["config"].update(
        merge_mechanisms=["pigeon"]),
    "no policies": lambda d: d.update(policies=[]),
    "policy without a name": lambda d: d["policies"][0].pop("name"),
    "reserved policy name": lambda d: d["policies"].append({"name": "no_sync"}),
    "label starting mr-": lambda d: d["policies"][0].update(label="mr-wa"),
    "unknown policy key": lambda d: d["policies"][0].update(weight=2),
    "policy draws over the limit": lambda d: d["policies"][0].update(draws=1001),
    "unknown design kind": lambda d: d["design"].update(kind="adaptive"),
    "batch in a fixed design": lambda d: d.update(design={"kind": "fixed", "batch": 2}),
    "first look in a fixed design": lambda d: d.update(design={"kind": "fixed",
                                                               "first_look": 4}),
    "first look at 1 seed": lambda d: d["design"].update(first_look=1),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_campaign_is_refused_by_schema_and_reader(case):
    assert not list(VALIDATOR.iter_errors(maximal_campaign()))     # the change alone is bad
    data = with_change(INVALID[case])
    assert list(VALIDATOR.iter_errors(data)), f"the schema accepts: {case}"
    with pytest.raises(InputError):
        C.parse_campaign(data)


def test_another_generators_parameter_is_refused_by_schema_and_preflight():
    from evalkit.replay.job import build_trace

    data = with_change(lambda d: d["trace"].update(rate=3.0))     # a poisson parameter
    assert list(VALIDATOR.iter_errors(data))
    camp = C.parse_campaign(data)
    with pytest.raises(InputError, match="rate"):
        build_trace(camp, 0)


def test_the_key_comparison_sees_a_key_the_reference_lacks():
    text = REFERENCE.replace("| `tpot_s` |", "| tpot_s |")
    assert "tpot_s" not in {k for k in reference_rows(text)[SECTIONS["slo"]]}
    assert "tpot_s" in reader_keys()["slo"]


def test_reference_and_schema_are_package_data():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["evalkit"]
    for name in ("replay/CAMPAIGN.md", "replay/schemas/campaign.schema.json"):
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name
