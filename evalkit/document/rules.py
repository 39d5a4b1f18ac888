"""A protocol's rules, apart from its labels, and their content hash.

Two protocols with the same name and version can hold different rules (a pull request that
edits the file and removes two checks), and two files can hold the same rules in different
words (comments, descriptions).  The *rules* are everything that can change a decision: the
tier order and each tier's checks, every check's parameters and what happens when it cannot
be evaluated, alpha, the alternative, multiplicity, resample counts and whether unverifiable
checks are vouched for.  Names, versions, descriptions, tier claim texts and the file's
source are labels.  ``content_sha256`` hashes the canonical JSON of the rules.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["content_sha256", "protocol_change"]

LABELS = ("name", "version", "description", "source", "sha256", "content_sha256")


def rules_of(protocol: dict) -> dict:
    """The rules of a protocol dictionary (``Protocol.to_dict()`` or ``audit.json``'s)."""
    out = {k: v for k, v in protocol.items() if k not in LABELS}
    out["tiers"] = [{k: v for k, v in t.items() if k != "claim"}
                    for t in protocol.get("tiers", []) if isinstance(t, dict)]
    out["checks"] = {name: {k: v for k, v in spec.items() if k != "description"}
                     for name, spec in sorted((protocol.get("checks") or {}).items())
                     if isinstance(spec, dict)}
    return out


def content_sha256(protocol: dict) -> str:
    """sha256 (hex) of the canonical JSON of :func:`rules_of`."""
    text = json.dumps(rules_of(protocol), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _flat(obj, prefix: str = "") -> dict:
    """Nested dicts -> {dotted key: leaf}; tiers are keyed by name, lists are leaves."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = obj
    return out


def rule_differences(old: dict, new: dict, limit: int = 6) -> list[str]:
    """What differs between the rules of two protocol dictionaries, one line per key."""
    def keyed(p):
        r = rules_of(p)
        r["tiers"] = {t.get("name"): {k: v for k, v in t.items() if k != "name"}
                      for t in r["tiers"]}
        r["tier_order"] = [t.get("name") for t in rules_of(p)["tiers"]]
        return _flat(r)
    a, b = keyed(old), keyed(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            lines.append(f"{key} removed (was {a[key]!r})")
        elif key not in a:
            lines.append(f"{key} added ({b[key]!r})")
        elif a[key] != b[key]:
            lines.append(f"{key}: {a[key]!r} -> {b[key]!r}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"(+{len(lines) - limit} more)"]
    return lines


def protocol_change(old: dict, new: dict) -> str | None:
    """Why the rules of ``old`` and ``new`` (protocol dictionaries) differ, or None.

    Both are hashed from the rules they list, never taken from a recorded
    ``content_sha256`` (an edited hash would hide an edited rule).
    """
    h_old, h_new = content_sha256(old), content_sha256(new)     # never the recorded hashes
    if h_old == h_new:
        return None
    what = rule_differences(old, new)
    return (f"the protocol's rules changed (content sha256 {h_old[:12]} -> {h_new[:12]}"
            + (f"; {old.get('name')} v{old.get('version')} -> {new.get('name')} "
               f"v{new.get('version')}" if (old.get("name"), old.get("version")) != (
                   new.get("name"), new.get("version")) else "; same name and version")
            + "): " + ("; ".join(what) if what else "the rules differ"))
