"""Group-sequential test of the mean gain for a plan with a maximum number of seeds.

The plan looks after each block of seeds (in the plan's seed order).  At look k with
``n_k`` seeds the statistic is ``T_k = (mean(d) - null_shift) / se`` on the first ``n_k``
per-seed differences d (positive = better, as :func:`evalkit.stats.paired.paired_mean_test`).
Type I error is spent over the looks by an alpha-spending function of the information
fraction ``t_k = n_k / N`` (Lan & DeMets 1983):

* ``"obrien-fleming"``: ``alpha(t) = 2 (1 - Phi(z_{1 - alpha/2} / sqrt(t)))`` (one-sided
  alpha), little spent early;
* ``"hwang-shih-decani"``: ``alpha(t) = alpha (1 - exp(-gamma t)) / (1 - exp(-gamma))``
  (Hwang, Shih & DeCani 1990; gamma = -4 resembles O'Brien-Fleming, gamma = 1 Pocock).

Efficacy boundaries ``c_k`` on the z scale solve ``P0(no crossing before k, Z_k >= c_k) =
alpha(t_k) - alpha(t_{k-1})`` under the canonical joint distribution of the Z_k (independent
increments, information ``n_k``), by the recursive numerical integration of Armitage,
McPherson & Rowe (1969) on a grid.  With few seeds per look the z statistic is not normal;
the decision compares ``T_k`` with the **t-type boundary** ``t_{n_k - 1}`` quantile at the
same marginal tail, ``F_t^{-1}(Phi(c_k))`` (the study measures the level this gives).

Futility is non-binding: boundaries are computed without it (ignoring it keeps the level);
stopping "not better" at an interim look (from the second look on, never at the last) when
``T_k`` falls below the futility bound lowers the seeds spent when there is no gain.  Two
rules a plan can name (:data:`FUTILITY`): ``"zero"``, ``T_k < 0`` at every interim look, and
``"rising"``, a bound that climbs with the share of the plan's seeds, ``Z_k < -0.75 + 2.5
t_k`` on the z scale (as a t-type bound at the same marginal tail): lenient at the first
looks, where a real gain still often shows a negative mean, and strict near the end, where a
campaign that has not passed rarely will.  It ends the campaigns that do not pass sooner, so a
plan of equal power needs fewer seeds on average (``tools/SEQUENTIAL_BEST_DESIGN.md`` measures
it against "zero"; its docstring says how the constants were chosen).  A pass needs
``mean(d) > null_shift``; with ``null_shift = min_effect`` a true gain below the smallest
effect of interest passes at most alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_finite_1d, check_alpha, check_shift

__all__ = ["FUTILITY", "SPENDING", "GroupSequentialDesign", "GroupSequentialPlan", "Look",
           "SequentialDecision", "check_spending", "crossing_probabilities", "decide",
           "design", "futility_words", "plan_seeds", "spending_words", "spent_alpha"]

SPENDING = ("obrien-fleming", "hwang-shih-decani")
FUTILITY = ("zero", "rising")
RISING_FUTILITY = (-0.75, 1.75)    # z bound of the "rising" rule at no seeds and at the last
_GRID_STEP = 0.02              # z-grid spacing of the recursive integration
_GRID_HALF_WIDTH = 9.0         # the grid spans drift +- this many SDs


def _phi_upper(x):
    return 0.5 * special.erfc(np.asarray(x, dtype=float) / math.sqrt(2.0))


def spent_alpha(t, alpha: float, spending: str = "obrien-fleming",
                gamma: float = -4.0) -> np.ndarray:
    """Cumulative one-sided alpha spent at information fractions t (in [0, 1])."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if spending == "obrien-fleming":
        z = sps.norm.isf(alpha / 2.0)
        with np.errstate(divide="ignore"):
            return np.where(t > 0, 2.0 * _phi_upper(z / np.sqrt(np.maximum(t, 1e-300))), 0.0)
    if spending == "hwang-shih-decani":
        if abs(gamma) < 1e-12:
            return alpha * t
        if gamma > 0:
            return alpha * np.expm1(-gamma * t) / math.expm1(-gamma)
        # (e^{gt} - 1) / (e^g - 1) for g = -gamma, as e^{g(t-1)} (1 - e^{-gt}) / (1 - e^{-g}):
        # no overflow however steep the plan's gamma
        g = -gamma
        return alpha * np.exp(g * (t - 1.0)) * np.expm1(-g * t) / math.expm1(-g)
    raise InputError(f"unknown spending function {spending!r}", column="spending",
                     fix=f"use one of {', '.join(SPENDING)}")


def check_spending(spending, gamma=None, prefix: str = "") -> tuple[str, float]:
    """A plan's spending function as ``(name, gamma)``: "obrien-fleming" takes no gamma
    (-4.0 is returned, unused); "hwang-shih-decani" needs a finite gamma (no default: -4
    resembles O'Brien-Fleming, 1 Pocock).  Errors name ``prefix + "spending"`` or
    ``prefix + "gamma"``."""
    if spending not in SPENDING:
        raise InputError(f"unknown spending function {spending!r}", column=prefix + "spending",
                         fix=f"use one of {', '.join(SPENDING)}")
    if spending == "obrien-fleming":
        if gamma is not None:
            raise InputError(f"gamma {gamma!r} is a Hwang-Shih-DeCani parameter: "
                             "O'Brien-Fleming spending takes none", column=prefix + "gamma",
                             fix='remove gamma, or write spending = "hwang-shih-decani"')
        return spending, -4.0
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(
            float(gamma)):
        raise InputError(f"Hwang-Shih-DeCani spending needs a finite gamma, got {gamma!r}",
                         column=prefix + "gamma", fix="e.g. gamma = -2 (between O'Brien-Fleming, -4, "
                                             "and Pocock, 1)")
    return spending, float(gamma)


def spending_words(spending: str, gamma: float) -> str:
    """The spending function in words, as verdicts and plans print it."""
    if spending == "obrien-fleming":
        return "O'Brien-Fleming spending"
    return f"Hwang-Shih-DeCani spending, gamma {gamma:g}"


def _grid(center: float, upper: float) -> np.ndarray:
    lo = center - _GRID_HALF_WIDTH
    hi = max(min(upper, center + _GRID_HALF_WIDTH), lo + _GRID_STEP)
    count = max(2, int(math.ceil((hi - lo) / _GRID_STEP)) + 1)
    return np.linspace(lo, hi, count)


def _trapezoid_weights(z: np.ndarray) -> np.ndarray:
    w = np.full(z.size, z[1] - z[0])
    w[0] *= 0.5
    w[-1] *= 0.5
    return w


class _Recursion:
    """Sub-density of Z_k on the continuation region, look by look (drift theta per seed)."""

    def __init__(self, info: np.ndarray, theta: float):
        self.info = info
        self.theta = theta
        self.z = None           # grid of the previous look's continuation region
        self.f = None           # sub-density there

    def _step_args(self, k: int):
        i_prev, i_k = self.info[k - 1], self.info[k]
        delta = i_k - i_prev
        return i_prev, i_k, delta

    def cross_above(self, k: int, c: float) -> float:
        """P(continue to look k, Z_k >= c)."""
        if k == 0:
            return float(_phi_upper(c - self.theta * math.sqrt(self.info[0])))
        i_prev, i_k, delta = self._step_args(k)
        x = (c * math.sqrt(i_k) - self.z * math.sqrt(i_prev) - self.theta * delta) / math.sqrt(delta)
        return float(np.sum(self.f * _trapezoid_weights(self.z) * _phi_upper(x)))

    def cross_below(self, k: int, c: float) -> float:
        """P(continue to look k, Z_k < c)."""
        if k == 0:
            return float(1.0 - _phi_upper(c - self.theta * math.sqrt(self.info[0])))
        i_prev, i_k, delta = self._step_args(k)
        x = (c * math.sqrt(i_k) - self.z * math.sqrt(i_prev) - self.theta * delta) / math.sqrt(delta)
        return float(np.sum(self.f * _trapezoid_weights(self.z) * (1.0 - _phi_upper(x))))

    def advance(self, k: int, lower: float, upper: float) -> None:
        """Restrict Z_k to [lower, upper) and make it the previous look."""
        center = self.theta * math.sqrt(self.info[k])
        z = _grid(center, upper)
        z = z[z >= lower] if np.isfinite(lower) else z
        if z.size < 2:
            z = np.array([lower, lower + _GRID_STEP])
        if k == 0:
            f = sps.norm.pdf(z - center)
        else:
            i_prev, i_k, delta = self._step_args(k)
            sd = math.sqrt(delta)
            u = (z[:, None] * math.sqrt(i_k) - self.z[None, :] * math.sqrt(i_prev)
                 - self.theta * delta) / sd
            kernel = np.exp(-0.5 * u * u) * (math.sqrt(i_k) / (sd * math.sqrt(2.0 * math.pi)))
            f = kernel @ (self.f * _trapezoid_weights(self.z))
        self.z, self.f = z, f


@dataclass(frozen=True)
class GroupSequentialDesign(ResultMixin):
    """Looks (cumulative seeds), z and t boundaries, the alpha spent and the futility bound.

    ``z_bounds[k]``: efficacy boundary of Z_k (normal theory); ``t_bounds[k]``: the boundary
    the decision uses for the t statistic with ``looks[k] - 1`` degrees of freedom (same
    marginal tail).  ``futility``: the rule as given (a constant bound on T_k, "rising", or
    None: no futility stop); ``futility_t[k]`` / ``futility_z[k]``: its bound on T_k / Z_k at
    look k (None at the first and the last look and without a rule): stop "not better" below
    it (non-binding).
    """

    looks: tuple
    alpha: float
    spending: str
    gamma: float
    z_bounds: tuple
    t_bounds: tuple
    alpha_spent: tuple
    futility: float | str | None
    futility_t: tuple
    futility_z: tuple

    @property
    def max_seeds(self) -> int:
        return int(self.looks[-1])


def _check_looks(looks) -> np.ndarray:
    arr = np.asarray(looks, dtype=float).reshape(-1)
    if arr.size < 1 or np.any(arr != np.round(arr)) or np.any(np.diff(arr) <= 0) or arr[0] < 2:
        raise InputError(f"looks must be increasing whole numbers of seeds >= 2, got "
                         f"{list(looks)}", column="looks",
                         fix="e.g. looks=(5, 10, 15, 20): a look after each block of 5 seeds")
    return arr.astype(int)


def _futility_rule(futility):
    """A futility rule as :func:`design` keeps it: None, a finite constant, or "rising"."""
    if futility is None or futility == "rising":
        return futility
    if futility == "zero":
        return 0.0
    if isinstance(futility, bool) or not isinstance(futility, (int, float)) or not math.isfinite(
            float(futility)):
        raise InputError(f"unknown futility rule {futility!r}", column="futility",
                         fix=f"use one of {', '.join(FUTILITY)}, a number (a constant bound "
                             "on t) or None (no futility stop)")
    return float(futility)


def _futility_bounds(n: np.ndarray, rule) -> tuple[tuple, tuple]:
    """Per look, the futility bound on T_k and on Z_k (None where the rule stops nothing)."""
    t_out, z_out = [], []
    for k, nk in enumerate(n):
        if rule is None or k == 0 or k == n.size - 1:
            t_out.append(None)
            z_out.append(None)
        elif rule == "rising":
            low, high = RISING_FUTILITY
            z = low + (high - low) * float(nk) / float(n[-1])
            z_out.append(z)
            t_out.append(float(sps.t.isf(_phi_upper(z), df=int(nk) - 1)))
        else:
            t_out.append(rule)
            z_out.append(rule)
    return tuple(t_out), tuple(z_out)


def futility_words(futility) -> str:
    """A design's futility rule in words, as plans print it."""
    rule = _futility_rule(futility)
    if rule is None:
        return "no futility stop"
    if rule == "rising":
        low, high = RISING_FUTILITY
        return (f"non-binding futility rising with the share t of the plan's seeds (z < "
                f"{low:g} + {high - low:g} t, as a t bound)")
    return f"non-binding futility at t < {rule:g}"


def design(looks, alpha: float = 0.025, spending: str = "obrien-fleming",
           gamma: float = -4.0, futility: float | str | None = 0.0) -> GroupSequentialDesign:
    """Efficacy boundaries of a one-sided group-sequential test at the given looks.

    looks: cumulative seeds at each look, e.g. ``(5, 10, 15, 20)``; alpha: one-sided level
    (0.025 = the better side of a two-sided 0.05 test); futility: "zero" (= 0.0, stop below
    t = 0), "rising", a constant bound on T, or None (module docstring).
    """
    alpha = check_alpha(alpha, fix="use e.g. 0.025 (one-sided)")
    n = _check_looks(looks)
    rule = _futility_rule(futility)
    info = n.astype(float)
    cum = spent_alpha(info / info[-1], alpha, spending, gamma)
    rec = _Recursion(info, 0.0)
    bounds = []
    for k in range(n.size):
        target = float(cum[k] - (cum[k - 1] if k else 0.0))
        if target <= 1e-15:
            c = math.inf
        else:
            c = optimize.brentq(lambda x: rec.cross_above(k, x) - target, -10.0, 40.0,
                                xtol=1e-10)
        bounds.append(float(c))
        if k + 1 < n.size:
            rec.advance(k, -math.inf, c)
    t_bounds = tuple(float(sps.t.isf(_phi_upper(c), df=int(nk) - 1)) if math.isfinite(c)
                     else math.inf for c, nk in zip(bounds, n))
    futility_t, futility_z = _futility_bounds(n, rule)
    return GroupSequentialDesign(looks=tuple(int(x) for x in n), alpha=alpha, spending=spending,
                                 gamma=float(gamma), z_bounds=tuple(bounds), t_bounds=t_bounds,
                                 alpha_spent=tuple(float(x) for x in cum), futility=rule,
                                 futility_t=futility_t, futility_z=futility_z)


def crossing_probabilities(gs: GroupSequentialDesign, theta: float,
                           with_futility: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Normal theory, drift ``theta`` = mean gain / SD of d per seed: (P pass at look k,
    P futility stop at look k), each (K,)."""
    info = np.asarray(gs.looks, dtype=float)
    rec = _Recursion(info, float(theta))
    passes, stops = [], []
    for k, c in enumerate(gs.z_bounds):
        fut = (gs.futility_z[k] if with_futility and gs.futility_z[k] is not None
               else -math.inf)
        passes.append(rec.cross_above(k, c))
        stops.append(rec.cross_below(k, fut) if math.isfinite(fut) else 0.0)
        if k + 1 < len(info):
            rec.advance(k, fut, c)
    return np.array(passes), np.array(stops)


@dataclass(frozen=True)
class GroupSequentialPlan(ResultMixin):
    """What :func:`plan_seeds` found: the design, its power and seeds to a decision."""

    design: GroupSequentialDesign
    effect_sd: float
    power: float
    expected_seeds_effect: float
    expected_seeds_null: float
    fixed_seeds: int

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["design"] = self.design.to_dict()
        return out


def _expected_seeds(gs: GroupSequentialDesign, theta: float) -> tuple[float, float]:
    p, s = crossing_probabilities(gs, theta)
    looks = np.asarray(gs.looks, dtype=float)
    stopped = p + s
    stopped[-1] = 1.0 - stopped[:-1].sum()
    return float(p.sum()), float(np.sum(stopped * looks))


def plan_seeds(effect_sd: float, alpha: float = 0.025, power: float = 0.8, block: int = 5,
               spending: str = "obrien-fleming", gamma: float = -4.0,
               futility: float | None = 0.0, max_seeds_limit: int = 400) -> GroupSequentialPlan:
    """Smallest maximum number of seeds (a multiple of ``block``, found by bisection: power
    grows with the maximum) whose design reaches
    ``power`` at a mean gain of ``effect_sd`` SDs of d, with the expected seeds to a decision
    under that gain and under none, beside the fixed-n seeds of a one-sided z-test (normal
    theory; small-n t boundaries cost a little more: the study measures it)."""
    alpha = check_alpha(alpha, fix="use e.g. 0.025 (one-sided)")
    if not 0.0 < float(power) < 1.0:
        raise InputError(f"power must lie in (0, 1), got {power}", column="power",
                         fix="use e.g. 0.8")
    if not (math.isfinite(float(effect_sd)) and float(effect_sd) > 0):
        raise InputError(f"effect_sd must be a positive number, got {effect_sd}",
                         column="effect_sd", fix="the mean gain divided by the SD of d")
    if int(block) < 2 or int(block) != block:
        raise InputError(f"block must be a whole number of seeds >= 2, got {block}",
                         column="block", fix="e.g. block=5")
    block = int(block)
    theta = float(effect_sd)
    fixed = int(math.ceil(((sps.norm.isf(alpha) + sps.norm.isf(1.0 - power)) / theta) ** 2))
    def build(n_max):
        return design(tuple(range(block, n_max + 1, block)), alpha, spending, gamma, futility)

    def reaches(n_max):
        return _expected_seeds(build(n_max), theta)[0] >= power

    limit = int(max_seeds_limit) // block
    # power grows with the maximum seeds: double the blocks until reached, then bisect
    lo, hi = 0, 1                                 # not reached at lo blocks, reached at hi
    while not (hi <= limit and reaches(hi * block)):
        if hi >= limit:
            top = tuple(range(block, limit * block + 1, block))
            capped = futility is not None and limit >= 1 and _expected_seeds(
                design(top, alpha, spending, gamma, None), theta)[0] >= power
            raise InputError(f"no design with at most {max_seeds_limit} seeds reaches power "
                             f"{power} at {effect_sd} SD" + (
                                 f": without the futility stop at each of its {len(top)} "
                                 f"looks it would, so the stop caps its power"
                                 if capped else ""), column="effect_sd",
                             fix=("a larger block (fewer looks), or no futility stop"
                                  if capped else "a larger effect, a lower power target or a "
                                  "higher max_seeds_limit"))
        lo, hi = hi, min(2 * hi, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reaches(mid * block):
            hi = mid
        else:
            lo = mid
    gs = build(hi * block)
    got, seeds_effect = _expected_seeds(gs, theta)
    _, seeds_null = _expected_seeds(gs, 0.0)
    return GroupSequentialPlan(design=gs, effect_sd=theta, power=got,
                               expected_seeds_effect=seeds_effect,
                               expected_seeds_null=seeds_null, fixed_seeds=fixed)


@dataclass(frozen=True)
class Look(ResultMixin):
    seeds: int
    mean: float
    statistic: float
    boundary: float
    futility: float | None
    decision: str
    variance_floor: float | None = None   # the floor given for this look (None: none)
    floor_binds: bool = False             # it exceeded d's sample variance and was used


@dataclass(frozen=True)
class SequentialDecision(ResultMixin):
    """Per look (up to the one that decided): seeds used, the t statistic, its boundary and
    the decision "pass" | "stop: not better" | "continue"; ``decision`` is the last one
    ("continue" while the plan's seeds are not all in)."""

    looks: tuple
    decision: str
    seeds_used: int
    null_shift: float

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["looks"] = [look.to_dict() for look in self.looks]
        return out


def decide(d, gs: GroupSequentialDesign, null_shift: float = 0.0,
           variance_floor=None) -> SequentialDecision:
    """Walk the looks on d (per-seed differences in the plan's seed order, positive =
    better); seeds past the plan's maximum are an error, fewer mean the decision may still be
    "continue".  ``variance_floor``: per look, a floor under the sample variance of d at that
    look (NaN: none): the sequential gate passes the draws' floor of
    :mod:`evalkit.stats.floored` in its "lognormal" law
    (:func:`evalkit.stats.power.look_floors_batch`)."""
    d = as_finite_1d(d, "d", min_size=1, what="per-seed differences (seeds)")
    floors = (np.full(len(gs.looks), np.nan) if variance_floor is None
              else np.asarray(variance_floor, dtype=float))
    if floors.shape != (len(gs.looks),):
        raise InputError(f"variance_floor has {floors.size} values for {len(gs.looks)} looks",
                         column="variance_floor", fix="pass one floor (or NaN) per look")
    shift = check_shift(null_shift)
    if d.size > gs.max_seeds:
        raise InputError(f"{d.size} seeds but the plan stops at {gs.max_seeds}",
                         column="seed", fix="the seeds past the plan's maximum are not "
                         "part of the design; decide on the planned ones")
    out = []
    last = len(gs.looks) - 1
    for k, (nk, bound) in enumerate(zip(gs.looks, gs.t_bounds)):
        if d.size < nk:
            break
        x = d[:nk] - shift
        var = float(np.var(x, ddof=1))
        floored = bool(np.isfinite(floors[k])) and floors[k] > var
        sd = math.sqrt(floors[k]) if floored else math.sqrt(var)
        mean = float(x.mean())
        stat = (math.copysign(math.inf, mean) if mean else 0.0) if sd == 0 else \
            mean / (sd / math.sqrt(nk))
        fut = gs.futility_t[k]
        if stat >= bound:
            decision = "pass"
        elif k == last or (fut is not None and stat < fut):
            decision = "stop: not better"
        else:
            decision = "continue"
        out.append(Look(seeds=int(nk), mean=mean + shift, statistic=float(stat),
                        boundary=float(bound), futility=fut, decision=decision,
                        variance_floor=float(floors[k]) if np.isfinite(floors[k]) else None,
                        floor_binds=floored))
        if decision != "continue":
            break
    final = out[-1].decision if out else "continue"
    return SequentialDecision(looks=tuple(out), decision=final,
                              seeds_used=out[-1].seeds if out else 0, null_shift=shift)
