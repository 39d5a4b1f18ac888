"""Shared plumbing for result dataclasses: JSON-safe ``to_dict`` and input checks."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from evalkit.errors import InputError
from evalkit.jsonio import to_jsonable


def json_safe(value):
    """JSON-safe values (:func:`evalkit.jsonio.to_jsonable`, unrounded): NaN and +-inf become
    ``None``; every result that can hold a non-finite number also carries a text field saying
    why."""
    return to_jsonable(value)


class ResultMixin:
    """``to_dict()`` for result dataclasses; fields named in ``_dict_exclude`` are left out
    (bulky arrays such as 100,000 sampled Φ values), as are fields starting with ``_``."""

    _dict_exclude: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            if f.name.startswith("_") or f.name in self._dict_exclude:
                continue
            out[f.name] = json_safe(getattr(self, f.name))
        return out


def as_finite_1d(x, name: str, *, min_size: int = 1, what: str = "values") -> np.ndarray:
    """(n,) float array with every entry finite, else :class:`InputError` naming the entries."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be numeric ({exc})", column=name,
                         fix=f"pass a 1-D array of {what}") from exc
    if arr.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {arr.shape}", column=name,
                         fix=f"pass a 1-D array of {what}")
    if arr.size == 0:
        raise InputError(f"{name} is empty", column=name, fix=f"pass at least {min_size} {what}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        shown = ", ".join(str(i) for i in bad[:10]) + (" ..." if bad.size > 10 else "")
        raise InputError(f"{name} holds {bad.size} NaN/inf entries (positions {shown})",
                         column=name, fix="drop or repair those entries explicitly upstream")
    if arr.size < min_size:
        raise InputError(f"{name} has {arr.size} {what}; at least {min_size} are needed",
                         column=name, fix=f"provide at least {min_size} {what}")
    return arr


def as_generator(rng) -> np.random.Generator:
    """An explicit Generator: pass one, or an int seed; ``None`` means seed 0 (deterministic)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng(0)
    if isinstance(rng, (int, np.integer)):
        return np.random.default_rng(int(rng))
    raise InputError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}",
                     column="rng", fix="pass numpy.random.default_rng(seed)")


def seed_series(values, name: str) -> dict:
    """A mapping seed -> float from a dict, pandas Series, or sequence of (seed, value)."""
    if hasattr(values, "to_dict") and hasattr(values, "index"):
        values = values.to_dict()
    if not isinstance(values, Mapping):
        raise InputError(f"{name} must map seed -> value (dict or pandas Series)", column=name,
                         fix="key the per-seed values by seed so pairing can be checked")
    out = {}
    for seed, v in values.items():
        f = float(v)
        if not math.isfinite(f):
            raise InputError(f"{name} for seed {seed!r} is {f}", column=name,
                             fix="every seed needs a finite value; rerun or drop the seed "
                                 "in both conditions")
        out[seed] = f
    return out


ALTERNATIVES = ("greater", "less", "two-sided")
DEFAULT_RTOL = 1e-9                  # randomisation tests: tie tolerance, relative to the data
DEFAULT_MC_RESAMPLES = 100_000       # randomisation tests: Monte Carlo B when none is given


def check_alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise InputError(f"unknown alternative {alternative!r}", column="alternative",
                         fix="use 'greater', 'less' or 'two-sided'")
    return alternative


def check_alpha(alpha, fix: str = "use e.g. 0.05") -> float:
    """A significance level strictly inside (0, 1), as a float; else :class:`InputError`."""
    if not 0.0 < float(alpha) < 1.0:
        raise InputError(f"alpha must lie in (0, 1), got {alpha}", column="alpha", fix=fix)
    return float(alpha)


def check_level(confidence_level, fix: str = "use e.g. 0.95",
                column: str = "confidence_level") -> float:
    """A confidence level strictly inside (0, 1), as a float; else :class:`InputError` naming
    ``column`` (the caller's parameter)."""
    if not 0.0 < float(confidence_level) < 1.0:
        raise InputError(f"{column} must lie in (0, 1), got {confidence_level}",
                         column=column, fix=fix)
    return float(confidence_level)


def check_n_resamples(n_resamples) -> None:
    """Randomisation tests: ``n_resamples`` is a positive integer or ``inf`` (exact)."""
    if isinstance(n_resamples, (str, bytes, bool)) or not (
            n_resamples == np.inf or (float(n_resamples) >= 1
                                      and float(n_resamples) == int(n_resamples))):
        raise InputError(f"n_resamples must be a positive integer or inf, got {n_resamples}",
                         column="n_resamples", fix="use e.g. 100000, or None for auto")


def check_shift(null_shift) -> float:
    """A finite null shift (the mean gain under H0), as a float."""
    try:
        shift = float(null_shift)
    except (TypeError, ValueError) as exc:
        raise InputError(f"null_shift must be a number, got {null_shift!r}", column="null_shift",
                         fix="pass the mean gain under H0, e.g. 0.0 or min_effect") from exc
    if not math.isfinite(shift):
        raise InputError(f"null_shift must be finite, got {shift}", column="null_shift",
                         fix="pass the mean gain under H0, e.g. 0.0 or min_effect")
    return shift


def check_optional_confidence(confidence):
    """None (no interval) or a confidence level in (0, 1), as a float."""
    if confidence is None:
        return None
    return check_level(confidence, fix="use e.g. 0.95, or None for no interval",
                       column="confidence")
