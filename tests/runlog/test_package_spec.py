"""FORMAT.md and the machine-readable schemas: in step with schema.py, true of the files
evalkit writes, and enough for an independent writer (tests/support/spec_writer.py) to target."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.runlog import codes, export, schema
from evalkit.runlog.validate import validate_runs

from tests.support import spec_writer

TESTS = Path(__file__).resolve().parents[1]

jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema (the dev extra)")


# ----------------------------------------------------------------------------- in step

def test_generated_schemas_and_format_tables_are_in_step_with_schema_py():
    assert export.stale() == [], "run: python -m evalkit.runlog.export"


def test_a_change_to_schema_py_shows_up_as_stale_files(monkeypatch):
    extra = schema.MetaKey("made_up_key", ("string",), False, "a key no file documents")
    monkeypatch.setattr(schema, "META_KEYS", schema.META_KEYS + (extra,))
    assert {p.name for p in export.stale()} == {"run.schema.json", "FORMAT.md"}
    monkeypatch.undo()
    cols = dict(schema.TABLES, merges=schema.MERGES_COLUMNS[:-1])
    monkeypatch.setattr(schema, "TABLES", cols)
    assert {p.name for p in export.stale()} == {"merges.arrow.json", "FORMAT.md"}


def test_format_md_has_every_section_code_key_and_column():
    text = export.FORMAT_MD.read_text()
    heads = dict(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? (.+)$", text, re.M))
    assert heads == codes.SECTIONS
    assert re.search(r"^# .*version 1$", text, re.M)
    for inv in codes.INVARIANTS:
        assert f"| {inv.code} | {inv.severity} | §{inv.section} |" in text
    for key in schema.META_KEYS:
        assert f"| `{key.name}` |" in text
    for table, cols in schema.TABLES.items():
        for col in cols:
            assert f"| `{col.name}` | {schema.ARROW_TYPES[col.kind]} |" in text, (table, col)


# ----------------------------------------------------------------------------- fixtures

def _toy(tmp_path, seeds=1, draws=1) -> Path:
    runs = tmp_path / "toy"
    spec_writer.write_campaign(str(runs), seeds=seeds, draws=draws)
    return runs


def _validator():
    return jsonschema.Draft202012Validator(
        json.loads((export.SCHEMA_DIR / "run.schema.json").read_text()))


def test_json_schema_accepts_what_evalkit_and_the_spec_writer_write(tmp_path, fixtures_dir):
    from evalkit.replay.runner import run_one
    from evalkit.replay.spec import ReplaySpec
    from evalkit.replay.traces import generate

    tr = generate("square_wave", seed=0, period_s=60.0, burst_s=20.0, quiet_rate=2.0,
                  busy_rate=8.0, duration_s=150.0)
    run_one(ReplaySpec("fresh", 0, "r", horizon_s=160.0, h_min=40, h_max=120), tr, "ewma",
            tmp_path / "sim")
    metas = [tmp_path / "sim" / "fresh" / "run.json"]
    metas += sorted(fixtures_dir.glob("runs/**/run.json"))[::25]
    metas += sorted(_toy(tmp_path).glob("*/run.json"))
    val = _validator()
    for path in metas:
        errors = [e.message for e in val.iter_errors(json.loads(path.read_text()))]
        assert errors == [], (path, errors)
    fresh = json.loads(metas[0].read_text())
    assert fresh["policy_identity"]["name"] == "ewma"


@pytest.mark.parametrize("edit", [
    lambda m: m.pop("seed"),
    lambda m: m.update(role="boss"),
    lambda m: m.update(draw=1),                            # a policy run with a draw
    lambda m: m.update(role="matched_random"),             # ... without one
    lambda m: m.update(policy="no_sync", role="no_sync", oracle=True),
    lambda m: m["slo"].update(e2e_s=0),
    lambda m: m.update(horizon_s=-1.0),
    lambda m: m["trace"].pop("sha256"),
    lambda m: m.update(schema_version=2),
    lambda m: m.update(backend="mainframe"),
    lambda m: m["corridor"].update(min_gap_s=-1.0),
])
def test_json_schema_and_validate_both_refuse_a_broken_run_json(tmp_path, edit):
    runs = _toy(tmp_path)
    path = runs / "toy__quiet_merge__s0" / "run.json"
    meta = json.loads(path.read_text())
    assert list(_validator().iter_errors(meta)) == []
    edit(meta)
    assert list(_validator().iter_errors(meta)), "the JSON Schema let it through"
    path.write_text(json.dumps(meta))
    assert not validate_runs(runs).ok, "validate let it through"


def test_arrow_schemas_describe_the_tables_evalkit_writes(fixtures_dir, tmp_path):
    run_dirs = [p.parent for p in sorted(fixtures_dir.glob("runs/**/run.json"))[::40]]
    run_dirs += [p.parent for p in _toy(tmp_path).glob("*/run.json")]
    for table in schema.TABLES:
        doc = json.loads((export.SCHEMA_DIR / f"{table}.arrow.json").read_text())
        required = {f["name"]: f for f in doc["fields"] if f["required"]}
        want = export.arrow_schema(table)
        assert [f.name for f in want] == list(required)
        for run_dir in run_dirs:
            path = run_dir / f"{table}.parquet"
            if not path.exists():
                assert table not in schema.REQUIRED_TABLES
                continue
            got = pq.read_schema(path)
            for f in want:
                t = got.field(f.name).type
                assert t == f.type or pa.types.is_null(t) or (
                    f.type == pa.float64() and pa.types.is_integer(t)), (path, f.name, t)


# ----------------------------------------------------------------------------- codes

def _meta_edit(fn):
    def apply(runs):
        p = runs / "toy__quiet_merge__s0" / "run.json"
        meta = json.loads(p.read_text())
        fn(meta)
        p.write_text(json.dumps(meta))
    return apply


def _table_edit(name, fn, run="toy__quiet_merge__s0"):
    def apply(runs):
        p = runs / run / f"{name}.parquet"
        pq.write_table(fn(pq.read_table(p)), p)
    return apply


def _set(col, values_fn):
    def fn(t):
        i = t.column_names.index(col)
        return t.set_column(i, col, values_fn(t.column(col)))
    return fn


def _first(col, value, type_=pa.float64()):
    return _set(col, lambda c: pa.array([value] + c.to_pylist()[1:], c.type if type_ is None
                                        else type_))


def _steps(runs, start_end):
    p = runs / "toy__quiet_merge__s0" / "steps.parquet"
    pq.write_table(pa.table({"step": pa.array(range(len(start_end)), pa.int64()),
                             "start_s": pa.array([a for a, _ in start_end], pa.float64()),
                             "end_s": pa.array([b for _, b in start_end], pa.float64()),
                             "loss": pa.array([1.0] * len(start_end)),
                             "tokens": pa.array([1] * len(start_end), pa.int64())}), p)


def _write(path, text):
    def apply(runs):
        (runs / path).parent.mkdir(parents=True, exist_ok=True)
        (runs / path).write_text(text)
    return apply


def _truncate(runs):
    p = runs / "toy__quiet_merge__s0" / "requests.parquet"
    p.write_bytes(p.read_bytes()[:100])


def _duplicate(runs):
    shutil.copytree(runs / "toy__quiet_merge__s0", runs / "copy")


def _moved_aside(runs):
    (runs / "toy__quiet_merge__s0").rename(runs / ".toy__quiet_merge__s0.old-1234")


def _clear(runs):
    for p in runs.iterdir():
        shutil.rmtree(p)


MS = lambda c: pc.multiply(c, 1000.0)  # noqa: E731
CASES = {
    "L01": lambda runs: shutil.rmtree(runs),
    "L02": _clear,
    "L03": _write("orphan/requests.parquet", "x"),
    "L04": _write(".toy__x.tmp-abcd/run.json", "{}"),
    "L05": _moved_aside,
    "L06": _duplicate,
    "M01": _write("toy__quiet_merge__s0/run.json", "{not json"),
    "M02": _meta_edit(lambda m: m.update(schema_version=7)),
    "M03": _meta_edit(lambda m: m.update(complete=False)),
    "M04": _meta_edit(lambda m: m.pop("regime")),
    "M05": _meta_edit(lambda m: m.update(seed="zero")),
    "M06": _meta_edit(lambda m: m.update(run_id="other")),
    "M07": _meta_edit(lambda m: m["corridor"].update(min_gap_s=200.0)),
    "M08": _meta_edit(lambda m: m.update(draw=3)),
    "M09": _meta_edit(lambda m: m.update(policy="no_sync")),
    "T01": lambda runs: (runs / "toy__quiet_merge__s0" / "merges.parquet").unlink(),
    "T02": _truncate,
    "T03": _table_edit("requests", lambda t: t.drop(["sent_s"])),
    "T04": _table_edit("requests", _set("ok", lambda c: pc.cast(c, pa.string()))),
    "T05": _table_edit("requests", _first("arrival_s", None)),
    "R01": _table_edit("requests", lambda t: t.slice(0, 0)),
    "R02": _table_edit("requests", _set("request_id", lambda c: pa.array(
        [0] + c.to_pylist()[:-1], pa.int64()))),
    "R03": _table_edit("requests", lambda t: _first("sent_s", -1.0)(
        _first("arrival_s", -1.0)(t))),
    "R04": _table_edit("requests", _first("end_s", 0.0)),
    "R05": _table_edit("requests", _set("sent_s", lambda c: pc.subtract(c, 0.5))),
    "R06": _table_edit("requests", _first("end_s", None)),
    "R07": _table_edit("requests", _first("prompt_tokens", -3, pa.int64())),
    "R08": _table_edit("requests", lambda t: _set("first_token_s", MS)(_set("end_s", MS)(
        _set("sent_s", MS)(_set("arrival_s", MS)(t))))),
    "G01": _table_edit("merges", _first("start_s", float("nan"))),
    "G02": lambda runs: shutil.copy(runs / "toy__quiet_merge__s0" / "merges.parquet",
                                    runs / "toy__no_sync__s0" / "merges.parquet"),
    "G03": _table_edit("merges", _set("merge_idx", lambda c: pa.array([0] * len(c),
                                                                       pa.int64()))),
    "G04": _table_edit("merges", _first("end_s", 10.0)),
    "G05": _table_edit("merges", _set("end_s", lambda c: pc.add(c, 150.0))),
    "G06": _table_edit("merges", _set("end_s", lambda c: pa.array(
        [s * 1000.0 for s in c.to_pylist()], pa.float64()))),
    "S01": lambda runs: _steps(runs, [(-1.0, 0.5), (0.5, 1.0)]),
    "S02": lambda runs: _steps(runs, [(0.0, 0.5), (2.0, 1.0)]),
}
UNTRIGGERABLE = {
    "L07": "needs two supported schema versions; version 1 is the only one",
    "L08": "needs a path the test user may not read (tests may run as root)",
}


def test_every_invariant_code_has_a_case_here():
    assert set(CASES) | set(UNTRIGGERABLE) == set(codes.BY_CODE)


@pytest.mark.parametrize("code", sorted(CASES))
def test_validate_names_the_code_and_the_spec_section(tmp_path, code):
    runs = _toy(tmp_path)
    assert validate_runs(runs).problems == []
    CASES[code](runs)
    report = validate_runs(runs)
    found = {getattr(codes.classify(p), "code", None) for p in report.problems}
    assert code in found, [p.format() for p in report.problems]
    assert None not in found, [p.format() for p in report.problems if not codes.classify(p)]
    inv = codes.BY_CODE[code]
    res = CliRunner().invoke(cli, ["validate", str(runs)])
    assert f"[{code}, FORMAT.md §{inv.section} {codes.SECTIONS[inv.section]}]" in res.output
    assert res.exit_code == (0 if inv.severity != "error" and report.ok else 2)


def test_a_problem_no_rule_knows_still_names_its_files_section():
    from evalkit.runlog.validate.problem import Problem
    p = Problem("r", "runs/r/merges.parquet", "x", "something new", "fix")
    assert codes.classify(p) is None
    assert codes.spec_ref(p) == "no code, FORMAT.md §4.3 merges.parquet"
    assert codes.spec_ref(Problem("r", "runs/r/run.json", None, "new", "f")).endswith(
        "§3 run.json")


# ----------------------------------------------------------------------------- writer

def test_the_spec_writer_imports_nothing_of_evalkit():
    tree = ast.parse((TESTS / "support" / "spec_writer.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names and not any(n.split(".")[0] == "evalkit" for n in names), names
    assert {n.split(".")[0] for n in names} <= {"__future__", "json", "os", "random",
                                                 "pyarrow", "sys"}


def test_a_campaign_written_from_the_spec_alone_validates_and_audits(tmp_path):
    from dataclasses import replace

    from evalkit.audit import audit_campaign
    from evalkit.audit.checks.core import Status
    from evalkit.audit.protocol import load_protocol

    runs = _toy(tmp_path, seeds=6, draws=4)
    assert validate_runs(runs).problems == []
    # the spec's writer records backend "import": its runs' word counts only when vouched for
    vouched = {"pairing_real", "schedules_in_corridor", "merge_durations_match",
               "open_loop_sending"}
    unvouched = audit_campaign(runs).claim("quiet_merge")
    assert {c.name for c in unvouched.checks if c.status is Status.NOT_EVALUABLE} >= vouched
    audit = audit_campaign(runs, protocol=replace(load_protocol(), accept_vouched=True))
    assert audit.runset.excluded == []
    claim = audit.claim("quiet_merge")
    passed = {c.name for c in claim.checks if c.passed}
    assert {"k_match", "policy_runs_complete", "no_sync_present"} <= passed
    assert {c.name for c in claim.checks if c.status is Status.VOUCHED} >= vouched
    assert all("real pairing" in c.found or "schedules in F_K" in c.found
               or "windows of D" in c.found or "open loop" in c.found
               for c in claim.checks if c.name in vouched)
    assert claim.tier == "matched_budget"
