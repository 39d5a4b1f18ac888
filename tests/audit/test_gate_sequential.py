"""decide(..., sequential=True): the gate's lines for one claim name every other claim."""

from __future__ import annotations

from types import SimpleNamespace

from evalkit.audit import gate
from evalkit.audit.protocol import load_protocol


def _verdict(regime, policy, decision, code):
    return SimpleNamespace(regime=regime, policy=policy, decision=decision, exit_code=code,
                           lines=lambda: [f"{regime}/{policy}: {decision}"])


def test_the_sequential_gate_decides_its_claim_and_lists_the_others(monkeypatch):
    verdicts = [_verdict("r", "a", "pass", 0), _verdict("r", "b", "continue", 4),
                _verdict("q", "b", "fail", 1)]
    monkeypatch.setattr(gate, "sequential_verdicts", lambda *a: verdicts)
    claim = {"regime": "r", "policy": "b"}
    out = gate.decide({"claims": [claim]}, claim, load_protocol(), "matched_budget",
                      sequential=True, min_effect=0.0)
    assert out.exit_code == 4
    assert out.lines == ["r/b: continue", "  other claims: r/a pass; q/b fail"]


def test_a_lone_sequential_claim_has_no_other_claims_line(monkeypatch):
    monkeypatch.setattr(gate, "sequential_verdicts", lambda *a: [_verdict("r", "a", "pass", 0)])
    claim = {"regime": "r", "policy": "a"}
    out = gate.decide({"claims": [claim]}, claim, load_protocol(), "matched_budget",
                      sequential=True, min_effect=0.0)
    assert (out.exit_code, out.lines) == (0, ["r/a: pass"])
