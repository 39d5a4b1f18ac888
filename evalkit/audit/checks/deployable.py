"""Deployable checks: a registered, non-oracle policy class on a real serving sidecar."""

from __future__ import annotations

from evalkit.audit.checks.core import (Outcome, _listing, check, needs_real_backend,
                                       not_evaluable)
from evalkit.audit.registry import code_identity_status
from evalkit.runlog.schema import BACKENDS

__all__ = ["not_oracle", "real_sidecar"]

TIER = "deployable"
_LIST = (list,)
# the backends a campaign file can name (imported runs have no campaign to change)
CAMPAIGN_BACKENDS = tuple(b for b in BACKENDS if b != "import")


@check("not_oracle", tier=TIER)
def not_oracle(ctx, spec) -> Outcome:
    """Oracle status from the code each policy run records (``policy_identity``: class path
    and source sha256) resolved against the built-ins and installed entry points, and from a
    causality probe of that code; never from a name the run gives.  Code that cannot be
    resolved or probed fails closed (not evaluable)."""
    expected = ("the policy code each run records resolves to an installed, non-oracle class "
                "whose past decisions do not change with the future (causality probe)")
    if not ctx.campaign.has_logs:
        if ctx.claim.oracle:
            return Outcome(False, expected, "oracle = true: the policy saw future information",
                           "report it as a bound, never as a deployable controller")
        return not_evaluable(expected, "a summary table names no policy class: its oracle "
                             "column is the table's word", "audit the runs directory")
    status = {r: code_identity_status(ctx._meta(r))
              for r in ctx.claim.policy_runs.run_id.tolist()}
    seers = [f"{r}: {why}" for r, (o, why) in status.items() if o]
    if seers:
        return Outcome(False, expected, "oracle: " + _listing(seers, 3),
                       "report it as a bound, never as a deployable controller")
    unknown = [f"{r}: {why}" for r, (o, why) in status.items() if o is None]
    if unknown:
        return not_evaluable(expected, _listing(unknown, 3),
                             "replay the policy with the installed code, registered as a "
                             "built-in or under the entry-point group evalkit.policies (the "
                             "audit never imports a package.module:Class a run names)")
    return Outcome(True, expected, next(iter(status.values()))[1])


@check("real_sidecar", params={"real_backends": (_LIST, ["torch", "vllm"])}, tier=TIER)
def real_sidecar(ctx, spec) -> Outcome:
    """Every run of the claim's seeds (policy, draws, no-sync) on a real sidecar.  A claim
    the campaign replayed on the simulator only is not evaluable (missing runs: the campaign
    lines that switch the backend); one with some runs off a real sidecar fails."""
    backends = spec["real_backends"]
    expected = (f"every run of the claim's seeds (policy, draws, no-sync) on a real sidecar "
                f"({'/'.join(backends)})")
    ids = []
    for p in ctx.claim.pairs:
        ids += [p.policy_run] + p.draws.run_id.tolist()
        ids += [p.no_sync.run_id] if p.no_sync is not None else []
    runs = ctx.campaign.runs.set_index("run_id")
    got = runs.loc[ids, "backend"]
    if got.isna().all():
        return not_evaluable(expected, "no backend recorded (summary table)",
                             "add a backend column or audit the run logs")
    found = sorted(set(got.fillna("unknown")))
    off = [f"{r} ({b})" for r, b in zip(ids, got.fillna("unknown")) if b not in backends]
    if not off:
        return Outcome(True, expected, "backends: " + ", ".join(found))
    said = "backends: " + ", ".join(found) + "; not real: " + _listing(off, 4)
    sweepable = [b for b in backends if b in CAMPAIGN_BACKENDS]
    if sweepable and len(off) == len(ids) and set(found) <= set(CAMPAIGN_BACKENDS):
        # the campaign never planned a real sidecar: nothing failed, its lines are named
        return needs_real_backend(expected, said, sweepable)
    return Outcome(False, expected, said,
                   "replay the policy and its baselines on a real serving sidecar")
