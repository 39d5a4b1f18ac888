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


def test_the_python_gate_reports_the_seeds_of_the_deciding_look(monkeypatch):
    from evalkit.audit import gate_api
    from tests.audit.test_sequential_gate import DESIGN, _claim, _d, _from_d

    claim = _claim(*_from_d(_d(12, 0.03)))
    claim.update(tier="harness", checks=[])
    doc = {"alpha": 0.05, "claims": [claim],
           "design": {"sequential": {**DESIGN, "batch": 6}, "seed_order": list(range(12)),
                      "why_not": ""}}
    decision = gate.GateDecision(0, ["decided"])
    monkeypatch.setattr(gate_api, "gate_document",
                        lambda *a, **k: (load_protocol(), doc, claim, decision))
    claim["assumptions"] = ["the fixed test's words on all 12 seeds"]
    result = gate_api.gate("runs", "pol", sequential=True)
    assert result.seeds_used == 6 < len(claim["units"])
    (shape,) = result.assumptions          # the sequential pass's own, on its 6 seeds
    assert shape.startswith("with 6 seeds the mean test assumes") and "at this look" in shape
