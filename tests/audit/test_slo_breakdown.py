"""V counts every configured SLO (e2e, TTFT, TPOT; failed requests included), and the report
shows the breakdown per SLO."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli

from tests.support.rule_attacks import check, edit_meta, edit_requests, gate, run_dirs, runs


# ------------------------------------------------------------------ V counts every SLO

def _configure_slo(root: Path, key: str, seconds: float) -> None:
    """The same extra SLO in every run of the campaign (like for like)."""
    for d in run_dirs(root):
        edit_meta(d, lambda m: m["slo"].update({key: seconds}))


def _late_first_tokens(req: pd.DataFrame) -> pd.DataFrame:
    """First token at 80% of the request's latency; the end (e2e latency) is unchanged."""
    req = req.copy()
    req["first_token_s"] = req.arrival_s + 0.8 * (req.end_s - req.arrival_s)
    return req


def _early_first_tokens(req: pd.DataFrame) -> pd.DataFrame:
    """First token 10 ms after arrival, the end unchanged: every later token comes slower."""
    req = req.copy()
    req["first_token_s"] = req.arrival_s + 0.01
    return req


def test_a_configured_ttft_slo_that_holds_everywhere_leaves_the_honest_claim(runs):
    _configure_slo(runs, "ttft_s", 1.0)      # no request's first token is later than 0.3 s
    res = gate(runs)
    assert res.exit_code == 0, res.output
    wa = audit_campaign(runs).claim("wa").to_dict()
    b = wa["slo_breakdown"]
    assert b["configured"] == {"e2e": 5.0, "ttft": 1.0, "tpot": None}
    assert b["policy"]["ttft"] == 0.0 and b["policy"]["any"] == pytest.approx(b["policy"]["e2e"])


@pytest.mark.parametrize("key, seconds, edit", [("ttft_s", 1.0, _late_first_tokens),
                                                ("tpot_s", 0.01, _early_first_tokens)])
def test_a_policy_worse_by_a_configured_slo_fails(runs, key, seconds, edit):
    # the policy's e2e latencies are untouched (it still wins on e2e), but it misses the
    # configured TTFT (or, own attack, TPOT) SLO far more often than its draws: before V
    # counted every configured SLO, this passed matched_budget on e2e alone
    _configure_slo(runs, key, seconds)
    for d in run_dirs(runs):
        if d.name.startswith("wa-"):
            edit_requests(d, edit)
    wa = audit_campaign(runs).claim("wa")
    per_seed = wa.to_dict()["slo_breakdown"]
    part = key.split("_")[0]
    assert per_seed["policy"]["e2e"] < per_seed["matched_random"]["e2e"]     # e2e: better
    assert per_seed["policy"][part] > per_seed["matched_random"][part]       # the SLO: worse
    assert per_seed["policy"]["any"] > per_seed["matched_random"]["any"]
    gs = check(wa, "gain_significant")
    assert gs.passed is False and wa.tier != "matched_budget"
    res = gate(runs)
    assert res.exit_code == 1, res.output


def test_the_report_shows_the_per_slo_breakdown(runs, tmp_path):
    _configure_slo(runs, "ttft_s", 1.0)
    edit_requests(runs / "wa-s0", _late_first_tokens)
    out = tmp_path / "report"
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "SLOs counted in V" in md and "TTFT 1 s" in md and "end-to-end 5 s" in md
    audit = json.loads((out / "audit.json").read_text())
    b = audit["claims"][0]["slo_breakdown"]
    # seed 0's policy run misses TTFT on most requests: the mean over 10 seeds shows it
    assert b["policy"]["ttft"] > 0.03 and b["matched_random"]["ttft"] == 0.0
    # against a brute-force count over the policy runs' request logs
    shares = {"ttft": [], "e2e": [], "any": []}
    for d in run_dirs(runs):
        if not d.name.startswith("wa-"):
            continue
        req = pd.read_parquet(d / "requests.parquet")
        done = req.ok & req.end_s.notna()
        e2e = ~done | (req.end_s - req.arrival_s > 5.0)
        ttft = ~(req.ok & req.first_token_s.notna()) | (req.first_token_s - req.arrival_s > 1.0)
        shares["e2e"].append(e2e.mean())
        shares["ttft"].append(ttft.mean())
        shares["any"].append((e2e | ttft).mean())
    for key, vals in shares.items():
        assert b["policy"][key] == pytest.approx(np.mean(vals), rel=1e-9), key
    assert "TTFT" in (out / "report.html").read_text()
