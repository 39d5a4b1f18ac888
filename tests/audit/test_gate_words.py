"""A gate PASS never says "underpowered ... not significant" in the same breath: a claim that
passes a mechanism tier with too few seeds for the head-to-head test reads as that tier's
claim (evalkit/audit/gate.py:decide)."""

from __future__ import annotations

import json

from evalkit.audit.gate import decide
from evalkit.audit.protocol import load_protocol

from tests.conftest import REPO

DOC = REPO / "tests" / "report_documents" / "sim_underpowered.audit.json"


def _decision(tier: str):
    doc = json.loads(DOC.read_text())
    claim = doc["claims"][0]
    assert claim["underpowered"] and claim["verdict"].startswith("underpowered")
    return decide(doc, claim, load_protocol(), tier)


def test_a_mechanism_tier_pass_reads_as_its_claim():
    out = _decision("harness")
    assert out.lines[0].startswith("gate PASS")
    head = "\n".join(out.lines[:2])
    assert "underpowered" not in head and "not significant" not in head
    assert "harness: scheduling can matter" in out.lines[1]
    assert "no head-to-head claim" in out.lines[1]


def test_a_fail_keeps_the_underpowered_verdict():
    out = _decision("matched_budget")
    assert out.lines[0].startswith("gate FAIL") and out.lines[1].strip().startswith(
        "underpowered")


def test_no_recorded_document_passes_with_underpowered_words_at_any_tier():
    """Every golden and report document, every claim, every tier of the bundled protocol: a
    PASS's verdict line never says "underpowered" or "not significant"."""
    protocol = load_protocol()
    docs = sorted((REPO / "tests" / "golden").glob("*.audit.json")) + sorted(
        (REPO / "tests" / "report_documents").glob("*.audit.json"))
    passes = 0
    for path in docs:
        doc = json.loads(path.read_text())
        for claim in doc["claims"]:
            for tier in protocol.tier_names:
                out = decide(doc, claim, protocol, tier)
                if out.lines[0].startswith("gate PASS"):
                    passes += 1
                    assert "underpowered" not in out.lines[1], (path.name, tier, out.lines[1])
                    assert "not significant" not in out.lines[1], (path.name, tier)
    assert passes > len(docs)
