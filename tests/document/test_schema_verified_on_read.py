"""Documents are verified on read, never taken on their word: the protocol's content_sha256
is recomputed from its rules, and each claim's tier from its checks under the document's own
tier walk.  `evalkit report`, `diff` and `gate --baseline` refuse an edited one (exit 2 naming
the field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.document.rules import protocol_change
from evalkit.document.schema import load_audit

DOC = Path(__file__).resolve().parents[1] / "report_documents" / "sim_bursty.audit.json"


def _write(tmp_path, doc, name="audit.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _invoke(*args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.output


def test_the_recorded_document_reads():
    assert load_audit(DOC)["claims"]


def test_an_edited_content_sha256_is_refused(tmp_path):
    """The attack: a baseline whose content_sha256 was edited to the hash of the loosened
    rules the new audit runs under, so that the gate sees no protocol change."""
    doc = json.loads(DOC.read_text())
    loosened = json.loads(json.dumps(doc["protocol"]))
    loosened["alpha"] = 0.5
    from evalkit.document.rules import content_sha256
    doc["protocol"]["content_sha256"] = content_sha256(loosened)
    assert protocol_change(doc["protocol"], loosened) is not None   # recomputed, not read
    edited = _write(tmp_path, doc)
    for args in (("report", edited, "--out", tmp_path / "r"), ("diff", DOC, edited)):
        code, out = _invoke(*args)
        assert code == 2 and "protocol.content_sha256" in out and "edited" in out, out


@pytest.mark.parametrize("claim_tier", ["deployable", None])
def test_a_tier_that_does_not_follow_from_the_checks_is_refused(tmp_path, claim_tier):
    doc = json.loads(DOC.read_text())
    i, claim = next((i, c) for i, c in enumerate(doc["claims"]) if c["tier"] != claim_tier)
    claim["tier"] = claim_tier
    code, out = _invoke("report", _write(tmp_path, doc), "--out", tmp_path / "r")
    assert code == 2 and f"claims[{i}].tier" in out and "its checks reach" in out, out


def test_a_tier_status_that_does_not_follow_from_the_checks_is_refused(tmp_path):
    doc = json.loads(DOC.read_text())
    claim = doc["claims"][0]
    tier = next(t for t, s in claim["tier_status"].items() if s != "passed")
    claim["tier_status"][tier] = "passed"
    code, out = _invoke("report", _write(tmp_path, doc), "--out", tmp_path / "r")
    assert code == 2 and "claims[0].tier" in out, out


def test_a_check_without_the_fields_the_walk_reads_is_refused(tmp_path):
    doc = json.loads(DOC.read_text())
    del doc["claims"][0]["checks"][1]["blocking"]
    code, out = _invoke("report", _write(tmp_path, doc), "--out", tmp_path / "r")
    assert code == 2 and "claims[0].checks[1].blocking" in out, out
