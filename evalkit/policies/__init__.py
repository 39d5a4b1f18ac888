"""Scheduling policies: the built-in registry, plugins, and :func:`get_policy`.

A policy is named by a *spec*, resolved by :func:`resolve_policy` in this order:

1. a built-in registry name (``fixed_h``, ``wa``, ... : :data:`POLICIES`);
2. the name of an entry point in the group ``evalkit.policies`` (an installed package
   registers ``name = "package.module:ClassName"``; the name must equal the class's ``name``);
3. ``package.module:ClassName``, imported directly.

A plugin is a subclass of :class:`Policy` with exactly the interface built-ins have
(:class:`RunContext` at ``reset``, :class:`DecisionState` at ``decide``).  Its parameters are
the keyword arguments of its ``__init__``; its oracle status is the class attribute
``oracle``; :func:`policy_identity` gives the code identity every run records.

Layering: the replay runs policies and the audit's registry asks what a policy is, so both
import this package; it imports only the base modules and ``evalkit.stats`` (never the replay
or the audit).  Plugins import their interface from here (``evalkit.policies.Policy``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import re

from evalkit.errors import InputError
from evalkit.policies.base import (Corridor, Decision, DecisionState, Policy,
                                          RunContext)
from evalkit.policies.forecast import WA, WA_DEFAULTS, CalibratedOnline, EWMA
from evalkit.policies.planned import CalibratedOffline, MatchedRandom
from evalkit.policies.simple import FixedH, NoSync, PressureGate, RandomDeferral

ENTRY_POINT_GROUP = "evalkit.policies"

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (
    NoSync, FixedH, PressureGate, RandomDeferral, WA, CalibratedOnline, EWMA,
    CalibratedOffline, MatchedRandom)}
RESERVED = ("no_sync", "matched_random")   # baselines the harness adds itself
# DecisionState fields a real backend observes from the serving engine's metrics
SIGNALS = ("queue_running", "queue_waiting", "pressure")

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SPEC_FIX = ("use a built-in name, an installed entry point (evalkit policies list), or "
             "package.module:ClassName importable from the working directory / PYTHONPATH")

# Range checks of built-in parameters: parameter -> (predicate, description)
_RANGES = {
    "H": (lambda v: v >= 1, ">= 1"),
    "theta": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "alpha": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "quantile": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "warmup": (lambda v: v >= 0, ">= 0"),
    "k": (lambda v: v is None or v >= 0, ">= 0"),
    "cost_scale": (lambda v: v is None or v > 0, "> 0"),
    "bin_s": (lambda v: v is None or v > 0, "> 0"),
    "loss_ref": (lambda v: v > 0, "> 0"),
    "tokens_ref": (lambda v: v > 0, "> 0"),
    "stale_ref": (lambda v: v > 0, "> 0"),
}


# ----------------------------------------------------------------------------- resolution

def policy_entry_points() -> dict:
    """Installed ``evalkit.policies`` entry points by name (metadata only, nothing imported)."""
    from importlib.metadata import entry_points
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _import_class(spec: str) -> type:
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname or not all(
            part.isidentifier() for part in module_name.split(".") + qualname.split(".")):
        raise InputError(f"policy {spec!r} is not of the form package.module:ClassName",
                         column="policy", fix=_SPEC_FIX)
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:        # an ImportError, or the plugin's own module-level bug
        raise InputError(f"policy {spec!r}: importing {module_name!r} failed "
                         f"({type(exc).__name__}: {exc})", column="policy",
                         fix="install the package that provides it (pip install -e ...), "
                             "or put it on PYTHONPATH, and check that it imports") from exc
    for attr in qualname.split("."):
        if not hasattr(obj, attr):
            raise InputError(f"policy {spec!r}: module {module_name!r} has no {attr!r}",
                             column="policy", fix="check the class name after the colon")
        obj = getattr(obj, attr)
    return obj


def _load_entry_point(name: str, ep) -> type:
    try:
        return ep.load()
    except Exception as exc:
        dist = getattr(getattr(ep, "dist", None), "name", None) or "its distribution"
        raise InputError(f"policy {name!r}: entry point {ep.value!r} (group "
                         f"{ENTRY_POINT_GROUP}, from {dist}) failed to load "
                         f"({type(exc).__name__}: {exc})", column="policy",
                         fix=f"reinstall {dist} or fix its entry point") from exc


def check_policy_class(cls, spec: str) -> type[Policy]:
    """``cls`` is a usable policy class, else an InputError naming ``spec`` and the fix."""
    if not (inspect.isclass(cls) and issubclass(cls, Policy)):
        what = cls.__name__ if inspect.isclass(cls) else type(cls).__name__
        raise InputError(f"policy {spec!r} is {what}, not a subclass of "
                         "evalkit.policies.Policy", column="policy",
                         fix="derive the class from evalkit.policies.Policy and "
                             "implement decide(state) -> Decision")
    if cls in POLICIES.values():
        return cls
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or name == Policy.name:
        raise InputError(f"policy {spec!r} sets no plain class attribute name (got {name!r})",
                         column="policy", fix='set name = "my_policy" (letters, digits, '
                                              "_ . -, at most 64) on the class")
    if name in POLICIES:
        raise InputError(f"policy {spec!r} is named {name!r}, a built-in policy's name",
                         column="policy", fix="give the plugin a name of its own")
    if not isinstance(cls.oracle, bool):
        raise InputError(f"policy {spec!r}: oracle = {cls.oracle!r} is not a bool",
                         column="policy", fix="set oracle = True or False on the class")
    if cls.role != "policy" or getattr(cls, "never_merges", False):
        raise InputError(f"policy {spec!r} claims role {cls.role!r}; plugins are policies "
                         "(the harness adds no_sync and matched_random runs itself)",
                         column="policy", fix='leave role = "policy"')
    needs = cls.requires_signals
    if not (isinstance(needs, tuple) and set(needs) <= set(SIGNALS)):
        raise InputError(f"policy {spec!r}: requires_signals = {needs!r} is not a tuple of "
                         f"{', '.join(SIGNALS)}", column="policy",
                         fix="list the scraped DecisionState fields the policy reads, "
                             "e.g. requires_signals = (\"queue_running\", \"queue_waiting\")")
    if cls.decide is Policy.decide:
        raise InputError(f"policy {spec!r} does not implement decide", column="policy",
                         fix="define decide(self, state: DecisionState) -> Decision")
    return cls


def resolve_policy(spec: str) -> type[Policy]:
    """The policy class named by ``spec`` (registry name, entry point, or module:Class)."""
    if not isinstance(spec, str) or not spec:
        raise InputError(f"policy {spec!r} is not a name", column="policy", fix=_SPEC_FIX)
    if spec in POLICIES:
        return POLICIES[spec]
    if ":" in spec:
        return check_policy_class(_import_class(spec), spec)
    eps = policy_entry_points()
    if spec not in eps:
        plugins = sorted(set(eps) - set(POLICIES))
        known = ", ".join(list(POLICIES) + plugins)
        raise InputError(f"unknown policy {spec!r}", column="policy",
                         fix=f"use one of: {known}; or package.module:ClassName")
    return entry_point_policy(spec, eps[spec])


def entry_point_policy(spec: str, ep) -> type[Policy]:
    """The checked policy class the entry point ``ep`` (registered as ``spec``) loads."""
    cls = check_policy_class(_load_entry_point(spec, ep), spec)
    if cls.name != spec:
        raise InputError(f"entry point {spec!r} loads a policy named {cls.name!r}",
                         column="policy",
                         fix=f"name the entry point {cls.name!r} (or the class {spec!r})")
    return cls


def policy_name(spec: str) -> str:
    """The registry name of the policy ``spec`` names (the default campaign label)."""
    return resolve_policy(spec).name


# ----------------------------------------------------------------------------- identity

# keyed by the top-level package, not the module: scanning every installed distribution
# takes seconds, and all of a package's modules share the answer
@functools.lru_cache(maxsize=256)
def _distribution_of_package(top: str) -> tuple[str | None, str | None]:
    from importlib import metadata
    names = metadata.packages_distributions().get(top) or []
    for dist_name in names:
        try:
            return dist_name, metadata.version(dist_name)
        except metadata.PackageNotFoundError:
            continue
    return None, None


@functools.lru_cache(maxsize=256)
def policy_identity(cls: type[Policy]) -> dict:
    """Code identity of a policy class, as run.json records it (``policy_identity``).

    ``{"name", "class": "module:QualName", "builtin", "distribution", "version",
    "source_sha256"}``: the distribution that installed the module and its version (None
    for code that no installed distribution provides) and the sha256 of the class's source
    file (None if it has none), so two runs can be compared like for like.
    """
    dist, version = _distribution_of_package(cls.__module__.split(".")[0])
    try:
        path = inspect.getsourcefile(cls)
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
    except (TypeError, OSError):
        digest = None
    return {"name": cls.name, "class": f"{cls.__module__}:{cls.__qualname__}",
            "builtin": cls in POLICIES.values(), "distribution": dist, "version": version,
            "source_sha256": digest}


# ----------------------------------------------------------------------------- parameters

def _cls(spec_or_cls) -> type[Policy]:
    return spec_or_cls if inspect.isclass(spec_or_cls) else resolve_policy(spec_or_cls)


def param_defaults(spec_or_cls) -> dict:
    """Every parameter of a policy and its default (``inspect.Parameter.empty`` if none)."""
    cls = _cls(spec_or_cls)
    out = {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
           if name not in ("self", "weights", "params")
           and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    if issubclass(cls, WA) or cls is CalibratedOnline:
        base = dict(WA_DEFAULTS, w_cost=1.0) if cls is CalibratedOnline else WA_DEFAULTS
        out.update({w: v for w, v in base.items() if w not in out})
    return out


def valid_params(spec_or_cls) -> list[str]:
    return list(param_defaults(spec_or_cls))


def _check_builtin_values(name: str, params: dict) -> None:
    for key, value in params.items():
        if key == "k_from":
            continue
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"parameter {key}={value!r} of {name!r} must be a number",
                             column=key, fix="give a number")
        check = _RANGES.get(key)
        if check and not check[0](value):
            raise InputError(f"parameter {key}={value!r} of {name!r} must be {check[1]}",
                             column=key, fix=f"use {key} {check[1]}")


def get_policy(spec: str, **params) -> Policy:
    """A fresh policy named by ``spec`` with ``params``; InputError lists the valid ones."""
    cls = resolve_policy(spec)
    defaults = param_defaults(cls)
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise InputError(f"unknown parameter(s) {unknown} for policy {spec!r}",
                         column=unknown[0],
                         fix=f"valid parameters: {', '.join(defaults) or '(none)'}")
    builtin = cls in POLICIES.values()
    if builtin:
        _check_builtin_values(spec, params)
        return cls(**params)
    missing = [k for k, v in defaults.items() if v is inspect.Parameter.empty and k not in params]
    if missing:
        raise InputError(f"policy {spec!r} needs parameter(s) {missing}", column=missing[0],
                         fix=f"set params = {{ {missing[0]} = ... }} (or --param "
                             f"{missing[0]}=...)")
    try:
        policy = cls(**params)
    except (TypeError, ValueError) as exc:
        raise InputError(f"policy {spec!r} rejected its parameters {params}: "
                         f"{type(exc).__name__}: {exc}", column=next(iter(params), "params"),
                         fix=f"valid parameters: {', '.join(defaults) or '(none)'}") from exc
    if type(policy).oracle is not policy.oracle:
        raise InputError(f"policy {spec!r} changes oracle on the instance",
                         column="oracle", fix="oracle is a class attribute; set it there only")
    recorded = {k: v for k, v in defaults.items() if v is not inspect.Parameter.empty}
    policy.params = {**recorded, **params, **dict(getattr(policy, "params", {}) or {})}
    return policy


def parse_param(text: str) -> tuple[str, object]:
    """``k=v`` from the command line: v as int, float, none, or a string."""
    key, eq, raw = text.partition("=")
    if not eq or not key.strip():
        raise InputError(f"cannot parse parameter {text!r}", column="--param",
                         fix="write --param key=value")
    raw = raw.strip()
    value: object
    if raw.lower() in ("none", "null"):
        value = None
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return key.strip(), value


__all__ = ["POLICIES", "ENTRY_POINT_GROUP", "RESERVED", "SIGNALS", "get_policy", "resolve_policy",
           "policy_identity", "policy_name", "param_defaults", "valid_params", "parse_param",
           "check_policy_class", "entry_point_policy", "policy_entry_points", "Policy", "Decision",
           "DecisionState", "RunContext", "Corridor"]
