"""The committed CPU-real evidence, and a CI-sized slice of its campaign on the real rig.

* the committed runs (examples/cpu_real/runs) are real, valid, powered and small;
* RESULTS.md is exactly what make_results.py renders from the committed JSON and runs, and
  the committed audit_real.json is what `evalkit audit examples/cpu_real/runs` prints (slow);
* the slice: 3 seeds of the campaign (no-sync + ewma, 8 s horizon) on the torch backend,
  then `evalkit sim fit`, the twin harness through the campaign key and the audit (slow).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from tests.support.protocols import BUNDLED
from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
CPU_REAL = REPO / "examples" / "cpu_real"


def _runs(path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(path.glob("*/run.json"))]


def test_committed_runs_are_real_powered_and_small():
    metas = _runs(CPU_REAL / "runs")
    assert metas and all(m["backend"] == "torch" and m["complete"] for m in metas)
    by_seed: dict[int, list[str]] = {}
    for m in metas:
        by_seed.setdefault(m["seed"], []).append(m["run_id"])
    assert len(by_seed) >= 8
    for seed, ids in by_seed.items():
        names = " ".join(ids)
        for kind in ("__no_sync__", "__ewma__", "__fixed_h__", "__mr-ewma__", "__mr-fixed_h__"):
            assert kind in names, f"seed {seed} lacks {kind}"
        assert sum("__mr-ewma__" in i for i in ids) >= 2
    size = sum(p.stat().st_size for p in (CPU_REAL / "runs").rglob("*") if p.is_file())
    assert size < 10 * 2**20            # 54 runs of 50 s with every request and step: ~8 MB
    res = CliRunner().invoke(cli, ["validate", str(CPU_REAL / "runs")])
    assert res.exit_code == 0, res.output


def test_twin_runs_use_the_committed_twin():
    sha = hashlib.sha256((CPU_REAL / "twin.toml").read_bytes()).hexdigest()
    metas = _runs(CPU_REAL / "twin_runs")
    # every real run has its twin, except those the twin's sweep recorded it could not make
    failed = json.loads((CPU_REAL / "twin_harness_failed.json").read_text())
    assert len(metas) + len(failed) == len(_runs(CPU_REAL / "runs"))
    made = {m["run_id"] for m in metas}
    assert all(f.split(":")[0] not in made for f in failed)
    assert all(m["backend"] == "sim" and m["settings"]["effective"]["twin_sha256"] == sha
               for m in metas)
    fit = json.loads((CPU_REAL / "fit.json").read_text())
    assert fit["twin"]["sha256"] == sha
    for key in ("v_mae", "p95_rel_err"):
        assert isinstance(fit["heldout"][key], float)
    a = tomllib.loads((CPU_REAL / "campaign.toml").read_text())
    b = tomllib.loads((CPU_REAL / "twin_campaign.toml").read_text())
    for key in set(a) | set(b):
        if key not in ("regime", "description", "backend"):
            assert a.get(key) == b.get(key), key


def _make_results():
    return load_script(REPO / "examples" / "make_results.py", "make_results")


def test_results_md_is_rendered_from_the_committed_outputs():
    text = _make_results().render(CPU_REAL)
    assert text == (CPU_REAL / "RESULTS.md").read_text(), \
        "RESULTS.md is stale: run python examples/make_results.py examples/cpu_real --render"


@pytest.mark.slow
def test_audit_of_committed_runs_reproduces_audit_real_json(tmp_path):
    res = CliRunner().invoke(cli, ["audit", str(CPU_REAL / "runs"), "--out", str(tmp_path)])
    assert res.exit_code in (0, 1), res.output
    got = json.loads((tmp_path / "audit.json").read_text())
    want = json.loads((CPU_REAL / "audit_real.json").read_text())
    for key in ("claims", "regimes", "transfer"):
        assert got[key] == want[key], \
            f"audit_real.json is stale ({key}): run python examples/make_results.py examples/cpu_real"


@pytest.mark.slow
@pytest.mark.torch
def test_campaign_slice_on_the_real_rig_fits_a_twin(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    text = (CPU_REAL / "campaign.toml").read_text()
    data = tomllib.loads(text)
    data.update(seeds=3, horizon_s=8.0, matched_random_draws=0)
    data["policies"] = [p for p in data["policies"] if p["name"] == "ewma"]
    from evalkit.replay.backends.torch.rig import close_rig
    from evalkit.replay.campaign import parse_campaign
    from evalkit.replay.sweep import run_campaign

    runs = tmp_path / "runs"
    try:
        summary = run_campaign(parse_campaign(data), runs, n_jobs=1, progress=False,
                               protocol=BUNDLED)
    finally:
        close_rig()
    assert summary.ok, summary.format()
    res = CliRunner().invoke(cli, ["sim", "fit", str(runs), "--out", str(tmp_path / "twin.toml"),
                                   "--report", str(tmp_path / "fit.json"), "--bootstrap", "20"])
    assert res.exit_code == 0, res.output
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["source"]["n_runs"] == 6 and fit["parameters"]["merge_ratio"]["ci"]
    assert 0 <= fit["heldout"]["v_mae"] <= 1 and fit["heldout"]["p95_rel_err"] >= 0
    twin = dict(data, regime="slice_twin", backend={"name": "sim",
                                                     "sim_params": "twin.toml"})
    lines = (tmp_path / "twin_campaign.toml")
    from evalkit.replay.campaign import load_campaign
    lines.write_text(_toml(twin))
    camp = load_campaign(lines)
    assert run_campaign(camp, tmp_path / "twin_runs", n_jobs=1, progress=False,
                        protocol=BUNDLED).ok
    res = CliRunner().invoke(cli, ["audit", str(tmp_path), "--out", str(tmp_path / "audit")])
    assert res.exit_code in (0, 1), res.output
    audit = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert {c["regime"] for c in audit["claims"]} == {"cpu_real", "slice_twin"}


def _toml(data: dict) -> str:
    """A campaign dict as TOML (scalars, flat tables, [[policies]])."""
    def val(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        return repr(v)
    top = [f"{k} = {val(v)}" for k, v in data.items() if not isinstance(v, (dict, list))]
    out = top[:]
    for k, v in data.items():
        if isinstance(v, dict):
            out.append(f"[{k}]")
            out += [f"{kk} = {val(vv)}" for kk, vv in v.items() if not isinstance(vv, dict)]
            for kk, vv in v.items():
                if isinstance(vv, dict):
                    out.append(f"[{k}.{kk}]")
                    out += [f"{a} = {val(b)}" for a, b in vv.items()]
    for p in data.get("policies", []):
        out.append("[[policies]]")
        out += [f"{k} = {val(v)}" for k, v in p.items()]
    return "\n".join(out) + "\n"


def test_the_pilot_ran_the_campaigns_design_and_chose_its_seeds():
    """The committed pilot (examples/cpu_real_pilot) is real, valid, runs the campaign's
    design on other seeds, and its power.json (from `evalkit plan power`) names the number
    of seeds the campaign runs."""
    pilot = REPO / "examples" / "cpu_real_pilot"
    camp = tomllib.loads((CPU_REAL / "campaign.toml").read_text())
    pcamp = tomllib.loads((pilot / "campaign.toml").read_text())
    for key in ("horizon_s", "merge_duration_s", "h_min", "h_max", "min_gap_s", "max_gap_s",
                "slo", "trace", "backend"):
        assert pcamp[key] == camp[key], key
    metas = _runs(pilot / "runs")
    assert metas and all(m["backend"] == "torch" and m["complete"] for m in metas)
    assert {m["seed"] for m in metas}.isdisjoint(range(camp["seeds"]))
    res = CliRunner().invoke(cli, ["validate", str(pilot / "runs")])
    assert res.exit_code == 0, res.output
    power = json.loads((pilot / "power.json").read_text())
    assert power["seeds"] == camp["seeds"] and power["slo_e2e_s"] == camp["slo"]["e2e_s"]
    assert power["draws_per_seed"] == camp["matched_random_draws"]
    # the pilot's within-seed spread of a draw is what the power rests on
    assert all(g["within_seed_sd"] > 0 for g in power["gains"])
    needed = [g["seeds_needed"] for g in power["gains"]]
    assert any(n is not None and n <= power["max_seeds"] for n in needed)
    assert str(power["seeds"]) in power["chosen"]
