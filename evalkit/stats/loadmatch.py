"""No-sync load matching: is the no-sync run really the same load as the policy run?"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin

__all__ = ["CHECK_KEYS", "DEFAULT_TOLERANCES", "LoadCheck", "LoadMatchResult", "load_match"]

# Relative tolerances: the same trace and seed give identical requests and tokens; achieved
# rates and trainer throughput may wobble a little.
DEFAULT_TOLERANCES = {
    "n_requests": 0.0,
    "arrival_rate_achieved": 0.02,
    "prompt_tokens_total": 0.0,
    "output_tokens_total": 0.01,
    "step_rate": 0.05,
    # the whole horizon: a no-sync trainer idle after 30 s steps at the same rate while it ran
    "trainer_active_share": 0.05,
}
CHECK_KEYS = tuple(DEFAULT_TOLERANCES)


@dataclass(frozen=True)
class LoadCheck(ResultMixin):
    """One compared quantity: ``expected`` (no-sync), ``found`` (policy), relative
    difference ``|found - expected| / |expected|`` against ``tolerance``.  ``status`` is
    "passed", "failed" or "not evaluable" (with ``reason``)."""

    key: str
    expected: float
    found: float
    tolerance: float
    rel_diff: float
    passed: bool
    status: str
    reason: str


@dataclass(frozen=True)
class LoadMatchResult(ResultMixin):
    """All checks, ``matched`` (every check passed) and ``vex = V(policy) - V(no-sync)``.

    ``vex`` is computed even when unmatched, so a reader can see it; ``matched`` says whether
    it may be read as sync-excess."""

    checks: list
    matched: bool
    vex: float
    v_policy: float
    v_no_sync: float
    failed: list
    not_evaluable: list


def _get(summary, key: str, which: str):
    if key not in summary:
        raise InputError(f"{which} summary lacks '{key}'", column=key,
                         fix="pass the per-run summary row (evalkit.runlog.summary)")
    value = summary[key]
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _as_mapping(summary, which: str):
    if hasattr(summary, "to_dict") and hasattr(summary, "index") and not hasattr(summary,
                                                                                   "columns"):
        return summary.to_dict()
    if hasattr(summary, "columns"):
        if len(summary) != 1:
            raise InputError(f"{which} summary has {len(summary)} rows, expected 1",
                             column=which, fix="pass one run's summary row")
        return summary.iloc[0].to_dict()
    if isinstance(summary, Mapping):
        return summary
    raise InputError(f"{which} summary must be dict-like", column=which,
                     fix="pass a dict or a pandas Series of the run's summary")


def load_match(policy_summary, no_sync_summary, tolerances=None) -> LoadMatchResult:
    """Compare a policy run with its no-sync run (same seed, same trace, same training load).

    Summaries are dict-like with keys n_requests, arrival_rate_achieved, prompt_tokens_total,
    output_tokens_total, step_rate, trainer_active_share and violation_rate.  A missing no-sync run (None) raises
    InputError: V(no-sync) is never taken to be 0.
    """
    if no_sync_summary is None:
        raise InputError("the load-matched no-sync run is missing", column="no_sync",
                         fix="replay the no_sync policy for this seed; without it Vex is not "
                             "defined (a missing baseline is never V = 0)")
    if policy_summary is None:
        raise InputError("the policy run summary is missing", column="policy",
                         fix="pass the policy run's summary row")
    pol = _as_mapping(policy_summary, "policy")
    base = _as_mapping(no_sync_summary, "no_sync")
    if "seed" in pol and "seed" in base and pol["seed"] != base["seed"]:
        raise InputError(f"the no-sync run is seed {base['seed']!r} but the policy run is seed "
                         f"{pol['seed']!r}", column="seed",
                         fix="match each policy run with the no-sync run of the same seed")
    tol = dict(DEFAULT_TOLERANCES)
    if tolerances:
        unknown = set(tolerances) - set(tol)
        if unknown:
            raise InputError(f"unknown tolerance keys {sorted(unknown)}", column="tolerances",
                             fix=f"use keys from {list(CHECK_KEYS)}")
        tol.update({k: float(v) for k, v in tolerances.items()})
    checks = []
    for key in CHECK_KEYS:
        expected, found = _get(base, key, "no-sync"), _get(pol, key, "policy")
        if not (math.isfinite(expected) and math.isfinite(found)):
            which = [w for w, v in (("no-sync", expected), ("policy", found))
                     if not math.isfinite(v)]
            checks.append(LoadCheck(key, expected, found, tol[key], math.nan, False,
                                    "not evaluable",
                                    f"{key} is missing/NaN in the {' and '.join(which)} run"))
            continue
        if expected == 0:
            rel = 0.0 if found == 0 else math.inf
        else:
            rel = abs(found - expected) / abs(expected)
        ok = rel <= tol[key] + 1e-12
        checks.append(LoadCheck(key, expected, found, tol[key], rel, ok,
                                "passed" if ok else "failed",
                                "" if ok else f"relative difference {rel:.4g} exceeds "
                                              f"tolerance {tol[key]:.4g}"))
    v_pol, v_base = _get(pol, "violation_rate", "policy"), _get(base, "violation_rate", "no-sync")
    for name, v in (("policy", v_pol), ("no-sync", v_base)):
        if not math.isfinite(v):
            raise InputError(f"the {name} run's violation_rate is {v}", column="violation_rate",
                             fix="a run without requests has no V; rerun it")
    return LoadMatchResult(checks=checks, matched=all(c.passed for c in checks),
                           vex=v_pol - v_base, v_policy=v_pol, v_no_sync=v_base,
                           failed=[c.key for c in checks if c.status == "failed"],
                           not_evaluable=[c.key for c in checks if c.status == "not evaluable"])
