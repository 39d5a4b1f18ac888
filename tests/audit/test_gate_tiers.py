"""`evalkit gate` prints the tier the claim reaches (as the audit does) and the tier required.

The tier-reporting cases gate the recorded audit of the fixture campaign
(``tests/report_documents/sim_bursty.audit.json``); one gates the runs end to end, and the
walk's own cases (what a gate's audit evaluates) audit the fixture campaigns."""

from __future__ import annotations

import copy
import json
import re
import shutil

import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.audit.gate import claim_view, decide, fixed_design_note
from evalkit.audit.protocol import load_protocol
from evalkit.cli.main import cli
from evalkit.errors import EXIT_NOT_REACHED
from tests.conftest import REPO
from tests.golden.compare import changed_fields, golden_path

BURSTY = REPO / "fixtures" / "campaigns" / "sim_bursty"
# the fixture campaign's audit.json as 'evalkit audit' writes it
RECORDED = REPO / "tests" / "report_documents" / "sim_bursty.audit.json"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(path, claims by policy) of the fixture campaign's recorded audit.json."""
    path = tmp_path_factory.mktemp("gate") / "audit.json"
    shutil.copyfile(RECORDED, path)
    return path, {c["policy"]: c for c in json.loads(path.read_text())["claims"]}


def test_the_recorded_document_is_the_golden_audit_of_the_fixture_campaign():
    """tests/e2e/test_audit_golden.py holds a fresh audit of the campaign to the golden
    document; the gate's recorded document must say what the golden one says."""
    recorded = json.loads(RECORDED.read_text())
    assert changed_fields(json.loads(golden_path("sim_bursty").read_text()), recorded) == []
    assert recorded["design"]["sequential"] is None and all("units" in c
                                                            for c in recorded["claims"])


def _first_line(output: str) -> tuple[str, str, str]:
    m = re.match(r"gate (PASS|FAIL): \S+ reached (\S+); required (\S+) ", output)
    assert m, output
    return m.groups()


@pytest.mark.parametrize("tier, code", [("harness", 0), ("matched_budget", 0),
                                        ("placement_gain", 1)])
def test_gate_reports_the_audits_tier_not_one_capped_at_the_required_tier(recorded, tier,
                                                                           code):
    path, claims = recorded
    wa = claims["wa"]
    # the fixture's wa claim, by the audit under the bundled protocol: self-registered, it
    # stops at matched_budget on registration
    assert wa["tier"] == "matched_budget"
    res = CliRunner().invoke(cli, ["gate", str(path), "--policy", "wa", "--tier", tier])
    assert res.exit_code == code, res.output
    verdict, reached, required = _first_line(res.output)
    assert (verdict, reached, required) == ("PASS" if code == 0 else "FAIL", wa["tier"], tier)
    # the verdict line is the audit's: a placement-gain claim is not "not placement gain"
    assert res.output.splitlines()[1].strip() == wa["verdict"]
    assert "not shown to be matched budget" not in res.output


@pytest.mark.parametrize("source", ["document", "runs"])
def test_gate_below_the_required_tier_says_both(recorded, source):
    path, claims = recorded
    ewma = claims["ewma"]
    res = CliRunner().invoke(cli, ["gate", str(path if source == "document" else BURSTY),
                                   "--policy", "ewma"])
    assert res.exit_code == 1
    assert _first_line(res.output) == ("FAIL", ewma["tier"], "matched_budget")
    # where the walk stops, then the check that stops it (once), its finding and fix
    assert "\n  stops before matched_budget (failed)\n" in res.output
    blocker = next(c for c in ewma["checks"] if c["tier"] == "matched_budget" and c["blocking"])
    assert ewma["stop_reason"].endswith(f": {blocker['name']}: {blocker['found']}")
    assert f"  [FAIL] matched_budget/{blocker['name']}: {blocker['found']}; fix: " in res.output


def test_gate_fills_the_tiers_above_a_cut_walk_and_writes_into_nothing():
    proto = load_protocol()
    claim = {"regime": "r", "policy": "wa", "tier": "harness",
             "tier_status": {"harness": "passed", "sidecar_transfer": "not_evaluable",
                             "matched_budget": "failed"},
             "verdict": "v", "stop_reason": "stops before matched_budget (failed)",
             "notes": [], "checks": []}
    doc = {"claims": [claim], "input": {"excluded": []}}
    before = copy.deepcopy(doc)
    decision = decide(doc, claim, proto, "matched_budget")
    assert decision.exit_code == EXIT_NOT_REACHED and not decision.passed
    assert decision.lines[:4] == [
        "gate FAIL: r/wa reached harness; required matched_budget (alpha = 0.05)", "  v",
        "  G: no paired gain (fewer than 2 paired seeds)",
        "  stops before matched_budget (failed)"]
    assert doc == before                   # the decision edits nothing it decides about
    status = claim_view(claim, proto).tier_status
    assert list(status) == list(proto.tier_names)
    assert [status[t] for t in ("placement_gain", "calibrated", "deployable")] == ["not_run"] * 3
    assert status["matched_budget"] == "failed"


def test_a_fixed_design_gate_on_a_campaign_planned_as_sequential_notes_it_without_editing():
    proto = load_protocol()
    claim = {"regime": "r", "policy": "wa", "tier": "harness", "tier_status": {},
             "verdict": "v", "stop_reason": "s", "notes": ["a note of the audit"], "checks": []}
    planned = {"sequential": {"kind": "sequential", "alpha": 0.05, "max_seeds": 12},
               "seed_order": [0, 1], "why_not": ""}
    doc = {"claims": [claim], "input": {"excluded": [{"run_id": "x", "reason": "why"}]},
           "design": planned}
    before = copy.deepcopy(doc)
    lines = decide(doc, claim, proto, "harness", verbose=True).lines
    assert f"  note: {fixed_design_note(doc)}" in lines and "planned as sequential" in \
        fixed_design_note(doc)
    assert "  note: a note of the audit" in lines and "  excluded x: why" in lines
    assert doc == before
    fixed = decide({**doc, "design": {**planned, "sequential": None}}, claim, proto, "harness",
                   verbose=True).lines
    assert not any("planned as sequential" in x for x in fixed)
    summary = decide(doc, claim, proto, "harness").lines
    assert summary[-1].endswith("2 note(s), 1 excluded run(s) (--verbose: each check's "
                                "expected and found, every note and exclusion)")


def full_audit(fixture) -> dict:
    """The full audit of a fixture campaign: its golden document, which
    tests/e2e/test_audit_golden.py holds to a fresh audit."""
    return json.loads(golden_path(fixture).read_text())


@pytest.mark.parametrize("fixture", ["sim_bursty", "sim_k_mismatch", "sim_missing_no_sync"])
@pytest.mark.parametrize("required", ["harness", "matched_budget", "deployable"])
def test_gate_walk_reaches_the_full_audits_tier_and_computes_no_unreachable_tier(
        fixture, required):
    full = full_audit(fixture)
    gate = audit_campaign(REPO / "fixtures" / "campaigns" / fixture, walk_above=required)
    names = [t["name"] for t in full["protocol"]["tiers"]]
    assert names == list(gate.protocol.tier_names)
    for f, g in zip(full["claims"], gate.claims, strict=True):
        assert (g.tier, g.stop_reason, g.verdict) == (f["tier"], f["stop_reason"], f["verdict"])
        evaluated = {c.tier for c in g.checks}
        # every tier up to the required one, and above it up to the tier the walk stops at
        stop = (f["stop_reason"].split("stops before ")[1].split(" ")[0]
                if f["stop_reason"].startswith("stops before") else names[-1])
        last = max(names.index(required), names.index(stop))
        assert evaluated == set(names[:last + 1]), (f["policy"], sorted(evaluated))
        assert [(c.name, c.passed, c.found) for c in g.checks] == \
            [(c["name"], c["passed"], c["found"]) for c in f["checks"] if c["tier"] in evaluated]
