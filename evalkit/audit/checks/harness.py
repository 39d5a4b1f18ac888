"""Harness checks: the stress harness replayed the baselines the mechanism needs."""

from __future__ import annotations

from evalkit.audit.checks.core import Outcome, _seeds, check, needs_runs, not_evaluable

__all__ = ["deferral_baseline", "fixed_cadence_baseline"]

TIER = "harness"
_LIST = (list,)


def _harness_baseline(ctx, spec, label: str) -> Outcome:
    runs = ctx.regime_runs
    backends = spec["harness_backends"]
    harness = runs[runs.backend.isin(backends)]
    wanted = spec["policies"]
    expected = (f"a {label} baseline ({' or '.join(wanted)}) replayed on "
                f"{'/'.join(backends)} for every seed of the policy")
    if harness.empty:
        return not_evaluable(expected, f"no {'/'.join(backends)} runs in regime "
                             f"{ctx.claim.regime}: the harness tier does not apply")
    have = set(harness.loc[harness.policy.isin(wanted), "seed"])
    if not have:
        # the campaign never planned the baseline: nothing to check, and nothing failed
        return needs_runs(expected, f"no {' or '.join(wanted)} runs on {'/'.join(backends)} "
                          f"in regime {ctx.claim.regime}: the harness tier needs them",
                          wanted[0], alternatives=wanted[1:])
    missing = sorted(set(ctx.claim.seeds) - have)
    if missing:
        return Outcome(False, expected, f"missing for seeds {_seeds(missing)}",
                       f"replay {wanted[0]} on {backends[0]} for seeds {_seeds(missing)} in "
                       f"regime {ctx.claim.regime}")
    return Outcome(True, expected, f"present for all {len(ctx.claim.seeds)} seeds")


@check("fixed_cadence_baseline", params={"policies": (_LIST, ["fixed_h"]),
                                         "harness_backends": (_LIST, ["sim"])}, tier=TIER)
def fixed_cadence_baseline(ctx, spec) -> Outcome:
    return _harness_baseline(ctx, spec, "fixed-cadence")


@check("deferral_baseline", params={"policies": (_LIST, ["pressure_gate", "random_deferral"]),
                                    "harness_backends": (_LIST, ["sim"])}, tier=TIER)
def deferral_baseline(ctx, spec) -> Outcome:
    return _harness_baseline(ctx, spec, "deferral")
