"""Placement-gain checks: a no-sync run per seed, load-matched to the policy's and draws' runs."""

from __future__ import annotations

from evalkit.audit.checks.core import Outcome, _fmt, _seeds, check, not_evaluable

__all__ = ["load_match", "no_sync_present"]

TIER = "placement_gain"


@check("no_sync_present", tier=TIER)
def no_sync_present(ctx, spec) -> Outcome:
    claim = ctx.claim
    expected = f"a no-sync run for every seed of regime {claim.regime}"
    missing = [p.seed for p in claim.pairs if p.no_sync is None]
    if missing:
        return Outcome(False, expected, "missing runs: " + "; ".join(
            f"no_sync for seed {s}" for s in missing),
            f"replay no_sync for seeds {_seeds(missing)}; a missing baseline is never V = 0. "
            "Without it the result is a head-to-head, not a placement gain")
    return Outcome(True, expected, f"present for all {len(claim.pairs)} seeds")


@check("load_match", params={"tolerances": ((dict,), {})}, tier=TIER)
def load_match(ctx, spec) -> Outcome:
    tol = spec["tolerances"]
    expected = "load matched to the seed's no-sync run: " + ", ".join(
        f"{k} within {v:.0%}" for k, v in sorted(tol.items()))
    table = ctx.load_match_table(spec)
    if isinstance(table, str):
        return not_evaluable(expected, table)
    unknown = table[table.status == "not evaluable"]
    if len(unknown):
        items = sorted({f"{r.check} ({r.reason})" for r in unknown.itertuples(index=False)})
        return not_evaluable(expected, "cannot compare: " + "; ".join(items[:6]),
                             "record the trainer's steps and every request in all runs")
    bad = table[~table.passed.astype(bool)]
    if len(bad):
        items = [f"seed {r.seed} {r.run_id}: {r.check} expected {_fmt(r.expected, 6)} found "
                 f"{_fmt(r.found, 6)}" for r in bad.head(8).itertuples(index=False)]
        more = f" (+{len(bad) - 8} more)" if len(bad) > 8 else ""
        return Outcome(False, expected, "; ".join(items) + more,
                       "replay the no-sync baseline with the same trace, seed, engine and "
                       "training load (the trainer must run, only merges are off)")
    return Outcome(True, expected, f"{table.run_id.nunique()} runs matched on "
                   f"{table.check.nunique()} quantities")
