"""The bundled protocol caps a self-registered campaign at matched_budget (issue 33): its
placement_gain tier lists ``registration``, which passes only for a plan frozen under the
reviewer's challenge the audit is given, or under a protocol that allows self-registration."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli
from evalkit.report.render import build_figures, render_html, render_md
from evalkit.runlog.plan import PLAN_FILE
from evalkit.replay.sweep import run_campaign
from tests.conftest import REPO
from tests.golden.compare import golden_path
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import tiny_campaign
from tests.support.selfreg import selfreg_protocol

BURSTY = REPO / "fixtures" / "campaigns" / "sim_bursty"


def test_a_self_registered_campaign_fails_placement_gain_on_registration_alone():
    # the fixture campaign's audit under the bundled protocol: its golden document, which
    # tests/e2e/test_audit_golden.py holds to a fresh audit
    doc = json.loads(golden_path("sim_bursty").read_text())
    claim = next(c for c in doc["claims"] if (c["policy"], c["regime"]) == ("wa", "bursty"))
    reg = next(c for c in claim["checks"] if c["name"] == "registration")
    assert reg["passed"] is False and reg["found"].startswith("self-registered: no plan.json")
    assert "stops at matched_budget" in reg["found"]
    assert claim["tier_status"]["placement_gain"] == "failed"
    assert [c["name"] for c in claim["checks"]
            if c["tier"] == "placement_gain" and c["passed"] is False] == ["registration"]


def test_a_protocol_that_allows_self_registration_passes_the_same_claims_tier():
    claim = audit_campaign(BURSTY, protocol=selfreg_protocol(),
                           max_tier="placement_gain").claim("wa", "bursty")
    reg = next(c for c in claim.checks if c.name == "registration")
    assert reg.passed is True and "the protocol allows self-registration" in reg.found
    assert reg.found.startswith("self-registered (no plan.json)")
    assert claim.tier_status["placement_gain"] == "passed"


def test_the_recorded_demo_stops_at_matched_budget_saying_self_registered(tmp_path):
    """The demo's claims that pass matched_budget stop there, on registration; the gate and
    the document say why."""
    doc = json.loads(golden_path("demo").read_text())
    assert doc["pre_registration"]["registration"]["kind"] == "self-registered"
    capped = [c for c in doc["claims"] if c["tier_status"]["matched_budget"] == "passed"]
    assert capped
    for claim in capped:
        assert claim["tier"] == "matched_budget", claim["policy"]
        assert claim["stop_reason"].startswith("stops before placement_gain (failed): "
                                               "registration: self-registered: "), claim
    path = tmp_path / "audit.json"
    shutil.copyfile(golden_path("demo"), path)
    res = CliRunner().invoke(cli, ["gate", str(path), "--policy", capped[0]["policy"],
                                   "--tier", "placement_gain"])
    assert res.exit_code == 1, res.output
    assert "reached matched_budget; required placement_gain" in res.output
    assert "placement_gain/registration: self-registered: " in res.output
    res = CliRunner().invoke(cli, ["gate", str(path), "--policy", capped[0]["policy"],
                                   "--tier", "matched_budget"])
    assert res.exit_code == 0, res.output


def test_a_campaign_frozen_under_the_given_challenge_passes_the_placement_gain_tier(tmp_path):
    camp = tmp_path / "tiny.toml"
    camp.write_text(tiny_campaign(2, 2))
    challenge, runs = tmp_path / "reviewer" / "challenge.json", tmp_path / "runs"
    challenge.parent.mkdir()
    runs.mkdir()
    res = CliRunner().invoke(cli, ["plan", "challenge", str(camp), "--out", str(challenge)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["plan", "freeze", str(camp), "--challenge", str(challenge),
                                   "--out", str(runs / PLAN_FILE)])
    assert res.exit_code == 0, res.output
    assert run_campaign(camp, runs, progress=False, protocol=BUNDLED).ok
    registered = audit_campaign(runs, challenge=challenge).claim("wa", "tiny")
    unverified = audit_campaign(runs).claim("wa", "tiny")
    # same runs, same bundled protocol: only the verified challenge passes the tier's check
    assert registered.tier_status["placement_gain"] == "passed", registered.checks
    assert unverified.tier_status["placement_gain"] == "failed"
    assert [c.name for c in unverified.checks
            if c.tier == "placement_gain" and c.passed is False] == ["registration"]


def test_the_reports_first_screen_names_the_registration():
    doc = json.loads((REPO / "tests" / "report_documents" / "sim_bursty.audit.json").read_text())
    assert doc["pre_registration"]["registration"]["text"] == "self-registered (no plan)"
    figures = build_figures(doc)
    md, html = render_md(doc, figures), render_html(doc, figures)
    head = md.split("### Which claims hold")[0]
    assert "multiplicity holm; registration: self-registered \\(no plan\\).\n\n" in head
    assert "registration: <b>self-registered (no plan)</b>" in html.split("</header>")[0]
