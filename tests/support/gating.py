"""The gate's decision on an audit a test has already run.

The gate is a function of the audit document (:func:`evalkit.audit.gate.decide`, what
``evalkit gate`` and ``evalkit.gate`` call after auditing), so an attack that inspects a
check and then asks whether the gate still passes reads both from one audit.  The CLI's own
path (parsing, printing, exit codes) is tested in tests/cli/test_gate.py, and
tests/cli/test_gate.py::test_the_gate_on_a_document_says_what_the_gate_on_the_runs_says holds
the document's decision to the runs'.
"""

from __future__ import annotations

from evalkit.audit.gate import decide
from evalkit.audit.gate_api import DEFAULT_TIER
from evalkit.audit.result import find_claim


def gate_decision(result, policy: str = "wa", tier: str = DEFAULT_TIER):
    """The :class:`evalkit.audit.gate.GateDecision` for ``policy`` on the audit ``result``
    (an :class:`evalkit.audit.AuditResult`), under the protocol it was audited with."""
    proto = result.protocol
    doc = result.decision_dict()
    claim = find_claim(doc["claims"], policy, None, options=True)
    return decide(doc, claim, proto, tier, None)
