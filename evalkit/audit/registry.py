"""What a run's policy *is*, from the policy registry, never from the run's own word.

A policy class that can see the future (``oracle = True`` in
:mod:`evalkit.policies`) is an oracle whatever run.json's top-level ``oracle`` says.
The class is named in run.json's settings (``settings.effective.policy.name``, else
``settings.requested.policy.name``, else ``policy``); every name given must agree.
"""

from __future__ import annotations
from evalkit.errors import InputError
from evalkit.policies import POLICIES, resolve_policy

__all__ = ["oracle_status"]


def policy_classes(meta: dict) -> list[str]:
    """The policy class names a run.json gives, most specific first (no repeats)."""
    settings = meta.get("settings") or {}
    names = []
    for part in ("effective", "requested"):
        pol = (settings.get(part) or {}).get("policy")
        if isinstance(pol, dict) and isinstance(pol.get("name"), str):
            names.append(pol["name"])
    if isinstance(meta.get("policy"), str):
        names.append(meta["policy"])
    return list(dict.fromkeys(names))


def registered_class(name: str):
    """The policy class registered under ``name``: a built-in or an installed
    ``evalkit.policies`` entry point; None otherwise.  A ``module:Class`` name is never
    imported here: an audit must not run code that a run log names."""
    if name in POLICIES:
        return POLICIES[name]
    if ":" in name:
        return None
    try:
        return resolve_policy(name)
    except InputError:
        return None


def oracle_status(meta: dict) -> tuple[bool | None, str]:
    """(oracle, why): True when any named registered class is an oracle, or when the run
    itself says it is one anywhere; None when no name is a registered class (unknown)."""
    names = policy_classes(meta)
    classes = {n: c for n in names if (c := registered_class(n)) is not None}
    known = list(classes)
    declared = bool(meta.get("oracle")) or bool(
        (((meta.get("settings") or {}).get("effective") or {}).get("policy") or {}).get("oracle"))
    seers = [n for n in known if getattr(classes[n], "oracle", False)]
    if seers:
        return True, f"policy class {seers[0]} sees the future (registry)"
    if declared:
        return True, "the run says it saw future information"
    if not known:
        return None, (f"policy {', '.join(names) or '(unnamed)'} is not a registered class: "
                      "whether it saw the future is unknown")
    return False, f"policy class {known[0]} uses decision-time information (registry)"
