"""The audit's numbers do not move under a refactor: each fixture campaign's audit.json and
examples/cpu_real's keep every recorded field (new fields may be added).  cpu_real goes
through ``evalkit audit`` and reads the audit.json it publishes; the fixture campaigns'
documents are the same bytes (``canonical_json`` of the audit's document, what the report
writes as audit.json) without drawing each report's figures.  The demo's document is compared
in tests/e2e/test_report_demo.py, which runs the demo once."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli
from evalkit.jsonio import canonical_json
from tests.conftest import REPO
from tests.golden.compare import FIXTURE_CAMPAIGNS, changed_fields, golden_path


def _audit(target, out):
    res = CliRunner().invoke(cli, ["audit", str(target), "--out", str(out)])
    assert res.exit_code in (0, 1), res.output
    return json.loads((out / "audit.json").read_text())


def _document(target):
    """What ``evalkit audit`` writes as audit.json, without the report."""
    return json.loads(canonical_json(audit_campaign(target).to_dict(), digits=None))


@pytest.mark.parametrize("name", FIXTURE_CAMPAIGNS)
def test_fixture_campaign_audit_is_unchanged(name):
    old = json.loads(golden_path(name).read_text())
    new = _document(REPO / "fixtures" / "campaigns" / name)
    diff = changed_fields(old, new)
    assert not diff, "\n".join(diff[:20])


def test_cpu_real_audit_is_the_committed_one(tmp_path):
    old = json.loads((REPO / "examples" / "cpu_real" / "audit_real.json").read_text())
    new = _audit(REPO / "examples" / "cpu_real" / "runs", tmp_path / "out")
    diff = changed_fields(old, new)
    assert not diff, "\n".join(diff[:20])


def test_the_comparison_sees_a_changed_a_missing_and_a_shortened_field():
    old = {"a": 1, "b": [1, 2], "c": {"d": 0.5}}
    assert changed_fields(old, dict(old, z=3)) == []
    assert changed_fields(old, {"a": 2, "b": [1, 2], "c": {"d": 0.5}}) == ["$.a: 1 -> 2"]
    assert changed_fields(old, {"a": 1, "b": [1], "c": {}}) == [
        "$.b: list of 2 became 1", "$.c.d: missing"]


def test_numbers_agree_to_a_relative_1e9_and_no_further():
    # a numpy or scipy build moves the last bits of a quantile: equal; a change a report
    # could show is not; a flag is not a number
    edge = -0.012407282631270616
    assert changed_fields({"e": edge}, {"e": -0.012407282631270613}) == []
    assert changed_fields({"e": edge}, {"e": edge * (1 + 1e-7)}) != []
    assert changed_fields({"e": 0.0}, {"e": 1e-300}) != []
    assert changed_fields({"f": True}, {"f": 1}) != []
