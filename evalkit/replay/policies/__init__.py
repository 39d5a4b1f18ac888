"""Scheduling policies and their registry (:func:`get_policy`)."""

from __future__ import annotations

import inspect

from evalkit.errors import InputError
from evalkit.replay.policies.base import (Corridor, Decision, DecisionState, Policy,
                                          RunContext)
from evalkit.replay.policies.forecast import WA, WA_DEFAULTS, CalibratedOnline, EWMA
from evalkit.replay.policies.planned import CalibratedOffline, MatchedRandom
from evalkit.replay.policies.simple import FixedH, NoSync, PressureGate, RandomDeferral

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (
    NoSync, FixedH, PressureGate, RandomDeferral, WA, CalibratedOnline, EWMA,
    CalibratedOffline, MatchedRandom)}

# Range checks: parameter -> (predicate, description)
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


def valid_params(name: str) -> list[str]:
    cls = POLICIES[name]
    names = [p for p in inspect.signature(cls.__init__).parameters
             if p not in ("self", "weights", "params")]
    if issubclass(cls, WA) or cls is CalibratedOnline:
        names += [w for w in WA_DEFAULTS if w not in names]
    return names


def get_policy(name: str, **params) -> Policy:
    """A fresh policy ``name`` with ``params``; InputError lists valid names / parameters."""
    if name not in POLICIES:
        raise InputError(f"unknown policy {name!r}", column="policy",
                         fix=f"use one of: {', '.join(POLICIES)}")
    valid = valid_params(name)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise InputError(f"unknown parameter(s) {unknown} for policy {name!r}",
                         column=unknown[0],
                         fix=f"valid parameters: {', '.join(valid) or '(none)'}")
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
    return POLICIES[name](**params)


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


__all__ = ["POLICIES", "get_policy", "valid_params", "parse_param", "Policy", "Decision",
           "DecisionState", "RunContext", "Corridor"]
