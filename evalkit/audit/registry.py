"""What a run's policy *is*, from the policy registry, never from the run's own word.

A policy class that can see the future (``oracle = True`` in
:mod:`evalkit.policies`) is an oracle whatever run.json's top-level ``oracle`` says.
The class is named in run.json's settings (``settings.effective.policy.name``, else
``settings.requested.policy.name``, else ``policy``); every name given must agree.
"""

from __future__ import annotations

from evalkit.errors import InputError
from evalkit.policies import (POLICIES, entry_point_policy, policy_entry_points, policy_identity,
                              resolve_policy)
from evalkit.policies.causality import probe_causality

__all__ = ["code_identity_status", "oracle_status"]


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


def installed_classes() -> list[type]:
    """Every policy class the audit may resolve a recorded identity to: the built-ins and
    the installed ``evalkit.policies`` entry points that load (never a path a run names)."""
    classes = list(POLICIES.values())
    for name, ep in policy_entry_points().items():
        try:
            cls = POLICIES[name] if name in POLICIES else entry_point_policy(name, ep)
        except InputError:
            continue
        if cls not in classes:
            classes.append(cls)
    return classes


def resolve_identity(ident, classes: list[type] | None = None) -> tuple[type | None, str]:
    """(class, why): the installed class whose code identity (class path and source
    sha256) is the one run.json records; None and the reason when there is none.
    ``classes``: :func:`installed_classes`, when the caller resolves many runs at once."""
    if not isinstance(ident, dict) or not isinstance(ident.get("class"), str):
        return None, ("run.json records no policy_identity (class path and source sha256): "
                      "the code that ran cannot be named")
    path, digest = ident["class"], ident.get("source_sha256")
    if classes is None:
        classes = installed_classes()
    same_path = [c for c in classes if policy_identity(c)["class"] == path]
    if not same_path:
        return None, (f"recorded class {path} is neither a built-in nor an installed "
                      "evalkit.policies entry point")
    cls = same_path[0]
    installed = policy_identity(cls)["source_sha256"]
    if not isinstance(digest, str) or digest != installed:
        return None, (f"recorded class {path} has source sha256 {str(digest)[:12]}, the "
                      f"installed one {str(installed)[:12]}: the code that ran is not the "
                      "code installed")
    return cls, ""


def code_identity_status(meta: dict, classes: list[type] | None = None
                         ) -> tuple[bool | None, str]:
    """(oracle, why) from the code the run records (``policy_identity``), resolved against
    the installed classes and put through the causality probe: True for an oracle class, a
    run that says it saw the future, a run whose names are not its class's, or a class whose
    past decisions change with the future; None when the code cannot be resolved or probed
    (fail closed); False only for resolved, probed, decision-time code."""
    declared = bool(meta.get("oracle")) or bool(
        (((meta.get("settings") or {}).get("effective") or {}).get("policy") or {}).get("oracle"))
    if declared:
        return True, "the run says it saw future information"
    cls, why = resolve_identity(meta.get("policy_identity"), classes)
    if cls is None:
        return None, why
    path = policy_identity(cls)["class"]
    if cls.oracle:
        return True, f"policy class {path} sees the future (its recorded code)"
    settings = meta.get("settings") or {}
    said = [p["name"] for p in ((settings.get(k) or {}).get("policy") for k in
                                ("effective", "requested"))
            if isinstance(p, dict) and isinstance(p.get("name"), str)]
    misnamed = [n for n in said if n not in (cls.name, path)]
    if misnamed:
        return True, (f"run.json names the policy {misnamed[0]!r} but its recorded code is "
                      f"{path} ({cls.name!r}): the run's word does not match its code")
    params = meta.get("policy_params")
    causal, probed = probe_causality(cls, params if isinstance(params, dict) else {})
    if causal is None:
        return None, f"policy class {path}: {probed}"
    if not causal:
        return True, f"policy class {path} {probed}"
    return False, f"policy class {path} (recorded code, resolved): {probed}"
