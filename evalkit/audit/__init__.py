"""The audit: which tier of the claim hierarchy each policy's evidence supports, and why.

``audit_campaign(input_path)`` reads a campaign (runs directory or per-run summary table) and
evaluates every (regime, policy) claim against a protocol; its ``to_dict()`` is the audit
document (:mod:`evalkit.audit.result`).  Writing the report of an audit is the composition
:func:`evalkit.run_audit` (the report stands above the audit and reads only the document).
"""

from __future__ import annotations

from evalkit.audit.protocol import Protocol, load_protocol
from evalkit.audit.result import AuditResult, audit_campaign
from evalkit.document.schema import AUDIT_SCHEMA as SCHEMA   # the document's layout
from evalkit.jsonio import FLOAT_DIGITS, canonical_json
from evalkit.jsonio import to_jsonable as _to_jsonable

__all__ = ["AuditResult", "Protocol", "load_protocol", "audit_campaign",
           "canonical_json", "SCHEMA", "FLOAT_DIGITS"]


def _normalise(obj):
    """JSON-safe, rounded, platform-stable values (NaN/inf -> None): the document's floats."""
    return _to_jsonable(obj, FLOAT_DIGITS)
