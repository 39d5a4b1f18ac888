"""Reading an audit document back (``evalkit report AUDIT.json``): the file must be an
audit.json of this document version, whole, with everything the report draws."""

from __future__ import annotations

from evalkit.errors import InputError
from evalkit.jsonio import AUDIT_SCHEMA
from evalkit.report.diff import load_audit

REWRITE = "re-run 'evalkit audit RUNS --out DIR' to write the audit.json again"
_CLAIM_KEYS = ("figures", "figure_data", "load_match", "per_seed", "checks", "tier_status")
_DOCUMENT_KEYS = ("regimes", "provenance", "transfer", "input")


def read_document(path) -> dict:
    """The audit document at ``path`` (an audit.json, or the report directory holding one);
    an InputError naming the file, the key and the fix when it is not one this version of
    evalkit renders."""
    doc = load_audit(path)           # JSON, an object with claims and protocol
    where = str(path)
    schema = doc.get("schema")
    if schema != AUDIT_SCHEMA:
        found = "no 'schema' key (written by an evalkit before documents were versioned)" \
            if schema is None else f"schema {schema!r}"
        raise InputError(f"{found}; this evalkit renders {AUDIT_SCHEMA!r}", file=where,
                         column="schema", fix=REWRITE)
    for key in _DOCUMENT_KEYS:
        if not isinstance(doc.get(key), dict):
            raise InputError(f"the document has no {key!r} object", file=where, column=key,
                             fix=REWRITE)
    for i, claim in enumerate(doc["claims"]):
        for key in _CLAIM_KEYS:
            if key not in claim:
                raise InputError(f"claim {i} ({claim['regime']}/{claim['policy']}) has no "
                                 f"{key!r}", file=where, column=f"claims[{i}].{key}",
                                 fix=REWRITE)
        if claim["regime"] not in doc["regimes"] or \
                "figure_data" not in doc["regimes"][claim["regime"]]:
            raise InputError(f"regime {claim['regime']!r} of claim {i} has no figure data",
                             file=where, column=f"regimes.{claim['regime']}", fix=REWRITE)
    return doc
