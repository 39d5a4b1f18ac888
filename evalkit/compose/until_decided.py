"""``evalkit sweep CAMPAIGN --until-decided``: run seeds in batches until every claim is
decided by its group-sequential test, or the seed budget is spent.

The campaign must be planned as sequential (``[design] kind = "sequential"``, with
``max_seeds`` and ``batch``): the sweep writes that design, with alpha, into the runs
directory's ``plan.json`` before its first run (:mod:`evalkit.runlog.plan`), so the audit can
prove the stopping rule was fixed in advance.  Seeds run in the campaign's seed order, a
batch at a time (each batch in its own randomised, blocked run order); after each batch the
campaign is audited and every claim gets a verdict (:mod:`evalkit.audit.sequential`).  The
sweep stops when no claim is "continue"; ``--max-seeds`` may stop it earlier than the plan's
maximum (stopping earlier never costs validity), never later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evalkit.errors import InputError
from evalkit.audit.result import audit_campaign
from evalkit.audit.protocol import load_protocol
from evalkit.audit.sequential import protocol_min_effect, sequential_verdicts
from evalkit.replay.campaign import Campaign, load_campaign, plan_campaign
from evalkit.replay.plan import directory_plan, follow_plan
from evalkit.replay.sweep import run_campaign
from evalkit.runlog.plan import PLAN_FILE
from evalkit.stats.power import sequential_looks

__all__ = ["sweep_until_decided"]


@dataclass
class BatchRecord:
    seeds: list[int]                 # seeds run so far
    verdicts: list                   # SequentialVerdict per claim after this batch
    ran: int
    skipped: int
    audited: int = 0                 # seeds the verdicts counted (the store may hold more)


@dataclass
class UntilDecidedSummary:
    runs_dir: Path
    max_seeds: int
    batch: int
    batches: list[BatchRecord] = field(default_factory=list)
    sweep_ok: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> list:
        return self.batches[-1].verdicts if self.batches else []

    @property
    def decided(self) -> bool:
        return bool(self.verdicts) and all(v.decided for v in self.verdicts)

    @property
    def seeds_run(self) -> int:
        return len(self.batches[-1].seeds) if self.batches else 0

    @property
    def seeds_counted(self) -> int:
        """Seeds the last verdicts were computed over.  A re-run of a finished sweep audits a
        store that already holds every seed the first run ran, so its first batch's verdicts
        count them all: the decision belongs to that count, not to the batch's."""
        return max(self.seeds_run, self.batches[-1].audited) if self.batches else 0

    def format(self) -> str:
        lines = []
        for i, b in enumerate(self.batches, 1):
            states = "; ".join(
                f"{v.regime}/{v.policy} {v.decision}"
                + (f" (t {v.statistic:.3g} vs {v.boundary:.3g} at {v.seeds_used} seeds)"
                   if v.last_look is not None else "")
                for v in b.verdicts)
            held = (f"; the runs directory holds {b.audited} seeds, the verdicts count them all"
                    if b.audited > len(b.seeds) else "")
            lines.append(f"batch {i}: seeds {b.seeds[0]}..{b.seeds[-1]} ({len(b.seeds)} seeds, "
                         f"{b.ran} runs ran, {b.skipped} skipped{held}): {states}")
        if self.decided:
            lines.append(f"decided after {self.seeds_counted} of at most {self.max_seeds} seeds "
                         f"-> {self.runs_dir}")
        else:
            lines.append(f"stopped after {self.seeds_counted} of at most {self.max_seeds} seeds "
                         f"with claims undecided -> {self.runs_dir}")
        for v in self.verdicts:
            lines += ["  " + line for line in v.lines()]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _limits(camp, max_seeds: int | None, batch: int | None) -> tuple[int, int]:
    design = camp.design or {}
    where = str(camp.path) if camp.path else None
    if design.get("kind") != "sequential":
        raise InputError("--until-decided needs a campaign planned as sequential",
                         file=where, column="design.kind",
                         fix='add [design] kind = "sequential", max_seeds = N, batch = B to '
                             "the campaign before its first run")
    planned = int(design.get("max_seeds") or len(camp.seeds))
    if max_seeds is not None and not 1 <= max_seeds <= planned:
        raise InputError(f"--max-seeds {max_seeds} is outside 1..{planned} (the plan's "
                         "max_seeds)", file=where, column="--max-seeds",
                         fix=f"use at most {planned}; the plan fixed the maximum before the "
                             "first run")
    planned_batch = int(design.get("batch") or 1)
    if batch is not None and batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}", column="--batch",
                         fix=f"e.g. --batch {planned_batch} (the plan's)")
    return (planned if max_seeds is None else max_seeds,
            planned_batch if batch is None else batch)


def sweep_until_decided(campaign, runs_dir, *, max_seeds: int | None = None,
                        batch: int | None = None, tier: str = "matched_budget",
                        min_effect: float | None = None, protocol=None, seed: int = 0,
                        **sweep_kw) -> UntilDecidedSummary:
    """Sweep ``campaign`` batch by batch into ``runs_dir`` until every claim is decided.

    ``min_effect``: the sequential test's null shift (default and lowest allowed: the
    protocol's smallest effect of interest).
    ``sweep_kw`` go to :func:`evalkit.replay.sweep.run_campaign` (n_jobs, progress, ...).
    """
    camp = campaign if isinstance(campaign, Campaign) else load_campaign(campaign)
    limit, step = _limits(camp, max_seeds, batch)
    proto = load_protocol(protocol)
    proto.tier(tier)
    if min_effect is None:
        min_effect = protocol_min_effect(proto)
    if Path(str(runs_dir)).is_dir():
        # a plan frozen before the sweep fixes the seed order (a challenge's derived one)
        camp = follow_plan(camp, directory_plan(camp, runs_dir, proto)[0])
    order = list(camp.seeds)[:limit]
    jobs = plan_campaign(camp)
    summary = UntilDecidedSummary(runs_dir=Path(runs_dir), max_seeds=limit, batch=step)
    first = (camp.design or {}).get("first_look") if batch is None else None
    stops = sequential_looks(limit, step, first)
    for start, stop in zip((0,) + stops[:-1], stops):
        now = set(order[start:stop])
        done = run_campaign(camp, runs_dir, jobs=[j for j in jobs if j.seed in now],
                            protocol=proto, **sweep_kw)
        # one plan note: the first batch's ("written"); later batches only follow that plan
        summary.notes += [n for n in done.notes if n not in summary.notes
                          and not (summary.batches and PLAN_FILE in n)]
        if not done.ok:
            summary.sweep_ok = False
            summary.notes.append(done.format())
            break
        doc = audit_campaign(runs_dir, protocol=proto, seed=seed,
                             max_tier=tier).decision_dict()
        verdicts = sequential_verdicts(doc, proto, tier, min_effect)
        summary.batches.append(BatchRecord(order[:stop], verdicts, done.count("ran"),
                                           done.count("skipped"),
                                           max((v.n_seeds for v in verdicts), default=0)))
        if any(v.decision == "refused" for v in verdicts) or all(v.decided for v in verdicts):
            break
    return summary
