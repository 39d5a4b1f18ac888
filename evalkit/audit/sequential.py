"""Sequential verdicts: decide a claim by a group-sequential test of the mean gain, look by look.

A campaign planned as sequential (``[design] kind = "sequential"``, ``max_seeds``, ``batch``,
optionally ``first_look``, ``spending``, ``gamma`` and ``futility``, in the campaign TOML,
recorded in the runs directory's ``plan.json`` before the first run) tests the estimand of the
fixed gate: the mean over independent seeds of ``d_s = mean(draws_s) - policy_s`` (positive =
better, as :mod:`evalkit.stats.paired`), with the group-sequential design of
:mod:`evalkit.stats.group_sequential`: a look after each block of ``batch`` seeds (from
``first_look`` seeds on, when the plan sets it) in the plan's seed order (the order the
commitment gives), the plan's alpha spending (O'Brien-Fleming unless it names Hwang-Shih-DeCani
with a gamma), t-type boundaries, the plan's non-binding futility rule (``"zero"``, t < 0 at
interim looks, unless it names ``"rising"``), and ``null_shift = min_effect`` (a pass needs the
mean gain above the smallest effect of interest, as the fixed gate), the t's variance floored
at each look by the draws' (:func:`look_floors`). The one-sided level per claim is the plan's
alpha (halved for a two-sided protocol: the better side) over the number of claims **the plan**
fixes: a planned claim without runs stays a member of the family. Per claim:

- **pass**: the look's t statistic reached its boundary, and every other check of the tier
  (and the tiers below it) passes;
- **stop: not better**: the statistic fell below the futility bound at an interim look
  ("not better": the design's false "worse" rate is not measured, so it never says "worse");
- **exhausted**: the last look (``max_seeds`` seeds) did not reach its boundary;
- **continue**: none of these yet: run the next block of seeds;
- **fail**: a blocking check other than the fixed-n significance and seed-count checks;
- **refused**: no sequential design (no plan, or a fixed one), an audit alpha other than the
  plan's, or seeds that are not the plan's first ones (a gap, an unplanned seed, more than
  ``max_seeds``).

Every plan lists its seeds before the first run, so no campaign is open-ended: a sequential
plan without ``max_seeds`` has the number of seeds it lists as its maximum.  A seed
repeated in the plan's order or in a claim's units is bad input
(:func:`evalkit.seeds.repeated_seeds`, the rule the plan reader applies): a seed is one
independent replication and counts once.

The verdicts are a function of the audit document: its ``design`` (the plan's design, its
claims and seed order) and each claim's ``units`` (every independent seed's policy V and its
draws' V) and ``checks``, so the gate decides on ``evalkit gate RUNS`` and on an audit.json
alike.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from evalkit.document.schema import DIAGNOSTICS
from evalkit.document.words import DIAGNOSTIC_TEXT, EFFECT_TOL, pp, shape_text
from evalkit.errors import EXIT_CONTINUE, EXIT_NOT_REACHED, EXIT_OK, InputError
from evalkit.seeds import repeated_seeds
from evalkit.stats.floored import padded_draws
from evalkit.stats.group_sequential import (FUTILITY, check_spending, decide, design,
                                             futility_words, spending_words)
from evalkit.stats.level_trend import level_trend, level_trend_applies
from evalkit.stats.paired import sample_skewness
from evalkit.stats.power import look_floors_batch, sequential_looks
from evalkit.stats.tail_luck import tail_luck, tail_luck_applies

__all__ = ["SequentialVerdict", "look_floor_state", "pass_assumptions", "planned_looks",
           "protocol_min_effect", "seed_diagnostics", "seed_differences", "sequential_verdicts",
           "verdict_for"]

# the fixed-n checks the group-sequential test replaces
REPLACED_CHECKS = ("gain_significant", "enough_seeds")
DECISIONS = ("pass", "stop: not better", "exhausted", "continue", "fail", "refused")


@dataclass
class SequentialVerdict:
    regime: str
    policy: str
    decision: str                    # one of DECISIONS
    reason: str
    n_seeds: int = 0                 # seeds of the claim in the plan's order
    max_seeds: int | None = None
    alpha: float = math.nan          # the plan's alpha
    claims: int = 1                  # the plan's claims: the Bonferroni factor
    min_effect: float = 0.0          # the null shift: a pass needs a mean gain above it
    result: object = None            # SequentialDecision, when the test ran
    seeds: list = field(default_factory=list)
    blocking: list = field(default_factory=list)   # Check objects that block the tier
    level: float = math.nan          # one-sided alpha of this claim's design
    looks: tuple = ()                # the design's looks (cumulative seeds)
    d: list = field(default_factory=list)          # d_s of the seeds in plan order
    spending: str = "obrien-fleming"  # the plan's alpha-spending function ...
    gamma: float = -4.0               # ... and its Hwang-Shih-DeCani parameter
    futility: str = "zero"            # the plan's futility rule
    assumptions: list = field(default_factory=list)  # what a pass rests on, in words

    @property
    def decided(self) -> bool:
        return self.decision != "continue"

    @property
    def exit_code(self) -> int:
        return {"pass": EXIT_OK, "continue": EXIT_CONTINUE}.get(self.decision,
                                                                 EXIT_NOT_REACHED)

    @property
    def last_look(self):
        """The last look walked (a :class:`evalkit.stats.group_sequential.Look`), or None."""
        r = self.result
        return r.looks[-1] if r is not None and r.looks else None

    @property
    def seeds_used(self) -> int:
        """Seeds the decision rests on: those of the last look walked (0 before the first)."""
        return self.result.seeds_used if self.result is not None else 0

    @property
    def look_index(self) -> int | None:
        """1-based number of the last look walked."""
        r = self.result
        return len(r.looks) if r is not None and r.looks else None

    @property
    def statistic(self) -> float | None:
        look = self.last_look
        return None if look is None else look.statistic

    @property
    def boundary(self) -> float | None:
        look = self.last_look
        return None if look is None else look.boundary

    @property
    def mean_gain(self) -> float | None:
        look = self.last_look
        return None if look is None else look.mean

    @property
    def ci(self) -> tuple | None:
        """The look's repeated confidence interval of the mean gain: mean +- boundary x se
        (its lower end is above min_effect exactly when the look passes)."""
        look = self.last_look
        if look is None:
            return None
        used = np.asarray(self.d[:look.seeds], dtype=float)
        se = float(np.std(used, ddof=1)) / math.sqrt(look.seeds)
        half = look.boundary * se if math.isfinite(look.boundary) else math.inf
        return (look.mean - half, look.mean + half)

    def lines(self) -> list[str]:
        out = [f"sequential {self.decision.upper()}: {self.regime}/{self.policy}: {self.reason}"]
        look = self.last_look
        if look is not None:
            lo, hi = self.ci
            shown = ", ".join(str(s) for s in self.seeds[:look.seeds][:12])
            more = " ..." if look.seeds > 12 else ""
            out.append(f"  look {self.look_index} of {len(self.looks)} (looks at "
                       f"{', '.join(map(str, self.looks))} seeds): {look.seeds} seeds in plan "
                       f"order [{shown}{more}]; t = {look.statistic:.4g}, boundary "
                       f"{look.boundary:.4g}"
                       + (f", futility {look.futility:.4g}" if look.futility is not None
                          else "")
                       + ("; the draws' variance floor binds (t uses it, not d's sample "
                          "variance)" if look.floor_binds else ""))
            out.append(f"  mean gain d = {pp(look.mean)} pp, repeated CI [{_bound(lo)}, "
                       f"{_bound(hi)}] pp; smallest effect of interest "
                       f"{pp(self.min_effect, signed=False)} pp; one-sided alpha "
                       f"{self.level:.4g} = plan alpha {self.alpha:g} over {self.claims} "
                       f"planned claim(s) ({spending_words(self.spending, self.gamma)}; "
                       f"{futility_words(self.futility)})")
        for c in self.blocking:
            out.append(f"  [FAIL] {c.tier}/{c.name}: {c.found}")
        out += [f"  assumption: {text}" for text in self.assumptions]
        return out


def _bound(x: float) -> str:
    """A CI bound in pp; an unbounded side stays infinite."""
    return "-inf" if x == -math.inf else "+inf" if x == math.inf else pp(x)


def protocol_min_effect(protocol) -> float:
    """The protocol's smallest effect of interest (``gain_significant.min_effect``, V units;
    0 when the protocol sets none): the sequential test's null shift."""
    spec = protocol.checks.get("gain_significant")
    return float(spec.params.get("min_effect", 0.0)) if spec is not None else 0.0


def planned_looks(design_spec: dict, order: list[int]) -> tuple:
    """Cumulative seeds at each look: after each ``batch`` seeds up to ``max_seeds`` (the
    plan's seed count when it sets none), from ``first_look`` seeds on when the plan sets
    it; a look needs 2 seeds, so batch 1 without a first look looks first at 2."""
    top = design_spec.get("max_seeds")
    top = len(order) if top is None else int(top)
    batch = int(design_spec.get("batch") or 1)
    first = design_spec.get("first_look")
    return tuple(n for n in sequential_looks(top, batch, first) if n >= 2) if top >= 2 else ()


@functools.lru_cache(maxsize=64)
def _design(looks: tuple, level: float, spending: str, gamma: float, futility: str):
    """The group-sequential design of a plan's looks at a level under its spending function
    and futility rule (computed once per combination: the sweep decides after every batch,
    the study on thousands of campaigns)."""
    return design(looks, level, spending, gamma, futility)


def plan_futility(design_spec: dict) -> str:
    """The plan's futility rule: ``"zero"`` when it names none."""
    rule = design_spec.get("futility", "zero")
    if rule not in FUTILITY:
        raise InputError(f"the plan's futility rule is {rule!r}", column="design.sequential."
                         "futility", fix=f"{_FROZEN} (a plan names one of {', '.join(FUTILITY)})")
    return rule


def plan_spending(design_spec: dict) -> tuple[str, float]:
    """The plan's spending function and gamma; a plan frozen before plans named one spends
    as O'Brien-Fleming, the only function there was."""
    spending = design_spec.get("spending")
    if spending is None:
        return "obrien-fleming", -4.0
    return check_spending(spending, design_spec.get("gamma"), prefix="design.sequential.")


def seed_differences(units: list[dict]) -> dict[int, float]:
    """``d_s = mean(draws_s) - policy_s`` (positive = better) per seed of a claim's units."""
    return {int(u["seed"]): float(np.mean(u["v_draws"])) - float(u["v_policy"])
            for u in units}


def look_floor_state(look) -> str:
    """What the draws' variance floor did at a look, in words (a look's floor is given only
    where it binds: :func:`evalkit.stats.power.look_floors_batch`)."""
    if look.floor_binds:
        return "the draws' variance floor binds at this look"
    return "the draws' variance floor does not bind at this look"


def seed_diagnostics(units: list[dict], seeds: list[int], alpha: float) -> dict:
    """The claim's non-blocking diagnostics (:data:`evalkit.document.schema.DIAGNOSTICS`) on
    ``seeds`` of its units, computed as the audit computes them on all of a claim's seeds
    (None where one cannot run: fewer than 2 seeds, or tail_luck without 2 draws a seed)."""
    by_seed = {int(u["seed"]): u for u in units}
    policy = [float(by_seed[s]["v_policy"]) for s in seeds]
    draws = [np.asarray(by_seed[s]["v_draws"], dtype=float) for s in seeds]
    found = {"tail_luck": tail_luck(policy, draws, alpha) if tail_luck_applies(draws) else None,
             "level_trend": (level_trend(policy, draws, alpha) if level_trend_applies(policy)
                             else None)}
    return {key: found[key] for key in DIAGNOSTICS}


def pass_assumptions(units: list[dict], seeds: list[int], d, look, alpha: float) -> list[str]:
    """What a pass at ``look`` rests on beyond the test, on the seeds it used (the plan's
    first ``look.seeds`` of ``seeds``, whose differences ``d`` are, in that order): the
    tail_luck and level_trend diagnostics when flagged
    (:func:`seed_diagnostics`: the gate computes them from the units, as it computes d), and
    the shape of d the decision's t assumes with what the floor did at that look
    (:func:`evalkit.document.words.shape_text`: below 20 seeds always, from there on when
    Cochran's rule finds them too few)."""
    stated = [DIAGNOSTIC_TEXT[key](diag)
              for key, diag in seed_diagnostics(units, list(seeds[:look.seeds]), alpha).items()
              if diag is not None and diag.flagged]
    shape = shape_text(look.seeds, look_floor_state(look),
                       sample_skewness(np.asarray(d[:look.seeds], dtype=float)))
    return stated + ([shape] if shape else [])


def look_floors(units: list[dict], seeds: list[int], looks) -> np.ndarray:
    """Per look, the draws' variance floor of d over the plan's first seeds, in the floor's
    "lognormal" law (:mod:`evalkit.stats.floored`: a policy wider than its draws is held to
    its variance on V); NaN where the floor is dropped or not defined, and for looks past
    the seeds there are:
    :func:`evalkit.stats.power.look_floors_batch` on the units' policy and draws."""
    by_seed = {int(u["seed"]): u for u in units}
    rows = [by_seed[s] for s in seeds]
    reached = [nk for nk in looks if nk <= len(rows)]
    out = np.full(len(looks), np.nan)
    if reached:
        policy = np.array([[float(u["v_policy"]) for u in rows]])
        draws = padded_draws([u["v_draws"] for u in rows], len(rows))[None]
        out[:len(reached)] = look_floors_batch(policy, draws, reached)[0]
    return out


def _one_sided(alpha: float, alternative: str) -> float:
    """The better side's level: half a two-sided alpha."""
    return alpha / 2.0 if alternative == "two-sided" else alpha


def verdict_for(claim, protocol, tier: str, design_spec, order, n_claims: int,
                min_effect: float) -> SequentialVerdict:
    alpha = float(design_spec["alpha"])
    looks = planned_looks(design_spec, order)
    spending, gamma = plan_spending(design_spec)
    futility = plan_futility(design_spec)
    base = dict(regime=claim["regime"], policy=claim["policy"], alpha=alpha, claims=n_claims,
                spending=spending, gamma=gamma, futility=futility,
                max_seeds=looks[-1] if looks else design_spec.get("max_seeds"),
                min_effect=float(min_effect), looks=looks,
                level=_one_sided(alpha, protocol.alternative) / n_claims)
    if not math.isclose(alpha, protocol.alpha):
        return SequentialVerdict(decision="refused", reason=(
            f"the audit's alpha {protocol.alpha:g} is not the plan's {alpha:g}"), **base)
    if not looks:
        return SequentialVerdict(decision="refused", reason=(
            f"the plan allows {design_spec.get('max_seeds')} seed(s) over {len(order)} "
            "planned: a look needs at least 2"), **base)
    if looks[-1] > len(order):
        return SequentialVerdict(decision="refused", reason=(
            f"the plan's max_seeds {looks[-1]} exceeds the {len(order)} seeds it lists"),
            **base)
    upto = protocol.tier_names[:protocol.tier_names.index(tier) + 1]
    blocking = [SimpleNamespace(**c) for c in claim["checks"]
                if c["blocking"] and c["tier"] in upto and c["name"] not in REPLACED_CHECKS]
    diffs = seed_differences(claim["units"])
    unplanned = sorted(set(diffs) - set(order))
    seeds = [s for s in order if s in diffs]
    base.update(n_seeds=len(seeds), seeds=seeds, blocking=blocking,
                d=[diffs[s] for s in seeds])
    if unplanned:
        return SequentialVerdict(decision="refused", reason=(
            f"seed(s) {unplanned} are not in the plan's seed order"), **base)
    if seeds != list(order[:len(seeds)]):
        gap = next(s for s in order if s not in diffs)
        return SequentialVerdict(decision="refused", reason=(
            f"planned seed {gap} has no result while later planned seeds do: the looks take "
            "the plan's first seeds, in its order"), **base)
    if len(seeds) > looks[-1]:
        return SequentialVerdict(decision="refused", reason=(
            f"{len(seeds)} seeds but the plan allows at most {looks[-1]}"), **base)
    blocked = (f"{len(blocking)} check(s) up to {tier} block: "
               + ", ".join(c.name for c in blocking))
    if len(seeds) < looks[0] and not blocking:
        return SequentialVerdict(decision="continue", reason=(
            f"{len(seeds)} seed(s): the first look is at {looks[0]}; run more seeds"), **base)
    if len(seeds) < looks[0]:                   # more seeds cannot mend a blocking check
        return SequentialVerdict(decision="fail", reason=blocked, **base)
    gs = _design(looks, base["level"], spending, gamma, futility)
    res = decide(base["d"], gs, null_shift=float(min_effect),
                 variance_floor=look_floors(claim["units"], seeds, looks))
    base["result"] = res
    look = res.looks[-1]
    at = f"look {len(res.looks)} ({look.seeds} seeds)"
    if blocking:
        return SequentialVerdict(decision="fail", reason=blocked, **base)
    if res.decision == "pass":
        return SequentialVerdict(decision="pass", reason=(
            f"at {at} t = {look.statistic:.4g} reached the boundary {look.boundary:.4g}: the "
            f"mean gain {pp(look.mean)} pp is above the smallest effect of interest "
            f"{pp(min_effect, signed=False)} pp; the policy beats matched random"),
            assumptions=pass_assumptions(claim["units"], seeds, base["d"], look,
                                         protocol.alpha), **base)
    if res.decision != "continue" and look.seeds == looks[-1]:
        return SequentialVerdict(decision="exhausted", reason=(
            f"all {looks[-1]} planned seeds ran and t = {look.statistic:.4g} stayed below the "
            f"last boundary {look.boundary:.4g}: not shown better than matched random by more "
            f"than {pp(min_effect, signed=False)} pp"), **base)
    if res.decision != "continue":
        return SequentialVerdict(decision="stop: not better", reason=(
            f"at {at} t = {look.statistic:.4g} fell below the futility bound "
            f"{look.futility:.4g}: the policy is not better than matched random by more than "
            f"{pp(min_effect, signed=False)} pp"), **base)
    return SequentialVerdict(decision="continue", reason=(
        f"at {at} t = {look.statistic:.4g} < boundary {look.boundary:.4g}, after "
        f"{len(seeds)} of at most {looks[-1]} seeds: run more seeds"), **base)


def _refuse_repeats(seeds, column: str) -> None:
    repeated = repeated_seeds(seeds)
    if repeated:
        raise InputError(f"seeds {repeated} appear more than once: a seed is one independent "
                         "replication and counts once", column=column,
                         fix="re-run 'evalkit audit RUNS --out DIR' on runs swept under a plan "
                             "whose seeds are distinct")


_FROZEN = "re-run 'evalkit audit RUNS --out DIR' on runs swept under a plan frozen by evalkit"


def _check_spec(spec: dict) -> None:
    """Refuse (InputError naming the field) a recorded sequential design no frozen plan
    gives: another kind, an alpha outside (0, 1), fewer than 1 seed a look or in all, a
    planned claim that is not a (regime, policy) pair."""
    if spec.get("kind", "sequential") != "sequential":
        raise InputError(f"the document's sequential design is of kind {spec['kind']!r}",
                         column="design.sequential.kind", fix=_FROZEN)
    alpha = spec.get("alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"the plan's alpha is {alpha!r}: a level in (0, 1) is needed",
                         column="design.sequential.alpha", fix=_FROZEN)
    for key, least in (("max_seeds", 1), ("batch", 1), ("first_look", 2)):
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"the plan's {key} is {value!r}: a whole number of seeds is "
                             "needed", column=f"design.sequential.{key}", fix=_FROZEN)
        if value is not None and value < least:
            raise InputError(f"the plan's {key} is {value}: a design needs at least "
                             f"{least}", column=f"design.sequential.{key}", fix=_FROZEN)
    for i, pair in enumerate(spec.get("planned_claims") or []):
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(x, str) for x in pair)):
            raise InputError(f"planned claim {pair!r} is not a [regime, policy] pair",
                             column=f"design.sequential.planned_claims[{i}]", fix=_FROZEN)


def sequential_verdicts(doc: dict, protocol, tier: str, min_effect: float | None = None
                        ) -> list[SequentialVerdict]:
    """A verdict for every claim of an audit document (the dictionary audit.json holds).
    ``min_effect``: the null shift (default and lowest allowed: the protocol's)."""
    design_doc = doc.get("design")
    if design_doc is None or any("units" not in c for c in doc["claims"]):
        raise InputError("the audit document records no planned design or per-seed units "
                         "(it was written before the sequential gate read documents)",
                         column="design", fix="re-run 'evalkit audit RUNS --out DIR' and gate "
                         "DIR/audit.json, or gate the runs directory")
    floor = protocol_min_effect(protocol)
    if min_effect is None:
        min_effect = floor
    if float(min_effect) < floor - EFFECT_TOL:
        raise InputError(f"--min-effect {min_effect:g} is below the protocol's smallest effect "
                         f"of interest {floor:g}: a pass needs the gain the fixed gate needs",
                         column="--min-effect", fix=f"drop --min-effect, or give one >= "
                                                     f"{floor:g}")
    spec = design_doc["sequential"]
    if spec is None:
        return [SequentialVerdict(regime=c["regime"], policy=c["policy"], decision="refused",
                                  reason=f"no sequential verdict: {design_doc['why_not']}")
                for c in doc["claims"]]
    _check_spec(spec)
    plan_futility(spec)
    try:
        plan_spending(spec)
    except InputError as err:
        raise InputError(err.message, column=err.column, fix=_FROZEN) from None
    order = [int(s) for s in design_doc["seed_order"]]
    _refuse_repeats(order, "design.seed_order")
    for i, c in enumerate(doc["claims"]):
        _refuse_repeats([u["seed"] for u in c["units"]], f"claims[{i}].units")
    if "planned_claims" not in spec:
        raise InputError("the document's sequential design names no planned claims (the "
                         "family its alpha is shared over)", column="design.sequential."
                         "planned_claims", fix="re-run 'evalkit audit RUNS --out DIR' and gate "
                         "DIR/audit.json, or gate the runs directory")
    planned = {(str(r), str(p)) for r, p in spec["planned_claims"]}
    n_claims = max(1, len(planned | {(c["regime"], c["policy"]) for c in doc["claims"]}))
    return [verdict_for(c, protocol, tier, spec, order, n_claims, min_effect)
            for c in doc["claims"]]
