"""Plan an A/B comparison from a pilot, and decide after each block of pairs.

**How many.**  From a pilot (a few A/B pairs), each metric's spread of paired differences
``s`` gives the pairs that decide with the target power: detecting an effect ``E`` (two-sided
test) and showing equivalence within the margin when there is no difference (TOST), both at
``alpha / looks / metrics`` (each look's level, at Holm's first step over the metrics); the
plan runs the largest over the metrics.

**Order.**  A and B alternate in mirrored pairs -- ``A B``, ``B A``, ``A B``, ... -- so drift of
the host over time falls on both configurations alike.

**Repeat until decided.**  The plan splits the pairs into ``looks`` blocks.  After each block
``evalkit compare A B --plan-file plan.json`` tests every metric at ``alpha / looks``
(Bonferroni over the looks: the chance of any false verdict over all looks is at most alpha,
however the looks fall, as long as there are at most ``looks`` of them -- a look is taken only
after a whole block) and exits 4 while a metric is not yet known and blocks remain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalkit.compare.verdict import MAX_PAIRS, min_pairs_for, pairs_to_decide
from evalkit.errors import InputError

__all__ = ["PLAN_SCHEMA", "SequentialPlan", "interleaved_order", "plan_document",
           "read_plan"]

PLAN_SCHEMA = "evalkit-compare-plan/1"
RULE = "bonferroni-over-looks"


def interleaved_order(pairs: int) -> list[str]:
    """``A B``, ``B A``, ... for ``pairs`` pairs (an ABBA sequence)."""
    return [("A B" if i % 2 == 0 else "B A") for i in range(pairs)]


@dataclass(frozen=True)
class SequentialPlan:
    pairs_max: int
    looks: int
    block: int
    alpha: float
    file: str = "plan"

    @property
    def alpha_per_look(self) -> float:
        return self.alpha / self.looks

    def look_of(self, n: int) -> int:
        return math.ceil(n / self.block)

    def check(self, *, n: int, alpha: float, paired: bool) -> None:
        """A look is taken after whole blocks, within the plan, at the plan's alpha."""
        if not math.isclose(alpha, self.alpha):
            raise InputError(f"the plan was made for alpha = {self.alpha:g}, the comparison "
                             f"uses {alpha:g}", file=self.file, column="alpha",
                             fix="compare under the plan's alpha (or plan again)")
        if n % self.block:
            raise InputError(f"{n} pairs is not a whole number of blocks of {self.block}: a "
                             "look between blocks would be an extra look the error bound "
                             "does not cover", file=self.file, column="block",
                             fix=f"finish the block ({self.block - n % self.block} more "
                                 "pairs) before comparing")
        if n > self.pairs_max:
            raise InputError(f"{n} pairs exceed the plan's {self.pairs_max}", file=self.file,
                             column="pairs_max",
                             fix="compare the planned pairs only, or plan again")
        if not paired:
            raise InputError("the plan is for paired runs; these runs could not be paired",
                             file=self.file, column="pairs_max",
                             fix="give each A/B pair the same seed (or trace, or repetition "
                                 "index in the file names)")

    def status(self, n: int) -> dict:
        return {"rule": RULE, "look": self.look_of(n), "looks": self.looks,
                "block": self.block, "pairs_max": self.pairs_max, "alpha": self.alpha,
                "alpha_per_look": self.alpha_per_look}


def plan_document(pilot: dict, *, effect: dict, power: float, looks: int,
                  alpha: float) -> dict:
    """The plan from a pilot comparison document (its metrics' spreads).

    ``effect``: metric -> the effect to detect in the metric's unit (default: the margin)."""
    if looks < 1:
        raise InputError(f"--looks must be >= 1, got {looks}", column="--looks",
                         fix="use 1 (one decision at the end) or more")
    per_look = alpha / looks
    # each metric must pass Holm's first step on its own: alpha / looks / metrics
    level = per_look / max(1, len(pilot["metrics"]))
    rows, total = [], min_pairs_for(level)
    for r in pilot["metrics"]:
        if not r["paired"]:
            raise InputError("the pilot's runs could not be paired", column="--pair-by",
                             fix="give each pilot A/B pair the same seed (or trace, or "
                                 "repetition index in the file names)")
        e = effect.get(r["metric"], r["margin"])
        if e is None or not e > 0:
            raise InputError(f"{r['metric']}: no effect to plan for (no margin and no --effect)",
                             column="--effect", fix="give --effect E (in the metric's unit) "
                                                    "or a margin")
        detect = pairs_to_decide(e, r["sd"], alpha=level, power=power, margin=None)
        equal = pairs_to_decide(0.0, r["sd"], alpha=level, power=power,
                                margin=r["margin"]) if r["margin"] else None
        need = max(x for x in (detect, equal, min_pairs_for(level)) if x is not None)
        rows.append({"metric": r["metric"], "unit": r["unit"], "sd_pilot": r["sd"],
                     "effect": e, "margin": r["margin"], "pairs_detect": detect,
                     "pairs_equivalent": equal, "pairs": need})
        total = max(total, need)
    total = min(total, MAX_PAIRS)
    block = math.ceil(total / looks)
    total = block * looks
    return {"schema": PLAN_SCHEMA, "rule": RULE, "alpha": alpha, "alpha_per_look": per_look,
            "alpha_per_metric": level,
            "power": power, "looks": looks, "block": block, "pairs_max": total,
            "pilot_pairs": pilot["pairing"]["n"], "metrics": rows,
            "order": interleaved_order(total)}


def read_plan(data: dict, *, file: str) -> SequentialPlan:
    """The sequential plan of a plan document read from ``file``."""
    if not isinstance(data, dict) or data.get("schema") != PLAN_SCHEMA:
        raise InputError(f"not a comparison plan (schema {PLAN_SCHEMA})", file=file,
                         column="schema", fix="pass the file `evalkit compare --plan --out` "
                                              "wrote")
    values = {}
    for key, kind in (("pairs_max", int), ("looks", int), ("block", int), ("alpha", float)):
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or (
                kind is int and not float(v).is_integer()):
            raise InputError(f"{key} must be a positive {'integer' if kind is int else 'number'}",
                             file=file, column=key, fix="pass the plan as written")
        values[key] = kind(v)
    if values["block"] * values["looks"] != values["pairs_max"]:
        raise InputError("block x looks differs from pairs_max", file=file, column="block",
                         fix="pass the plan as written")
    if not values["alpha"] < 1:
        raise InputError("alpha must be < 1", file=file, column="alpha",
                         fix="pass the plan as written")
    return SequentialPlan(file=file, **values)
