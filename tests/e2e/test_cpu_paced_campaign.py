"""The committed paced CPU campaign (examples/cpu_paced): the frozen plan's every run is there,
real, complete and small; the audit's design checks pass for every claim; RESULTS.md is what
examples/make_results.py renders from the committed outputs; and the committed audit is what
`evalkit audit` prints on the runs under the reviewer's challenge (slow)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.document import words as wording
from evalkit.runlog.execution_order import ATTEMPTS_DIR
from evalkit.runlog.plan import plan_sha256, read_plan
from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
PACED = REPO / "examples" / "cpu_paced"
RUNS = PACED / "runs"


def _metas() -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(RUNS.glob("*/run.json"))}


def test_every_planned_run_is_there_real_complete_and_small():
    plan = read_plan(RUNS)
    metas = _metas()
    planned = {r["run_id"] for r in plan["runs"]}
    assert set(metas) == planned
    assert all(m["backend"] == "torch" and m["complete"] for m in metas.values())
    assert {m["plan_sha256"] for m in metas.values()} == {plan_sha256(plan)}
    assert plan.get("challenge"), "the campaign was frozen under a challenge"
    size = sum(p.stat().st_size for p in RUNS.rglob("*") if p.is_file())
    assert size < 10 * 2**20
    res = CliRunner().invoke(cli, ["validate", str(RUNS)])
    assert res.exit_code == 0, res.output


def test_every_run_kept_its_clock_and_each_re_run_its_failed_attempt():
    for run_id, meta in _metas().items():
        pacing = meta["settings"]["effective"]["pacing"]
        limit = meta["settings"]["effective"]["max_missed_share"]
        assert pacing["missed_share"] <= limit, run_id
        for n, attempt in enumerate(meta["run_order"].get("attempts", []), 1):
            assert attempt["error"] and attempt["position"] == meta["run_order"]["position"]
            if attempt["run_json_sha256"] is not None:
                kept = RUNS / ATTEMPTS_DIR / f"{run_id}.{n}.run.json"
                assert hashlib.sha256(kept.read_bytes()).hexdigest() == \
                    attempt["run_json_sha256"]


def test_every_design_check_passes_for_every_claim():
    audit = json.loads((PACED / "audit_real.json").read_text())
    assert {c["policy"] for c in audit["claims"]} == {"ewma", "fixed_h"}
    for claim in audit["claims"]:
        status = {c["name"]: c["passed"] for c in claim["checks"]}
        for name in wording.DESIGN_CHECKS:
            assert status.get(name) is True, (claim["policy"], name)


def test_results_md_is_rendered_from_the_committed_outputs():
    mr = load_script(REPO / "examples" / "make_results.py", "make_results")
    assert mr.render(PACED) == (PACED / "RESULTS.md").read_text(), \
        "RESULTS.md is stale: run python examples/make_results.py examples/cpu_paced --render"


def test_results_md_gives_the_merge_ratio_and_the_twins_coverage():
    fit = json.loads((PACED / "fit.json").read_text())
    text = (PACED / "RESULTS.md").read_text()
    ratio = fit["parameters"]["merge_ratio"]
    assert f"{ratio['value']:.4g}" in text
    assert all(f"{x:.4f}" in text for x in ratio["ci"])
    for variant in fit["predictive"]["variants"].values():
        c = variant["coverage"]
        assert f"{c['n_inside']} of {c['n_runs']} held-out runs" in text
    assert "80%, 97%" in text


@pytest.mark.slow
def test_audit_of_the_committed_runs_reproduces_audit_real_json(tmp_path):
    res = CliRunner().invoke(cli, ["audit", str(RUNS), "--out", str(tmp_path), "--challenge",
                                   str(PACED / "reviewer" / "challenge.json")])
    assert res.exit_code in (0, 1), res.output
    got = json.loads((tmp_path / "audit.json").read_text())
    want = json.loads((PACED / "audit_real.json").read_text())
    for key in ("claims", "regimes"):
        assert got[key] == want[key], \
            f"audit_real.json is stale ({key}): run python examples/make_results.py examples/cpu_paced"


def _fit(cov_request, cov_run, p95_in, p95_out, width, mae):
    def variant(cov):
        return {"coverage": {"calibrated": 0.8 <= cov <= 0.97, "coverage": cov,
                             "interval_width_mean": width}}
    return {"heldout": {"p95_in_rel_err": p95_in, "p95_out_rel_err": p95_out, "v_mae": mae},
            "predictive": {"variants": {"request": variant(cov_request),
                                        "request+run": variant(cov_run)}}}


@pytest.mark.parametrize("fit, has", [
    (_fit(0.40, 0.62, 0.150, 0.054, 0.0364, 0.0188),
     ["from 40.0% to 62.0% — part of the miss", "(2.8×) — a constant slowdown",
      "varies 2.1× as much as the twin"]),
    (_fit(0.40, 0.40, 0.060, 0.054, 0.0700, 0.0188),
     ["host load is not what misses", "predicted as well as the rest",
      "the twin's own spread matches"]),
])
def test_which_part_of_the_twin_misses_is_read_off_the_fit(fit, has):
    mr = load_script(REPO / "examples" / "make_results.py", "make_results")
    text = "\n".join(mr.miss_lines(fit))
    for words in has:
        assert words in text, text


def test_a_calibrated_twin_gets_no_miss_paragraph():
    mr = load_script(REPO / "examples" / "make_results.py", "make_results")
    assert mr.miss_lines(_fit(0.9, 0.92, 0.2, 0.05, 0.01, 0.05)) == []
