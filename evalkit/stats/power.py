"""Power planning by simulation: how many seeds, with how many draws each, a claim needs.

**The model** (:func:`pilot_model`) is fitted to a pilot's runs on the log scale, where V's
skew and tails live: a seed's draws are ``V = exp(mu + a_s + e)``, the seed level
``a_s ~ N(0, tau^2)`` shared by the seed's runs, the within-seed noise ``e ~ N(0,
sigma_w^2)``; the policy run of a seed is ``exp(mu + a_s + sigma_w^2 / 2 - sigma_p^2 / 2 +
e_p)``, ``e_p ~ N(0, sigma_p^2)`` (the same mean as a draw of its seed before the effect).
The components come from the pilot's variance decomposition: ``sigma_w^2`` pooled over the
seeds' draws, ``tau^2`` the variance of the seeds' mean log draw less ``sigma_w^2 / k``, and
``sigma_p^2`` the variance of (log policy run - the seed's mean log draw) less
``sigma_w^2 / k`` -- the pilot's own policy runs give the policy's spread (a fixed-schedule
policy varies less than a draw).  A pilot with one draw per seed cannot tell the draw's noise
from the policy's: it is read as ``sigma_p = sigma_w``.  ``policy_sd_ratio`` overrides
``sigma_p`` as a multiple of ``sigma_w``.  A V of 0 has no logarithm: it is read as half the
pilot's smallest positive V (counted in the model's ``zeros_floored``).

The within-seed noise is by default (``kind="smoothed"``) a smoothed bootstrap of the pilot's
log residuals -- each draw's log V less its seed's shrunken level (the level's best linear
predictor: centring on the seed's own mean of k draws would pull a burst's residual down by
1/k), pooled, rescaled to ``sigma_w``, resampled with a Gaussian kernel that keeps their
variance -- and the policy's noise the same pool scaled by ``sigma_p / sigma_w``;
``kind="lognormal"`` draws both Gaussian.  Against the simulated truth
(``tools/POWER_VALIDATION.md``) the two agree on lognormal V and the smoothed bootstrap errs
less on bursty V.  Why not the pilot's runs resampled as they are (the previous planner): a
10-seed pilot with 3 draws a seed holds 30 centred draws; resampling them gives ties and no
tail beyond the largest, and the pilot's policy runs were not used for the policy's spread.

**The effect** is multiplicative by default: the policy's V is the draw's times
``1 - gain / E[V of a draw]`` (``relative=True``: times ``1 - gain``); ``effect="additive"``
subtracts ``gain`` (a share of V) from every policy run, as the planner did before.

**The tests** are the gate's: the fixed-n test is the draw-floored t-test on the per-seed
differences ``d_s = mean(draws_s) - policy_s`` (:func:`fixed_gate_passes`, the batch form of
:func:`evalkit.stats.floored.floored_mean_test`, with the gate's rule that a sign flip on d
could reach alpha); the sequential design is the group-sequential test
(:mod:`evalkit.stats.group_sequential`) on the same ``d_s`` in order.

**The interval** of each predicted power comes from the pilot's size: the model's variance
components are drawn again from their sampling distributions given the pilot (a sample
variance ``v`` of ``f`` degrees of freedom as ``f v / chi2_f``; the policy's and the seed
level's from the pilot's n seeds, the within-seed one from its pooled draws), the smoothed
bootstrap's residual pool resampled with replacement (its shape -- how many bursts the pilot
happened to show -- is as uncertain as its scale), and the power simulated again (``refits``
times, half the campaigns each); the ``interval`` central share of those powers is reported.
(Seeds resampled with replacement, alone, gave intervals too narrow to cover the truth at 10
pilot seeds.)  The same refits say how large a pilot would pin a power down: their variance,
less its Monte Carlo part, is the pilot's, and it shrinks as one over the pilot's seeds
(:func:`pilot_seeds_for`; a first-order reading that ignores the model's bias on bursty V).

**The tail check** (:func:`tail_check`) says when that bias is likely: bursts skew the pooled
log residuals right, and the pilot's skewness is compared with pilots of the same seeds and
draws simulated from its fitted lognormal components (a Monte Carlo p).  Against the
simulated truth (``tools/POWER_VALIDATION.md``, "The tail check") the bursty pilots it flags
are those that caught their bursts, whose intervals came near their level; those it cannot
flag caught few and predict highest, so the check can show a heavy tail, never its absence.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import DEFAULT_RTOL, ResultMixin, as_generator, check_alternative
from evalkit.stats.floored import floored_t_batch, floored_variance_batch
from evalkit.stats.group_sequential import (FUTILITY, GroupSequentialDesign, check_spending,
                                             design, futility_words, spending_words)

__all__ = ["DECISIONS", "EFFECTS", "EXACT_SIGN_VECTORS", "FUTILITY_STOP", "MODEL_KINDS",
           "NOT_BETTER_AT_END", "PASS", "PilotModel", "PowerPlan", "PowerRow",
           "TAIL_ALPHA", "TAIL_SIMULATIONS", "TOLERANCE_COVERAGE", "TailCheck",
           "fixed_gate_passes", "group_sequential_batch",
           "look_floors_batch", "pilot_model", "pilot_seeds_for", "power_plan",
           "sequential_looks", "sign_flip_p_batch", "tail_check"]

EFFECTS = ("multiplicative", "additive")


@dataclass(frozen=True)
class PilotModel(ResultMixin):
    """Lognormal variance components of a pilot (log scale) and the runs they came from."""

    mu: float                        # mean log V of a draw
    tau: float                       # between-seed sd of the log level
    sigma_within: float              # within-seed sd of a draw's log V
    sigma_policy: float              # the policy run's own sd of log V around its seed level
    policy_spread: str               # where sigma_policy came from
    mean_draw: float                 # E[V of a draw] under the model
    sd_within: float                 # pooled within-seed sd of a draw's V (V units)
    zeros_floored: int               # V = 0 runs read as half the smallest positive V
    n_pilot_seeds: int
    source: str
    policy_sd_ratio: float | None = None     # the override, kept for refits
    kind: str = "lognormal"          # within-seed noise: "lognormal" or "smoothed" bootstrap
    residuals: tuple = ()            # pooled log residuals of the draws (smoothed bootstrap),
                                     # scaled to sd sigma_within
    dof_within: int = 0              # the pilot's sufficient statistics, for the interval:
    var_policy_resid: float = 0.0    # var(log policy - seed's mean log draw), n - 1 dof
    var_level: float = 0.0           # var(seed's mean log draw), n - 1 dof
    inv_k: float = 1.0               # mean 1 / draws per seed
    policy: tuple = ()               # the pilot: policy V per seed ...
    draws: tuple = ()                # ... and its draws (tuples), for refits
    _dict_exclude = ("policy", "draws", "residuals")

    def sample(self, rng: np.random.Generator, reps: int, n: int, m: int, gain: float, *,
               relative: bool = False,
               effect: str = "multiplicative") -> tuple[np.ndarray, np.ndarray]:
        """Policy V (reps, n) and draws (reps, n, m) of simulated campaigns."""
        level = self.mu + rng.normal(0.0, self.tau, size=(reps, n))
        ratio = self.sigma_policy / self.sigma_within if self.sigma_within > 0 else 0.0
        if self.kind == "lognormal":
            draws = np.exp(level[..., None] + self._noise(rng, (reps, n, m), 1.0))
            policy = np.exp(level + 0.5 * (self.sigma_within ** 2 - self.sigma_policy ** 2)
                            + rng.normal(0.0, self.sigma_policy, size=(reps, n)))
        else:
            draws = np.exp(level[..., None] + self._noise(rng, (reps, n, m), 1.0))
            policy = (np.exp(level + self._noise(rng, (reps, n), ratio))
                      * self._mean_factor(1.0) / self._mean_factor(ratio))
        if effect == "multiplicative":
            policy = policy * (1.0 - (gain if relative else gain / self.mean_draw))
        else:
            policy = policy - (gain * self.mean_draw if relative else gain)
        return policy, draws

    def _noise(self, rng, size, scale: float) -> np.ndarray:
        """Within-seed log noise times ``scale``: Gaussian, or the pooled residuals resampled
        with a Gaussian kernel, shrunk to keep their variance (smoothed bootstrap)."""
        if self.kind == "lognormal":
            return rng.normal(0.0, scale * self.sigma_within, size=size)
        pool = np.asarray(self.residuals)
        h, shrink = self._kernel()
        return scale * shrink * (pool[rng.integers(0, pool.size, size=size)]
                                 + rng.normal(0.0, h, size=size))

    def _kernel(self) -> tuple[float, float]:
        pool = np.asarray(self.residuals)
        sd = float(pool.std())
        h = 0.9 * sd * pool.size ** -0.2 if sd > 0 else 0.0
        return h, (1.0 / math.sqrt(1.0 + (h / sd) ** 2) if sd > 0 else 1.0)

    def _mean_factor(self, scale: float) -> float:
        """E[exp(scale x noise)] of the smoothed bootstrap's noise."""
        pool = np.asarray(self.residuals)
        h, shrink = self._kernel()
        c = scale * shrink
        return float(np.mean(np.exp(c * pool))) * math.exp(0.5 * (c * h) ** 2)


MODEL_KINDS = ("lognormal", "smoothed")


def pilot_model(policy, draws, source: str = "pilot", *,
                policy_sd_ratio: float | None = None, kind: str = "smoothed") -> PilotModel:
    """A :class:`PilotModel` from a pilot's policy V (n,) and draws (n lists of V)."""
    pol = np.asarray(policy, dtype=float).reshape(-1)
    if pol.size != len(draws) or pol.size < 2:
        raise InputError(f"a pilot needs >= 2 seeds with a policy run and draws, got "
                         f"{pol.size} policy values and {len(draws)} draw lists",
                         column="seed", fix="run a pilot of >= 2 seeds (>= 3 better)")
    runs = [np.asarray(d, dtype=float).reshape(-1) for d in draws]
    for d in runs:
        if d.size == 0 or not np.all(np.isfinite(d)):
            raise InputError("every pilot seed needs finite draws", column="violation_rate",
                             fix="rerun or drop the seed's failed draws")
    every = np.concatenate([pol, *runs])
    if not np.all(np.isfinite(pol)) or np.any(every < 0):
        raise InputError("pilot V must be finite and >= 0", column="violation_rate",
                         fix="rerun or drop the seed's failed policy run")
    if not np.any(every > 0):
        raise InputError("every pilot run has V = 0: the pilot shows no violations to model",
                         column="violation_rate",
                         fix="pilot at a load or SLO where violations occur")
    if policy_sd_ratio is not None and not (math.isfinite(policy_sd_ratio)
                                            and policy_sd_ratio >= 0):
        raise InputError(f"policy_sd_ratio must be a finite number >= 0, got {policy_sd_ratio}",
                         column="policy_sd_ratio", fix="e.g. 1 (as variable as a draw) or 0.5")
    if kind not in MODEL_KINDS:
        raise InputError(f"unknown model kind {kind!r}", column="kind",
                         fix="'lognormal' or 'smoothed' (bootstrap of the log residuals)")
    floor = 0.5 * float(every[every > 0].min())
    logs = [np.log(np.maximum(d, floor)) for d in runs]
    k = np.array([d.size for d in runs], dtype=float)
    zbar = np.array([z.mean() for z in logs])
    dof = int(np.sum(k - 1))
    inv_k = float(np.mean(1.0 / k))
    resid = np.log(np.maximum(pol, floor)) - zbar
    var_r = float(np.var(resid, ddof=1))
    var_level = float(np.var(zbar, ddof=1))
    if dof > 0:
        sw2 = _pooled_within_variance(logs)
        sp2 = max(0.0, var_r - sw2 * inv_k)
        spread = "from the pilot's policy runs"
        raw = [d - d.mean() for d in runs if d.size >= 2]
        sd_raw = math.sqrt(sum(float(c @ c) for c in raw) / dof)
    else:
        sw2 = var_r / (1.0 + inv_k)
        sp2 = sw2
        spread = "taken as a draw's (one draw per pilot seed cannot tell them apart)"
        diff = np.array([d.mean() for d in runs]) - pol
        sd_raw = math.sqrt(float(np.var(diff, ddof=1)) / (1.0 + inv_k))
    if policy_sd_ratio is not None:
        sp2 = (float(policy_sd_ratio) ** 2) * sw2
        spread = f"given as x{policy_sd_ratio:g} a draw's"
    tau2 = _level_variance(var_level, sw2, inv_k)
    mu = float(zbar.mean())
    pool = _residual_pool(logs, mu, tau2, sw2, inv_k)
    model = PilotModel(mu=mu, tau=math.sqrt(tau2), sigma_within=math.sqrt(sw2),
                       sigma_policy=math.sqrt(sp2), policy_spread=spread, mean_draw=math.nan,
                       sd_within=sd_raw, zeros_floored=int(np.sum(every <= 0)),
                       n_pilot_seeds=int(pol.size), source=source,
                       policy_sd_ratio=policy_sd_ratio, kind=kind,
                       residuals=tuple(float(x) for x in pool), dof_within=dof,
                       var_policy_resid=var_r, var_level=var_level, inv_k=inv_k,
                       policy=tuple(float(x) for x in pol),
                       draws=tuple(tuple(float(x) for x in d) for d in runs))
    noise_mean = (math.exp(0.5 * sw2) if kind == "lognormal" else model._mean_factor(1.0))
    return dataclasses.replace(model, mean_draw=math.exp(mu + 0.5 * tau2) * noise_mean)


def _pooled_within_variance(logs) -> float:
    """The draws' log variance within seeds, pooled over the seeds' sum(k - 1) (> 0) degrees
    of freedom."""
    return (sum(float(np.sum((z - z.mean()) ** 2)) for z in logs)
            / sum(z.size - 1 for z in logs))


def _level_variance(var_level: float, sw2: float, inv_k: float) -> float:
    """The seed level's variance: the variance of the seeds' mean log draw less its
    within-seed part, at least 0."""
    return max(0.0, var_level - sw2 * inv_k)


def _residual_pool(logs, mu: float, tau2: float, sw2: float, inv_k: float) -> np.ndarray:
    """The draws' log residuals around each seed's shrunken level (its best linear predictor:
    centring on the seed's own mean of k draws would pull a burst's residual down by 1/k),
    pooled, centred and scaled to sd ``sqrt(sw2)``."""
    shrink = tau2 / (tau2 + sw2 * inv_k) if tau2 > 0 else 0.0
    pool = np.concatenate([z - (mu + shrink * (z.mean() - mu)) for z in logs])
    pool = pool - pool.mean()
    if pool.std() > 0:
        pool = pool * math.sqrt(sw2) / pool.std()
    return pool


def _skewness(x: np.ndarray) -> float:
    """The moment skewness m3 / m2^1.5 (0 for a sample without spread)."""
    c = np.asarray(x, dtype=float) - np.mean(x)
    m2 = float(np.mean(c * c))
    return float(np.mean(c ** 3)) / m2 ** 1.5 if m2 > 0 else 0.0


TAIL_SIMULATIONS = 400
TAIL_ALPHA = 0.05


@dataclass(frozen=True)
class TailCheck(ResultMixin):
    """Is the pilot's within-seed noise heavier-tailed to the right than the lognormal the
    model's variance components describe?  The skewness of the pooled log residuals (as
    :func:`pilot_model` pools them) against its distribution in pilots of the same seeds and
    draws simulated from the fitted lognormal components."""

    skewness: float          # of the pilot's pooled log residuals
    p_value: float           # (1 + simulated pilots with this skewness or more) / (1 + sims)
    simulations: int
    alpha: float
    heavy_right_tail: bool   # p_value <= alpha


def tail_check(model: PilotModel, *, simulations: int = TAIL_SIMULATIONS,
               alpha: float = TAIL_ALPHA, rng=None) -> TailCheck | None:
    """The pilot's right-tail check (:class:`TailCheck`); None when no pilot seed has two
    draws (no within-seed residuals).  Bursts -- a few runs several times the rest -- skew the
    log residuals right; a lognormal pilot's are symmetric up to the pooling, which the
    simulation reproduces.  A pilot that happened to catch no burst passes: the check can
    show a heavy tail, never its absence."""
    if int(simulations) < 1:
        raise InputError(f"simulations must be >= 1, got {simulations}", column="simulations",
                         fix="e.g. 400")
    if not 0.0 < float(alpha) < 1.0:
        raise InputError(f"alpha must lie in (0, 1), got {alpha}", column="alpha",
                         fix="e.g. 0.05")
    if model.dof_within <= 0 or not model.draws:
        return None
    observed = _skewness(np.asarray(model.residuals, dtype=float))
    gen = as_generator(rng)
    ks = [len(d) for d in model.draws]
    exceed = 0
    for _ in range(int(simulations)):
        level = model.mu + gen.normal(0.0, model.tau, size=len(ks))
        sim = [lv + gen.normal(0.0, model.sigma_within, size=k) for lv, k in zip(level, ks)]
        zbar = np.array([z.mean() for z in sim])
        sw2 = _pooled_within_variance(sim)
        tau2 = _level_variance(float(np.var(zbar, ddof=1)), sw2, model.inv_k)
        exceed += _skewness(_residual_pool(sim, float(zbar.mean()), tau2, sw2,
                                           model.inv_k)) >= observed
    p = (1 + exceed) / (1 + int(simulations))
    return TailCheck(skewness=observed, p_value=p, simulations=int(simulations),
                     alpha=float(alpha), heavy_right_tail=p <= alpha)


EXACT_SIGN_VECTORS = 1 << 10     # enumerate every sign vector up to here, Monte Carlo beyond
_CHUNK_ELEMENTS = 1 << 22        # bound on (R, L) temporaries


def sign_flip_p_batch(d: np.ndarray, n_resamples: int, rng: np.random.Generator,
                      alternative: str = "greater") -> np.ndarray:
    """The studentized sign-flip p of many campaigns at once; d: (R, n) per-seed differences.

    With the squares of d fixed under every sign vector, ``t = mean / se`` is an increasing
    function of the sum (``|sum| <= sqrt(n sum d^2)``), so counting sign vectors whose sum
    reaches the observed one counts those whose t does: the p-value is the studentized
    test's.  Up to :data:`EXACT_SIGN_VECTORS` every sign vector (p = k / 2^n, the identity
    included); beyond, the same ``n_resamples`` random sign vectors serve every campaign,
    p = (k + 1) / (B + 1).  Two-sided: 2 min(one-sided), capped at 1.
    """
    reps, n = d.shape
    exact = 2.0 ** n <= EXACT_SIGN_VECTORS
    if exact:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    else:
        signs = rng.choice(np.array([1.0, -1.0]), size=(int(n_resamples), n))
    obs = d.sum(axis=1)
    tol = (DEFAULT_RTOL * np.maximum(1e-300, np.abs(d).sum(axis=1)))[:, None]
    ge = np.zeros(reps)
    le = np.zeros(reps)
    step = max(1, _CHUNK_ELEMENTS // max(1, reps))
    for lo in range(0, signs.shape[0], step):
        stat = d @ signs[lo:lo + step].T                           # (R, b)
        ge += (stat >= obs[:, None] - tol).sum(axis=1)
        le += (stat <= obs[:, None] + tol).sum(axis=1)
    if exact:
        pg, pl = ge / signs.shape[0], le / signs.shape[0]
    else:
        pg, pl = (ge + 1) / (n_resamples + 1), (le + 1) / (n_resamples + 1)
    return {"greater": pg, "less": pl,
            "two-sided": np.minimum(1.0, 2 * np.minimum(pg, pl))}[alternative]


PASS, FUTILITY_STOP, NOT_BETTER_AT_END = 1, -1, 0
DECISIONS = {PASS: "pass", FUTILITY_STOP: "stop: not better (futility)",
             NOT_BETTER_AT_END: "stop: not better (last look)"}


def look_floors_batch(policy: np.ndarray, draws: np.ndarray, looks) -> np.ndarray:
    """(R, K) the sequential gate's variance floor of d at each look (policy_law "lognormal"
    of :func:`evalkit.stats.floored.floored_variance_batch`; NaN where it does not bind);
    policy (R, N), draws (R, N, m) with NaN past each seed's draws, N >= the last look.  The
    sequential gate reads one campaign's floors from here
    (:func:`evalkit.audit.sequential.look_floors`)."""
    out = np.full((policy.shape[0], len(looks)), np.nan)
    for k, nk in enumerate(looks):
        if nk >= 2:
            b = floored_variance_batch(policy[:, :nk], draws[:, :nk], "lognormal")
            out[:, k] = np.where(b["binds"], b["variance"], np.nan)
    return out


def group_sequential_batch(d: np.ndarray, gs: GroupSequentialDesign,
                           null_shift: float = 0.0,
                           variance_floor=None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`evalkit.stats.group_sequential.decide` on many campaigns at once: d (R, N) per
    seed in order, N >= the design's maximum; ``variance_floor`` (R, K) per look, NaN: none.
    Returns (decision code (R,): :data:`PASS`, :data:`FUTILITY_STOP` or
    :data:`NOT_BETTER_AT_END`; seeds used (R,))."""
    reps = d.shape[0]
    decision = np.full(reps, NOT_BETTER_AT_END)
    used = np.full(reps, gs.max_seeds)
    open_ = np.ones(reps, dtype=bool)
    for k, (nk, bound, fut) in enumerate(zip(gs.looks, gs.t_bounds, gs.futility_t)):
        x = d[:, :nk] - null_shift
        var = x.var(axis=1, ddof=1)
        if variance_floor is not None:
            floor = variance_floor[:, k]
            var = np.where(np.isfinite(floor), np.maximum(var, floor), var)
        sd = np.sqrt(var)
        mean = x.mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = np.where(sd == 0, np.sign(mean) * np.inf, mean / (sd / math.sqrt(nk)))
        stat = np.where((sd == 0) & (mean == 0), 0.0, stat)
        passed = open_ & (stat >= bound)
        stopped = np.zeros(reps, dtype=bool)
        if fut is not None:
            stopped = open_ & ~passed & (stat < fut)
        decision[passed], decision[stopped] = PASS, FUTILITY_STOP
        used[passed | stopped] = nk
        open_ &= ~(passed | stopped)
    return decision, used


def sequential_looks(max_seeds: int, block: int, first: int | None = None) -> tuple:
    """Looks after each block of seeds (from ``first`` seeds on when given), the last at
    ``max_seeds``."""
    start = block if first is None else min(int(first), max_seeds)
    return tuple(range(start, max_seeds, block)) + (max_seeds,)


@dataclass(frozen=True)
class PowerRow(ResultMixin):
    """Power of one draws-per-seed setting; ``*_low``/``*_high``: the pilot-size interval."""

    m: int
    seeds: tuple                     # the grid of seed counts
    fixed_power: tuple               # power of the fixed-n test at each seed count
    fixed_power_low: tuple
    fixed_power_high: tuple
    fixed_seeds_needed: int | None   # fewest seeds on the grid reaching the target
    fixed_seeds_needed_range: tuple  # the same over the refits (None: beyond the grid)
    sequential_power: tuple          # P(group-sequential "better" by that seed count)
    sequential_power_low: tuple
    sequential_power_high: tuple
    sequential_seeds_needed: int | None
    sequential_decisions: dict       # P(each decision of the design)
    mean_seeds_to_decision: float    # seeds used (a campaign stops at a decision or at max)
    mean_seeds_to_decision_range: tuple
    median_seeds_to_decision: float
    p90_seeds_to_decision: float
    decided_share: float             # stopped before the design's last look
    fixed_pilot_seeds: int | None = None       # pilot seeds for the fixed-n power at the
    sequential_pilot_seeds: int | None = None  # last count (and the sequential P(pass)) to
                                               # land within the plan's tolerance


@dataclass(frozen=True)
class PowerPlan(ResultMixin):
    gain: float
    relative_gain: float             # the policy's V is (1 - relative_gain) x a draw's
    effect: str
    alpha: float
    alternative: str
    null_shift: float
    target: float
    policy_sd_ratio: float | None
    reps: int
    n_resamples: int
    refits: int
    interval: float
    block: int
    rows: tuple
    sd_within: float
    model: str
    components: dict
    method: str
    first_look: int | None = None     # the design's first look (None: after the first block)
    futility: str = "zero"            # the design's futility rule
    tolerance: float = 0.07           # the pilot-seeds fields' band on a predicted power
    n_pilot_seeds: int = 0
    tail: TailCheck | None = None     # the pilot's right-tail check (None: one draw a seed)

    def best(self, kind: str) -> PowerRow | None:
        """The draws-per-seed setting that reaches the target with the fewest runs
        (seeds x (m + 2): policy, m draws, no-sync)."""
        key = "fixed_seeds_needed" if kind == "fixed" else "sequential_seeds_needed"
        ok = [r for r in self.rows if getattr(r, key) is not None]
        return min(ok, key=lambda r: getattr(r, key) * (r.m + 2)) if ok else None


def _simulate(model: PilotModel, gen, reps: int, top: int, m: int, gain: float, grid,
              settings: dict) -> dict:
    """Fixed power per grid count, and the sequential design's decisions, of one model."""
    policy, draws = model.sample(gen, reps, top, m, gain, relative=settings["relative"],
                                 effect=settings["effect"])
    d = draws.mean(axis=-1) - policy
    alt, alpha, shift = settings["alternative"], settings["alpha"], settings["null_shift"]
    fixed = []
    for n in grid:
        # the fixed gate tests the zero null; min_effect shifts the sequential design only
        fixed.append(float(np.mean(fixed_gate_passes(policy[:, :n], draws[:, :n], alt,
                                                     alpha))))
    oriented = -d if alt == "less" else d
    gs = settings["design"]
    floors = look_floors_batch(policy[:, :gs.max_seeds], draws[:, :gs.max_seeds], gs.looks)
    decision, used = group_sequential_batch(oriented[:, :gs.max_seeds], gs, shift,
                                            variance_floor=floors)
    better_by = [float(np.mean((decision == PASS) & (used <= n))) for n in grid]
    return {"fixed": fixed, "sequential": better_by, "decision": decision, "used": used}


def fixed_gate_passes(policy: np.ndarray, draws: np.ndarray, alternative: str,
                      alpha: float) -> np.ndarray:
    """(R,) whether the fixed gate passes each of R campaigns: the draw-floored t-test
    (:func:`evalkit.stats.floored.floored_variance_batch`) at ``alpha`` with the mean on the
    better side, and enough seeds that a sign flip on d could reach ``alpha`` (the gate's
    design rule).  policy (R, n), draws (R, n, m)."""
    n = policy.shape[1]
    reach = (2.0 if alternative == "two-sided" else 1.0) * 0.5 ** n
    if n < 2 or reach > alpha:
        return np.zeros(policy.shape[0], dtype=bool)
    b = floored_t_batch(policy, draws)
    p = {"greater": b["p_greater"], "less": b["p_less"],
         "two-sided": b["p_two_sided"]}[alternative]
    better = -b["mean"] if alternative == "less" else b["mean"]
    return (p <= alpha) & (better > 0)


def _first(grid, power, target):
    return next((n for n, p in zip(grid, power) if p >= target), None)


TOLERANCE_COVERAGE = 0.9       # the pilot-seeds estimate: within the band this often


def pilot_seeds_for(powers, campaigns: int, n_pilot: int, tolerance: float) -> int | None:
    """Pilot seeds for a predicted power to land within ``+-tolerance`` of the truth
    :data:`TOLERANCE_COVERAGE` of the time, to first order: the variance of the refits'
    powers (each from ``campaigns`` simulated campaigns) less their Monte Carlo part
    ``p (1 - p) / campaigns`` is the pilot's share, which shrinks as ``1 / seeds`` from
    ``n_pilot``; an unbiased normal prediction of that SD lands within the band as asked.
    None with fewer than 2 refits."""
    p = np.asarray(powers, dtype=float)
    if p.size < 2:
        return None
    pilot_var = max(0.0, float(np.var(p, ddof=1)) - float(np.mean(p * (1 - p))) / campaigns)
    z = statistics.NormalDist().inv_cdf(0.5 + TOLERANCE_COVERAGE / 2)
    return max(2, math.ceil(n_pilot * pilot_var / (tolerance / z) ** 2))


def _redrawn_model(model: PilotModel, gen) -> PilotModel:
    """The model with its variance components drawn from their sampling distributions given
    the pilot (each sample variance ``v`` of ``f`` degrees of freedom redrawn as
    ``f v / chi2_f``, the pivot of a normal sample's variance), ``mu`` from its standard
    error and the residual pool resampled: the pilot's uncertainty carried into the power."""
    n = model.n_pilot_seeds

    def redraw(v, dof):
        return v * dof / gen.chisquare(dof) if dof > 0 else v

    var_r = redraw(model.var_policy_resid, n - 1)
    var_level = redraw(model.var_level, n - 1)
    if model.dof_within > 0:
        sw2 = redraw(model.sigma_within ** 2, model.dof_within)
        sp2 = max(0.0, var_r - sw2 * model.inv_k)
    else:
        sw2 = var_r / (1.0 + model.inv_k)
        sp2 = sw2
    if model.policy_sd_ratio is not None:
        sp2 = model.policy_sd_ratio ** 2 * sw2
    tau2 = _level_variance(var_level, sw2, model.inv_k)
    mu = model.mu + gen.normal(0.0, math.sqrt(var_level / n))
    pool = np.asarray(model.residuals, dtype=float)
    if pool.size:
        # the pool's shape is as uncertain as its scale: a 10-seed pilot of bursty V shows
        # one burst or five; resampled (unless that leaves no spread), recentred and
        # rescaled to the redrawn sigma_within
        resampled = pool[gen.integers(0, pool.size, size=pool.size)]
        if resampled.std() > 0:
            pool = resampled - resampled.mean()
        if pool.std() > 0:
            pool = pool * math.sqrt(sw2) / pool.std()
    out = dataclasses.replace(model, mu=float(mu), tau=math.sqrt(tau2),
                              sigma_within=math.sqrt(sw2), sigma_policy=math.sqrt(sp2),
                              residuals=tuple(float(x) for x in pool))
    noise_mean = math.exp(0.5 * sw2) if model.kind == "lognormal" else out._mean_factor(1.0)
    return dataclasses.replace(out, mean_draw=math.exp(mu + 0.5 * tau2) * noise_mean)


def power_plan(model: PilotModel, gain: float, *, relative: bool = False,
               effect: str = "multiplicative", alpha: float = 0.05,
               alternative: str = "two-sided", null_shift: float = 0.0, target: float = 0.8,
               draws=(1, 2, 3, 5), max_seeds: int = 40, seeds_grid=None, reps: int = 400,
               n_resamples: int = 400, block: int = 5, spending: str = "obrien-fleming",
               gamma: float | None = None, refits: int = 30, interval: float = 0.8,
               first_look: int | None = None, futility: str = "zero", tolerance: float = 0.07,
               rng=None) -> PowerPlan:
    """Power of the fixed-n seed-level test and of the group-sequential design for ``gain``,
    each with its interval from the pilot's size (module docstring).  ``null_shift``: the
    sequential design's null (the gate's ``min_effect``); the fixed-n test keeps the zero null,
    as the fixed gate's.  ``spending``, ``gamma``: the design's alpha spending, as a
    campaign's ``[design]`` names it (gamma only with "hwang-shih-decani"); ``first_look``:
    its first look (then one every ``block`` seeds), as ``[design] first_look``;
    ``futility``: its futility rule (:data:`evalkit.stats.group_sequential.FUTILITY`), as
    ``[design] futility``; ``tolerance``: the band of the pilot seeds each row estimates for a
    power within it (:func:`pilot_seeds_for`)."""
    check_alternative(alternative)
    if futility not in FUTILITY:
        raise InputError(f"unknown futility rule {futility!r}", column="futility",
                         fix=f"use one of {', '.join(FUTILITY)}")
    spending, gamma_used = check_spending(spending, gamma)
    for name, value in (("alpha", alpha), ("target", target), ("interval", interval),
                        ("tolerance", tolerance)):
        if not 0.0 < float(value) < 1.0:
            raise InputError(f"{name} must lie in (0, 1), got {value}", column=name,
                             fix="e.g. 0.05 for alpha, 0.8 for the target power and the "
                                 "interval, 0.07 for the tolerance")
    if not math.isfinite(gain):
        raise InputError(f"gain must be a finite number, got {gain}", column="gain",
                         fix="the V reduction to detect as a share, e.g. 0.0145 (1.45 pp: "
                             "6.54% -> 5.09%)")
    if effect not in EFFECTS:
        raise InputError(f"unknown effect {effect!r}", column="effect",
                         fix="'multiplicative' (policy V = a factor x a draw's) or 'additive'")
    factor = gain if relative else gain / model.mean_draw
    if effect == "multiplicative" and factor >= 1.0:
        raise InputError(f"a gain of {gain:g} is {factor:.0%} of a draw's V: a multiplicative "
                         "effect must stay below 100%", column="gain",
                         fix="a smaller gain, or effect='additive'")
    if not math.isfinite(null_shift):
        raise InputError(f"null_shift must be finite, got {null_shift}", column="null_shift",
                         fix="the smallest effect of interest as a share of V, e.g. 0.005")
    if int(max_seeds) < 2:
        raise InputError(f"max_seeds must be >= 2, got {max_seeds}", column="max_seeds",
                         fix="e.g. max_seeds = 40")
    if int(reps) < 10:
        raise InputError(f"reps must be >= 10, got {reps}", column="reps", fix="e.g. reps = 400")
    if first_look is not None and not 2 <= int(first_look) <= int(max_seeds):
        raise InputError(f"first_look must lie in 2..max_seeds ({max_seeds}), got "
                         f"{first_look}", column="first_look",
                         fix="a look needs 2 seeds: e.g. first_look = 4")
    if int(block) < (2 if first_look is None else 1):
        raise InputError(f"block must be >= {2 if first_look is None else 1} seeds, got "
                         f"{block}", column="block",
                         fix="look after every block of e.g. 5 seeds (1 with a first look)")
    if int(refits) < 0:
        raise InputError(f"refits must be >= 0, got {refits}", column="refits",
                         fix="e.g. 40 (0: no interval)")
    gen = as_generator(rng)
    top = int(max_seeds)
    grid = sorted({int(n) for n in (seeds_grid or range(2, top + 1)) if 2 <= int(n) <= top})
    settings = {"relative": relative, "effect": effect, "alternative": alternative,
                "alpha": float(alpha), "null_shift": float(null_shift),
                "n_resamples": int(n_resamples),
                "design": design(sequential_looks(top, int(block), first_look),
                                 alpha / 2 if alternative == "two-sided" else alpha,
                                 spending, gamma_used, futility)}
    refit_reps = max(10, int(reps) // 2)
    lo_q, hi_q = 50 * (1 - interval), 50 * (1 + interval)
    rows = []
    for m in draws:
        main = _simulate(model, gen, int(reps), top, int(m), float(gain), grid, settings)
        boot = []
        for _ in range(int(refits)):
            boot.append(_simulate(_redrawn_model(model, gen), gen, refit_reps, top, int(m),
                                  float(gain), grid, settings))

        def band(key, main=main, boot=boot):
            if not boot:
                return tuple(main[key]), tuple(main[key])
            arr = np.array([b[key] for b in boot])
            return (tuple(float(x) for x in np.percentile(arr, lo_q, axis=0)),
                    tuple(float(x) for x in np.percentile(arr, hi_q, axis=0)))

        f_lo, f_hi = band("fixed")
        s_lo, s_hi = band("sequential")
        needed = [_first(grid, b["fixed"], target) for b in boot]
        big = top + 1
        need_sorted = sorted(big if n is None else n for n in needed)
        need_range = ((None, None) if not needed else tuple(
            None if v > top else int(v) for v in
            (need_sorted[int(math.floor((len(needed) - 1) * lo_q / 100))],
             need_sorted[int(math.ceil((len(needed) - 1) * hi_q / 100))])))
        means = [float(b["used"].mean()) for b in boot]
        used, decision = main["used"], main["decision"]
        rows.append(PowerRow(
            m=int(m), seeds=tuple(grid), fixed_power=tuple(main["fixed"]),
            fixed_power_low=f_lo, fixed_power_high=f_hi,
            fixed_seeds_needed=_first(grid, main["fixed"], target),
            fixed_seeds_needed_range=need_range,
            sequential_power=tuple(main["sequential"]), sequential_power_low=s_lo,
            sequential_power_high=s_hi,
            sequential_seeds_needed=_first(grid, main["sequential"], target),
            sequential_decisions={text: float(np.mean(decision == code))
                                  for code, text in DECISIONS.items()},
            mean_seeds_to_decision=float(used.mean()),
            mean_seeds_to_decision_range=((float(np.percentile(means, lo_q)),
                                           float(np.percentile(means, hi_q)))
                                          if means else (math.nan, math.nan)),
            median_seeds_to_decision=float(np.median(used)),
            p90_seeds_to_decision=float(np.percentile(used, 90)),
            decided_share=float(np.mean(used < top)),
            fixed_pilot_seeds=pilot_seeds_for([b["fixed"][-1] for b in boot], refit_reps,
                                              model.n_pilot_seeds, tolerance),
            sequential_pilot_seeds=pilot_seeds_for([b["sequential"][-1] for b in boot],
                                                   refit_reps, model.n_pilot_seeds,
                                                   tolerance)))
    return PowerPlan(
        gain=float(gain), relative_gain=float(factor), effect=effect, alpha=float(alpha),
        alternative=alternative, null_shift=float(null_shift), target=float(target),
        policy_sd_ratio=model.policy_sd_ratio, reps=int(reps),
        n_resamples=int(n_resamples), refits=int(refits), interval=float(interval),
        block=int(block), first_look=None if first_look is None else int(first_look),
        futility=futility, tolerance=float(tolerance), n_pilot_seeds=model.n_pilot_seeds,
        tail=tail_check(model, rng=gen), rows=tuple(rows), sd_within=model.sd_within,
        model=(("lognormal" if model.kind == "lognormal" else "smoothed bootstrap of the log "
                "residuals, lognormal seed levels")
               + f": variance components of {model.n_pilot_seeds} pilot seeds; policy spread "
               f"{model.policy_spread}"),
        components={"mu": model.mu, "tau": model.tau, "sigma_within": model.sigma_within,
                    "sigma_policy": model.sigma_policy, "mean_draw": model.mean_draw,
                    "zeros_floored": model.zeros_floored},
        method=(f"{reps} simulated campaigns per setting; fixed-n: the gate's draw-floored "
                f"t-test of the mean of d (and enough seeds for a sign flip on d to reach "
                f"alpha); sequential: group-sequential design "
                f"({spending_words(spending, gamma_used)}, one-sided alpha "
                f"{settings['design'].alpha:g}, {futility_words(futility)}, null shift "
                f"{100 * null_shift:.2f} pp: a pass needs the mean gain above it), "
                + ("" if first_look is None else f"a first look at {first_look} seeds, then ")
                + ("a look after every seed" if int(block) == 1
                   else f"a look after every {block} seeds") + f" up to "
                f"{top}; interval: {refits} redraws of the "
                f"model's variance components from their sampling distributions"
                f"{'' if model.kind == 'lognormal' else ' and of its residual pool'}, "
                f"{refit_reps} campaigns each, central {interval:.0%} of their powers"))
