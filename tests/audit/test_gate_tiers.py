"""`evalkit gate` prints the tier the claim reaches (as the audit does) and the tier required."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli
from tests.conftest import REPO

BURSTY = REPO / "fixtures" / "campaigns" / "sim_bursty"


@pytest.fixture(scope="module")
def audited():
    return audit_campaign(BURSTY)


def _first_line(output: str) -> tuple[str, str, str]:
    m = re.match(r"gate (PASS|FAIL): \S+ reached (\S+); required (\S+) ", output)
    assert m, output
    return m.groups()


@pytest.mark.parametrize("tier, code", [("matched_budget", 0), ("placement_gain", 0),
                                        ("calibrated", 1)])
def test_gate_reports_the_audits_tier_not_one_capped_at_the_required_tier(audited, tier,
                                                                           code):
    wa = audited.claim("wa")
    # the fixture's wa claim, by the audit (calibrated is not shown at 7 seeds x 2 draws)
    assert wa.tier == "placement_gain"
    res = CliRunner().invoke(cli, ["gate", str(BURSTY), "--policy", "wa", "--tier", tier])
    assert res.exit_code == code, res.output
    verdict, reached, required = _first_line(res.output)
    assert (verdict, reached, required) == ("PASS" if code == 0 else "FAIL", wa.tier, tier)
    # the verdict line is the audit's: a placement-gain claim is not "not placement gain"
    assert res.output.splitlines()[1].strip() == wa.verdict
    assert "not shown to be placement gain" not in res.output


def test_gate_below_the_required_tier_says_both(audited):
    ewma = audited.claim("ewma")
    res = CliRunner().invoke(cli, ["gate", str(BURSTY), "--policy", "ewma"])
    assert res.exit_code == 1
    assert _first_line(res.output) == ("FAIL", ewma.tier, "matched_budget")
    # where the walk stops, then the check that stops it (once), its finding and fix
    assert "\n  stops before matched_budget (failed)\n" in res.output
    blocker = next(c for c in ewma.checks if c.tier == "matched_budget" and c.blocking)
    assert ewma.stop_reason.endswith(f": {blocker.name}: {blocker.found}")
    assert f"  [FAIL] matched_budget/{blocker.name}: {blocker.found}; fix: " in res.output


@pytest.mark.parametrize("fixture", ["sim_bursty", "sim_k_mismatch", "sim_missing_no_sync"])
@pytest.mark.parametrize("required", ["harness", "matched_budget", "deployable"])
def test_gate_walk_reaches_the_full_audits_tier_and_computes_no_unreachable_tier(fixture,
                                                                                 required):
    full = audit_campaign(REPO / "fixtures" / "campaigns" / fixture)
    gate = audit_campaign(REPO / "fixtures" / "campaigns" / fixture, walk_above=required)
    names = full.protocol.tier_names
    for f, g in zip(full.claims, gate.claims, strict=True):
        assert (g.tier, g.stop_reason, g.verdict) == (f.tier, f.stop_reason, f.verdict)
        evaluated = {c.tier for c in g.checks}
        # every tier up to the required one, and above it up to the tier the walk stops at
        stop = (f.stop_reason.split("stops before ")[1].split(" ")[0]
                if f.stop_reason.startswith("stops before") else names[-1])
        last = max(names.index(required), names.index(stop))
        assert evaluated == set(names[:last + 1]), (f.policy, sorted(evaluated))
        assert [(c.name, c.passed, c.found) for c in g.checks] == \
            [(c.name, c.passed, c.found) for c in f.checks if c.tier in evaluated]
