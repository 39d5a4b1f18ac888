"""The campaign's planned design as the audit document records it (``design``): whether the
runs directory's plan froze a sequential design, its alpha, seed limit and claims, the
plan's seed order, and why there is no sequential design when there is none.  The sequential
gate and ``sweep --until-decided`` read it from the document, never from the runs
directory."""

from __future__ import annotations

from evalkit.audit.checks.plan import planned_claims
from evalkit.runlog.plan import read_plan

__all__ = ["planned_design"]


def planned_design(runset) -> dict:
    """``{"sequential": design or None, "seed_order": [...], "why_not": "..."}`` from the runs
    directory's plan (a summary table has none)."""
    if not runset.has_logs or runset.runs_dir is None:
        return _design(None, [], "a summary table has no plan")
    plan = read_plan(runset.runs_dir)
    if plan is None:
        return _design(None, [], "the runs directory has no plan.json (it was not swept "
                                 "under a plan)")
    design = plan.get("design") or {}
    seeds = [int(s) for s in ((plan.get("campaign") or {}).get("settings") or {}).get(
        "seeds", [])]
    if design.get("kind") != "sequential":
        return _design(None, seeds, f"the plan's design is {design.get('kind')!r}, not "
                                    "sequential: its seed count was fixed in advance")
    # the family the sequential alpha is shared over: the plan's claims, with runs or not
    claims = [[regime, policy] for regime, policy in planned_claims(plan)]
    return _design({**design, "planned_claims": claims}, seeds, "")


def _design(sequential: dict | None, order: list[int], why_not: str) -> dict:
    return {"sequential": sequential, "seed_order": order, "why_not": why_not}
