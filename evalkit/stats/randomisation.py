"""One randomisation test over per-seed label values: sign-flip and within-seed permutation.

Seed s carries label values ``vals_s`` (k_s,): ``vals_s[j]`` is the seed's difference d_s when
label j is the observed one, j = 0 the labelling that happened.  Under H0 every label is
equally likely, independently per seed, so the null of ``sum_s d_s`` is a sum of independent
discrete uniforms.  Two designs give the labels:

* **within-seed permutation**: seed s has one policy run and ``m_s >= 1`` matched-random
  draws; relabelling run j as the policy gives ``d_s(j) = (S_s - (m_s + 1) v_sj) / m_s``
  (:func:`seed_label_values`).  H0: the policy run is one more random placement.
* **sign flip**: ``vals_s = [d_s, -d_s]`` (H0: each d_s symmetric about 0).  This is the
  permutation test with one draw per seed, and how scipy runs its "samples" permutation type
  on one sample.  Its own front end keeps the forms its results were recorded with: halves
  of contiguous seeds, random signs summed by a matrix product, a CI from subset means, and
  ``2^-n`` as the smallest p.

Exact nulls are enumerated by meet-in-the-middle: the seeds split in two halves, one half's
sums are sorted and the other's counted against it, ``O(sqrt(N) log N)`` for N label sets.
Beyond that, Monte Carlo with ``p = (k + 1) / (B + 1)``.  The studentized statistic (mean/se,
:mod:`evalkit.stats.studentized`) is an option of the permutation design; with one draw per
seed it orders label sets as the mean does, so the raw engine computes it.

CIs invert the test under an additive shift delta.  Each label set L stops being "at least as
extreme" at one threshold ``delta_L = (T - T_L) / (1 + c(L))``, ``c(L) = mean_s(-1 if L_s is
the observed label else 1/m_s)``, so the bounds are order statistics of thresholds (for sign
flips: the means of d over the flipped seeds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evalkit.errors import InputError
from evalkit.stats import studentized as st
from evalkit.stats._result import (DEFAULT_MC_RESAMPLES, DEFAULT_RTOL, ResultMixin,
                                    as_finite_1d, as_generator, check_alpha, check_alternative,
                                    check_level, check_n_resamples)
from evalkit.stats.inversion import (_CHUNK, _flat, _random_flips, permutation_ci,
                                     sign_flip_ci)

__all__ = ["MAX_EXACT_N", "RandomisationResult", "PermutationResult", "SignFlipResult",
           "exact_enumerable", "min_attainable_p", "seed_label_values", "seeds_needed",
           "sign_flip_test", "within_seed_permutation_test"]

SIGN_FLIP = "sign-flip"
PERMUTATION = "within-seed permutation"
MAX_EXACT_N = 40                # sign flips: 2 x 2^20 sums, exact in well under a second
MAX_EXACT_HALF = 1 << 21        # label sets per half: exact up to ~4e12 label sets in all

STATISTICS = ("studentized", "mean")
NULL_TESTED = {
    "studentized": ("the policy's mean V equals its draws' mean V (exact when the policy run "
                    "is exchangeable with its draws; approximate, asymptotically valid, when "
                    "its run-to-run spread differs from a draw's)"),
    "mean": ("the policy run is exchangeable with its seed's draws (looks like one more "
             "random placement); not a test of equal means when the policy's spread differs "
             "from a draw's"),
    SIGN_FLIP: "every per-seed difference d_s is symmetric about 0",
}
CI_MODEL = ("additive shift: policy V + delta is exchangeable with its seed's draws, the same "
            "delta in every seed")
SIGN_FLIP_CI_MODEL = ("additive shift: d_s - delta is symmetric about 0, the same delta in "
                      "every seed")


# ------------------------------------------------------------------ design limits

def min_attainable_p(m, alternative: str = "greater", n_resamples: int | None = None,
                     values=None) -> float:
    """Smallest p the test can return.

    m: an int n -- n seeds of a paired sign-flip design, ``2^-n`` one-sided -- or (n,) draws
    per seed, ``prod 1/(m_s + 1)`` (the design's limit).  With ``values`` (list of (m_s + 1,)
    label values) tied labels count fully: a seed whose runs all have the same V cannot move
    the statistic and contributes factor 1, the limit the data can actually reach.
    n_resamples: Monte Carlo B; the p is then at least ``1 / (B + 1)`` (doubled two-sided).
    """
    check_alternative(alternative)
    factor = 2.0 if alternative == "two-sided" else 1.0
    if isinstance(m, (int, np.integer)) and values is None:
        p = factor * 2.0 ** (-int(m))
    else:
        p_g, p_l = _one_sided_min_p(np.asarray(m, dtype=int).reshape(-1), values)
        p = {"greater": p_g, "less": p_l, "two-sided": 2.0 * min(p_g, p_l)}[alternative]
    if n_resamples is not None:
        p = max(p, factor / (int(n_resamples) + 1))
    return min(1.0, p)


def _one_sided_min_p(m: np.ndarray, values) -> tuple[float, float]:
    if values is None:
        p = math.exp(-float(np.sum(np.log(m + 1.0))))
        return p, p
    lg = ll = 0.0
    for vals in values:
        vals = np.asarray(vals, dtype=float)
        tol = DEFAULT_RTOL * max(1.0, float(np.max(np.abs(vals))))
        lg += math.log(np.count_nonzero(vals >= vals.max() - tol) / vals.size)
        ll += math.log(np.count_nonzero(vals <= vals.min() + tol) / vals.size)
    return math.exp(lg), math.exp(ll)


def seeds_needed(alpha: float = 0.05, alternative: str = "two-sided", m: int = 1) -> int:
    """Fewest seeds, each with ``m`` matched-random draws (m = 1: the paired sign-flip test),
    at which an exact test can reach ``p <= alpha`` at all.

    One-sided the smallest p is ``(m + 1)^-n``, two-sided twice that: 5 seeds one-sided, 6
    two-sided at alpha = 0.05 with one draw.
    """
    check_alternative(alternative)
    check_alpha(alpha)
    if isinstance(m, bool) or int(m) < 1:
        raise InputError(f"m = {m} draws per seed; need >= 1", column="draws",
                         fix="replay >= 1 matched-random draw per seed")
    factor = 2.0 if alternative == "two-sided" else 1.0
    n = max(1, math.ceil(math.log(factor / alpha) / math.log(int(m) + 1) - 1e-12))
    while factor * (int(m) + 1.0) ** (-n) > alpha:
        n += 1
    while n > 1 and factor * (int(m) + 1.0) ** (1 - n) <= alpha:
        n -= 1
    return n


def check_statistic(statistic: str) -> str:
    if statistic not in STATISTICS:
        raise InputError(f"unknown permutation statistic {statistic!r}", column="statistic",
                         fix="use 'studentized' (mean/se, the default) or 'mean' (raw mean)")
    return statistic


def _halves(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of two seed halves with balanced products of label counts.

    Equal counts (sign flips): the first n // 2 seeds and the rest.  Else greedy, largest
    first, each seed to the lighter half."""
    if np.all(sizes == sizes[0]):
        half = sizes.size // 2
        return np.arange(half), np.arange(half, sizes.size)
    order = np.argsort(-np.log(sizes), kind="mergesort")
    a, b, la, lb = [], [], 0.0, 0.0
    for i in order:
        if la <= lb:
            a.append(i)
            la += math.log(sizes[i])
        else:
            b.append(i)
            lb += math.log(sizes[i])
    return np.array(sorted(a), dtype=int), np.array(sorted(b), dtype=int)


def exact_enumerable(m, statistic: str = "studentized") -> bool:
    """Whether the null of a design with ``m`` (n,) draws per seed is enumerated exactly.

    Raw mean, or studentized with one draw per seed (then the same test): both
    meet-in-the-middle halves hold <= :data:`MAX_EXACT_HALF` label sets.  Studentized with
    more draws: <= :data:`evalkit.stats.studentized.MAX_EXACT_SETS` label sets in all."""
    check_statistic(statistic)
    if statistic == "studentized" and np.any(np.asarray(m).reshape(-1) != 1):
        return st.enumerable(m)
    sizes = np.asarray(m, dtype=float).reshape(-1) + 1.0
    ia, ib = _halves(sizes)
    return max(float(np.prod(sizes[ia])), float(np.prod(sizes[ib]))) <= MAX_EXACT_HALF


# ------------------------------------------------------------------ counting the null

def _all_sums(vals: list[np.ndarray]) -> np.ndarray:
    """Sums over every label set of these seeds: (prod sizes,)."""
    sums = np.zeros(1)
    for v in vals:
        sums = (sums[:, None] + v[None, :]).reshape(-1)
    return sums


def _exact_counts(vals, t_sum: float, tol: float) -> tuple[int, int, int]:
    """Label sets with sum >= t - tol and with sum <= t + tol, and their number (exact)."""
    ia, ib = _halves(np.array([v.size for v in vals], dtype=float))
    # Sorting the queries too makes searchsorted cache-friendly (about 6x faster at n = 40).
    left = np.sort(_all_sums([vals[i] for i in ia]))
    right = np.sort(_all_sums([vals[i] for i in ib]))
    n_ge = n_le = 0
    step = max(1, _CHUNK // 4)
    for i in range(0, left.size, step):
        a = left[i:i + step]
        n_ge += int(right.size * a.size - np.searchsorted(right, (t_sum - tol) - a, "left").sum())
        n_le += int(np.searchsorted(right, (t_sum + tol) - a, "right").sum())
    return n_ge, n_le, left.size * right.size


def _random_sums(vals, rows: int, rng, signs: bool) -> np.ndarray:
    """(rows,) sums over random label sets (random signs of d when ``signs``)."""
    if signs:
        d = np.array([v[0] for v in vals])
        return (1.0 - 2.0 * _random_flips(rng, rows, d.size)) @ d
    sizes, offsets, flat = _flat(vals)
    return flat[st.random_labels(rng, rows, sizes) + offsets].sum(axis=1)


def _mc_counts(vals, t_sum, tol, b, rng, signs: bool) -> tuple[int, int]:
    rows = max(1, _CHUNK // len(vals))
    n_ge = n_le = done = 0
    while done < b:
        c = min(rows, b - done)
        sums = _random_sums(vals, c, rng, signs)
        n_ge += int(np.count_nonzero(sums >= t_sum - tol))
        n_le += int(np.count_nonzero(sums <= t_sum + tol))
        done += c
    return n_ge, n_le


# ------------------------------------------------------------------ the result

@dataclass(frozen=True)
class RandomisationResult(ResultMixin):
    """A randomisation test of the gain ``mean_s d_s`` (positive favours the policy under
    ``alternative='greater'``); ``test`` names the design ("sign-flip", "within-seed
    permutation" or "studentized within-seed permutation").

    ``statistic`` is always that mean (the estimate); the statistic the p compares with its
    null is ``statistic_name``: ``"studentized"`` (mean/se, ``t_statistic``) or ``"mean"``.
    ``p_value`` is for ``alternative``; ``p_greater``, ``p_less`` and ``p_two_sided`` are all
    reported, two-sided = ``min(1, 2 min(p_greater, p_less))`` (scipy's convention).
    ``null_size``: label sets enumerated (exact) or B (Monte Carlo).  ``wins``: seeds whose d
    favours the alternative (two-sided: shares the sign of the mean).  ``min_p``: smallest p
    these data can reach (tied labels counted, B included); ``design_min_p``: the design's.
    ``m``: draws per seed (1 for sign flips).  ``ci_low``/``ci_high``: CI for the shift
    (``ci_model``) matching the alternative, infinite on the open side or when n is too small
    to exclude anything.  ``null_hypothesis`` says in words what a small p rejects.
    """

    statistic: float
    p_value: float
    alternative: str
    n: int
    m: tuple
    wins: int
    exact: bool
    null_size: int
    min_p: float
    design_min_p: float
    ci_low: float
    ci_high: float
    ci_method: str
    confidence_level: float
    p_greater: float
    p_less: float
    p_two_sided: float
    method: str
    n_resamples: int | None
    atol: float
    n_positive: int
    n_negative: int
    n_zero: int
    test: str = PERMUTATION
    statistic_name: str = "mean"
    t_statistic: float = math.nan
    null_hypothesis: str = NULL_TESTED["mean"]
    ci_model: str = CI_MODEL
    _d: np.ndarray = field(repr=False, default=None)
    _vals: tuple = field(repr=False, default=())

    @property
    def differences(self) -> np.ndarray:
        return self._d.copy()

    def reachable(self, alpha: float) -> bool:
        """Whether this design can reach ``p <= alpha`` at all (``min_p <= alpha``)."""
        return self.min_p <= alpha

    @property
    def null_statistic(self) -> str:
        """The statistic the p-value compares with its null: ``"studentized"`` (mean/se;
        with one draw per seed it orders label sets as the mean does, so ``"mean"``)."""
        studentized = self.statistic_name == "studentized" and any(k != 1 for k in self.m)
        return "studentized" if studentized else "mean"

    @property
    def null_observed(self) -> float:
        """The observed value of :attr:`null_statistic`."""
        return self.t_statistic if self.null_statistic == "studentized" else self.statistic

    def null_distribution(self, max_points: int = 100_000, seed: int = 0) -> np.ndarray:
        """Sorted null values of :attr:`null_statistic` for plotting, (m,): every label set
        when there are <= ``max_points``, else ``max_points`` random ones drawn with ``seed``."""
        vals = list(self._vals)
        if self.null_statistic == "studentized":
            return st.null_t(vals, max_points, seed)
        n = len(vals)
        if float(np.prod([float(v.size) for v in vals])) <= max_points:
            return np.sort(_all_sums(vals)) / n
        rng = np.random.default_rng(seed)
        signs = self.test == SIGN_FLIP
        out = np.empty(max_points)
        rows = max(1, _CHUNK // n) if signs else max_points
        for i in range(0, max_points, rows):
            c = min(rows, max_points - i)
            out[i:i + c] = _random_sums(vals, c, rng, signs) / n
        return np.sort(out)


SignFlipResult = RandomisationResult
PermutationResult = RandomisationResult


# ------------------------------------------------------------------ the engine

def _p_values(n_ge, n_le, size, exact: bool, alternative: str):
    if exact:
        p_greater, p_less = n_ge / size, n_le / size
    else:
        p_greater, p_less = (n_ge + 1) / (size + 1), (n_le + 1) / (size + 1)
    p_two = min(1.0, 2.0 * min(p_greater, p_less))
    return p_greater, p_less, p_two, {"greater": p_greater, "less": p_less,
                                      "two-sided": p_two}[alternative]


def _signs(d_obs: np.ndarray, zero: float, mean: float, alternative: str):
    n_pos, n_neg = int(np.count_nonzero(d_obs > zero)), int(np.count_nonzero(d_obs < -zero))
    wins = {"greater": n_pos, "less": n_neg,
            "two-sided": n_pos if mean >= 0 else n_neg}[alternative]
    return n_pos, n_neg, wins


def _exactness(n_resamples, enumerable: bool, total: float, too_many: str) -> bool:
    if n_resamples is None:
        return enumerable
    check_n_resamples(n_resamples)
    exact = n_resamples == np.inf or float(n_resamples) >= total
    if exact and not enumerable:
        raise InputError(too_many, column="n_resamples",
                         fix="pass a finite n_resamples for a Monte Carlo p-value")
    return exact


def sign_flip_test(d, alternative: str = "greater", n_resamples=None, rng=None,
                   confidence_level: float = 0.95,
                   atol: float | None = None) -> RandomisationResult:
    """Paired sign-flip test of H0 "each d_s symmetric about 0" on the statistic mean(d).

    d: (n,) per-seed differences, n >= 2, all finite.
    n_resamples: None -> exact when n <= 40, else Monte Carlo with 100,000 resamples;
      an int >= 2^n or ``np.inf`` -> exact; a smaller int -> Monte Carlo with
      ``p = (k + 1) / (B + 1)`` (drawn in chunks: memory stays bounded for any B).
    rng: numpy Generator or int seed for Monte Carlo parts (None -> seed 0, deterministic).
    atol: tie tolerance on the mean scale; null values within atol of the observed mean
      count as reaching it (inclusive).  Default ``1e-9 * mean(|d|)``.
    """
    check_alternative(alternative)
    d = as_finite_1d(d, "d", min_size=2, what="per-seed differences (seeds)")
    level = check_level(confidence_level)
    n = d.size
    gen = as_generator(rng)
    if atol is None:
        atol = DEFAULT_RTOL * float(np.mean(np.abs(d)))
    vals = [np.array([x, -x]) for x in d]
    tol = float(atol) * n                      # we compare sums, not means
    t_sum = float(np.sum(d))
    exact = _exactness(n_resamples, n <= MAX_EXACT_N, 2.0 ** n,
                       f"exact enumeration asked for n = {n} seeds; exact is limited to "
                       f"n <= {MAX_EXACT_N}")
    if exact:
        n_ge, n_le, null_size = _exact_counts(vals, t_sum, tol)
        b = None
        method = f"exact sign-flip over all 2^{n} patterns (meet-in-the-middle)"
    else:
        b = DEFAULT_MC_RESAMPLES if n_resamples is None else int(n_resamples)
        n_ge, n_le = _mc_counts(vals, t_sum, tol, b, gen, signs=True)
        null_size = b
        method = f"Monte Carlo sign-flip, B = {b} resamples, p = (k+1)/(B+1)"
    p_greater, p_less, p_two, p_value = _p_values(n_ge, n_le, null_size, exact, alternative)
    mean = t_sum / n
    n_pos, n_neg, wins = _signs(d, float(atol) if atol else 0.0, mean, alternative)
    ci_low, ci_high, ci_method = sign_flip_ci(d, alternative, level, gen)
    return RandomisationResult(
        statistic=float(mean), p_value=float(p_value), alternative=alternative, n=n,
        m=(1,) * n, wins=wins, exact=bool(exact), null_size=int(null_size),
        min_p=min_attainable_p(n_pos + n_neg, alternative, b),
        design_min_p=min_attainable_p(n, alternative, b), ci_low=ci_low, ci_high=ci_high,
        ci_method=ci_method, confidence_level=level,
        p_greater=float(p_greater), p_less=float(p_less), p_two_sided=float(p_two),
        method=method, n_resamples=b, atol=float(atol), n_positive=n_pos, n_negative=n_neg,
        n_zero=n - n_pos - n_neg, test=SIGN_FLIP, statistic_name="mean",
        t_statistic=st.t_statistic(d), null_hypothesis=NULL_TESTED[SIGN_FLIP],
        ci_model=SIGN_FLIP_CI_MODEL, _d=d.copy(), _vals=tuple(vals))


def _as_design(policy, draws) -> tuple[np.ndarray, list[np.ndarray]]:
    try:
        pol = np.asarray(policy, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError("policy values must be numbers", column="policy",
                         fix="pass one V per seed") from exc
    if pol.size < 1:
        raise InputError("no seeds", column="policy", fix="pass one policy V per seed")
    if len(draws) != pol.size:
        raise InputError(f"{pol.size} policy values but {len(draws)} lists of draws",
                         column="draws", fix="one list of matched-random V per seed")
    out = []
    for s, d in enumerate(draws):
        arr = np.asarray(d, dtype=float).reshape(-1)
        if arr.size < 1:
            raise InputError(f"seed {s} has no matched-random draws", column="draws",
                             fix="every seed needs >= 1 draw")
        if not (np.all(np.isfinite(arr)) and np.isfinite(pol[s])):
            raise InputError(f"seed {s}: non-finite violation rate", column="violation_rate",
                             fix="a failed run is a missing result, not NaN")
        out.append(arr)
    return pol, out


def seed_label_values(policy: float, draws: np.ndarray) -> np.ndarray:
    """(m + 1,) values of d_s when run j is labelled the policy; j = 0 is the policy run."""
    v = np.concatenate(([policy], draws))
    m = draws.size
    return (v.sum() - (m + 1) * v) / m


def within_seed_permutation_test(policy, draws, alternative: str = "greater",
                                 n_resamples=None, rng=None,
                                 confidence_level: float | None = 0.95,
                                 atol: float | None = None,
                                 statistic: str = "studentized") -> RandomisationResult:
    """Within-seed permutation test of the policy against its matched-random draws.

    statistic: ``"studentized"`` (default, mean/se recomputed for every label set: tests
      equal means, :mod:`evalkit.stats.studentized`) or ``"mean"`` (raw mean: tests
      "the policy run is exchangeable with its draws").  With one draw per seed both are
      the sign-flip test.
    policy: (n,) V of each seed's policy run; draws: n sequences, (m_s,) V of its draws.
    n_resamples: None -> exact when both meet-in-the-middle halves hold <= 2^21 label sets,
      else Monte Carlo with 100,000; an int >= the number of label sets or ``np.inf`` ->
      exact; a smaller int -> Monte Carlo ``(k + 1) / (B + 1)``.
    confidence_level: None -> no CI (simulation studies: the p-value only).
    atol: tie tolerance on the statistic's scale (default 1e-9 x mean |d(j)|); null values
      within it of the observed one count as reaching it.
    """
    check_alternative(alternative)
    check_statistic(statistic)
    pol, dr = _as_design(policy, draws)
    n = pol.size
    if n < 2:
        raise InputError(f"{n} seed: the test needs >= 2 seeds", column="seed",
                         fix="replay the policy and its draws for more seeds")
    level = None if confidence_level is None else check_level(
        confidence_level, fix="use e.g. 0.95 (None: no CI)")
    m = np.array([d.size for d in dr], dtype=int)
    vals = [seed_label_values(p, d) for p, d in zip(pol, dr)]
    d_obs = np.array([v[0] for v in vals])
    gen = as_generator(rng)
    if atol is None:
        atol = DEFAULT_RTOL * float(np.mean(np.abs(np.concatenate(vals))))
    tol = float(atol) * n
    t_sum = float(d_obs.sum())
    total = float(np.prod((m + 1).astype(float)))
    # one draw per seed: every relabelling is a sign flip, sum d^2 is fixed and mean/se is
    # increasing in the mean, so the raw engine computes the studentized test exactly
    student = statistic == "studentized" and bool(np.any(m != 1))
    exact = _exactness(n_resamples, exact_enumerable(m, statistic), total,
                       f"exact enumeration asked for {total:.3g} label sets; exact is "
                       f"limited to halves of {MAX_EXACT_HALF}")
    label = "studentized (mean/se) " if statistic == "studentized" else "raw-mean "
    if exact:
        if student:
            n_ge, n_le, null_size = st.exact_counts(vals)
        else:
            n_ge, n_le, null_size = _exact_counts(vals, t_sum, tol)
        b = None
        method = (f"exact {label}within-seed permutation over all {null_size} label sets "
                  + ("(enumerated)" if student else "(meet-in-the-middle)"))
    else:
        b = DEFAULT_MC_RESAMPLES if n_resamples is None else int(n_resamples)
        if student:
            n_ge, n_le = st.mc_counts(vals, b, gen)
        else:
            n_ge, n_le = _mc_counts(vals, t_sum, tol, b, gen, signs=False)
        null_size = b
        method = f"Monte Carlo {label}within-seed permutation, B = {b}, p = (k+1)/(B+1)"
    p_greater, p_less, p_two, p_value = _p_values(n_ge, n_le, null_size, exact, alternative)
    mean = t_sum / n
    zero = DEFAULT_RTOL * max(1e-300, float(np.mean(np.abs(d_obs))))
    n_pos, n_neg, wins = _signs(d_obs, zero, mean, alternative)
    if level is None:
        ci_low, ci_high, ci_method = math.nan, math.nan, "not computed"
    elif student:
        ci_low, ci_high, ci_method = st.inversion_ci(vals, m.astype(float), alternative, level,
                                                     gen)
    else:
        ci_low, ci_high, ci_method = permutation_ci(vals, m.astype(float), alternative, level,
                                                     gen)
    if student:
        min_p = st.min_attainable_p(vals, alternative, b)
    else:
        min_p = min_attainable_p(m, alternative, b, values=vals)
    return RandomisationResult(
        statistic=float(mean), p_value=float(p_value), alternative=alternative, n=n,
        m=tuple(int(x) for x in m), wins=wins, exact=bool(exact), null_size=int(null_size),
        min_p=min_p, design_min_p=min_attainable_p(m, alternative, b), ci_low=ci_low,
        ci_high=ci_high, ci_method=ci_method,
        confidence_level=math.nan if level is None else level,
        p_greater=float(p_greater), p_less=float(p_less), p_two_sided=float(p_two),
        method=method, n_resamples=b, atol=float(atol), n_positive=n_pos, n_negative=n_neg,
        n_zero=n - n_pos - n_neg,
        test=("studentized within-seed permutation" if statistic == "studentized"
              else PERMUTATION),
        statistic_name=statistic, t_statistic=st.t_statistic(d_obs),
        null_hypothesis=NULL_TESTED[statistic], _d=d_obs.copy(), _vals=tuple(vals))
