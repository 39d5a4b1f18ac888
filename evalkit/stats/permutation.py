"""Within-seed permutation test: is the policy run exchangeable with its seed's random draws?

Design: seed s has one policy run and ``m_s >= 1`` matched-random draws.  The statistic is
``T = mean_s d_s`` with ``d_s = mean(draws_s) - policy_s`` (positive favours the policy).
Under the design's own null the policy run is one more random placement, so every one of
the seed's ``m_s + 1`` runs is equally likely to carry the label "policy", independently
per seed.  Relabelling run j of seed s as the policy gives

    d_s(j) = (S_s - (m_s + 1) v_sj) / m_s,      S_s = sum of the seed's m_s + 1 values,

so the null distribution of ``sum_s d_s`` is a sum of independent discrete uniforms.  It is
enumerated exactly with meet-in-the-middle (the seeds split in two halves of balanced label
counts; one half's sums are sorted and the other's are counted against it), or sampled by
Monte Carlo with ``p = (k + 1) / (B + 1)`` beyond :data:`MAX_EXACT_HALF`.  With ``m_s = 1``
for every seed the test *is* the paired sign-flip test.

Unlike the sign-flip test on averaged draws it does not assume ``d_s`` symmetric: with
``m_s >= 2`` the average of m draws minus one run is skewed whenever V is, and the
sign-flip test then over-rejects.

Confidence interval for a shift delta (policy = random placement improved by delta):
shifting the policy value by delta moves the observed statistic by ``-delta`` and a
relabelled one by ``delta * c(L)``, ``c(L) = mean_s(-1 if the label is the policy's else
1/m_s)``.  Each label set L therefore flips from "at least as extreme" to "not" at one
threshold ``delta_L = (T - T_L) / (1 + c(L))``, and the bounds are order statistics of
those thresholds — no root finding (all label sets when enumerable, else Monte Carlo).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import (ResultMixin, as_generator, check_alternative,
                                    check_n_resamples)

MAX_EXACT_HALF = 1 << 21        # label sets per half: exact up to ~4e12 label sets in all
EXACT_CI_MAX = 1 << 17          # CI from every label set up to here, Monte Carlo beyond
CI_MC_SETS = 20_000
DEFAULT_MC_RESAMPLES = 100_000
DEFAULT_RTOL = 1e-9
_CHUNK = 1 << 20


STATISTICS = ("studentized", "mean")
NULL_TESTED = {
    "studentized": ("the policy's mean V equals its draws' mean V (exact when the policy run "
                    "is exchangeable with its draws; approximate, asymptotically valid, when "
                    "its run-to-run spread differs from a draw's)"),
    "mean": ("the policy run is exchangeable with its seed's draws (looks like one more "
             "random placement); not a test of equal means when the policy's spread differs "
             "from a draw's"),
}
CI_MODEL = ("additive shift: policy V + delta is exchangeable with its seed's draws, the same "
            "delta in every seed")


def check_statistic(statistic: str) -> str:
    if statistic not in STATISTICS:
        raise InputError(f"unknown permutation statistic {statistic!r}", column="statistic",
                         fix="use 'studentized' (mean/se, the default) or 'mean' (raw mean)")
    return statistic


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


def min_attainable_p(m, alternative: str = "greater", n_resamples: int | None = None,
                     values=None) -> float:
    """Smallest p the test can return.

    m: (n,) draws per seed.  Without ``values`` this is ``prod 1/(m_s + 1)`` one-sided (the
    design's limit).  With ``values`` (list of (m_s + 1,) label values ``d_s(j)``) seeds
    whose labels tie count fully: a seed whose runs all have the same V (d = 0) cannot
    move the statistic and contributes factor 1 — the limit the data can actually reach.
    """
    check_alternative(alternative)
    m = np.asarray(m, dtype=int).reshape(-1)
    if values is None:
        logp = -float(np.sum(np.log(m + 1.0)))
        p_g = p_l = math.exp(logp)
    else:
        lg = ll = 0.0
        for vals in values:
            vals = np.asarray(vals, dtype=float)
            tol = DEFAULT_RTOL * max(1.0, float(np.max(np.abs(vals))))
            lg += math.log(np.count_nonzero(vals >= vals.max() - tol) / vals.size)
            ll += math.log(np.count_nonzero(vals <= vals.min() + tol) / vals.size)
        p_g, p_l = math.exp(lg), math.exp(ll)
    p = {"greater": p_g, "less": p_l, "two-sided": 2.0 * min(p_g, p_l)}[alternative]
    if n_resamples is not None:
        p = max(p, (2.0 if alternative == "two-sided" else 1.0) / (int(n_resamples) + 1))
    return min(1.0, p)


def seeds_needed(m: int, alpha: float = 0.05, alternative: str = "two-sided") -> int:
    """Fewest seeds with ``m`` draws each at which the test can reach ``p <= alpha``."""
    check_alternative(alternative)
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must lie in (0, 1), got {alpha}", column="alpha",
                         fix="use e.g. 0.05")
    if int(m) < 1:
        raise InputError(f"m = {m} draws per seed; need >= 1", column="draws",
                         fix="replay >= 1 matched-random draw per seed")
    factor = 2.0 if alternative == "two-sided" else 1.0
    n = max(1, math.ceil(math.log(factor / alpha) / math.log(int(m) + 1) - 1e-12))
    while factor * (int(m) + 1.0) ** (-n) > alpha:
        n += 1
    return n


def _split(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of two seed halves with balanced products of label counts (greedy)."""
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
        from evalkit.stats.studentized import enumerable

        return enumerable(m)
    sizes = np.asarray(m, dtype=float).reshape(-1) + 1.0
    ia, ib = _split(sizes)
    return max(float(np.prod(sizes[ia])), float(np.prod(sizes[ib]))) <= MAX_EXACT_HALF


def _all_sums(vals: list[np.ndarray]) -> np.ndarray:
    """Sums over every label set of these seeds: (prod sizes,)."""
    sums = np.zeros(1)
    for v in vals:
        sums = (sums[:, None] + v[None, :]).reshape(-1)
    return sums


def _exact_counts(vals, t_sum, tol) -> tuple[int, int, int]:
    sizes = np.array([v.size for v in vals], dtype=float)
    ia, ib = _split(sizes)
    left = np.sort(_all_sums([vals[i] for i in ia]))
    right = np.sort(_all_sums([vals[i] for i in ib]))
    n_ge = n_le = 0
    step = max(1, _CHUNK // 4)
    for i in range(0, left.size, step):
        a = left[i:i + step]
        n_ge += int(right.size * a.size - np.searchsorted(right, (t_sum - tol) - a, "left").sum())
        n_le += int(np.searchsorted(right, (t_sum + tol) - a, "right").sum())
    return n_ge, n_le, left.size * right.size


def _random_labels(rng, rows: int, sizes: np.ndarray) -> np.ndarray:
    """(rows, n) int: a uniformly random label per seed."""
    return np.floor(rng.random((rows, sizes.size)) * sizes).astype(np.int64)


def _mc_counts(vals, t_sum, tol, b, rng) -> tuple[int, int]:
    sizes = np.array([v.size for v in vals])
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    flat = np.concatenate(vals)
    rows = max(1, _CHUNK // sizes.size)
    n_ge = n_le = done = 0
    while done < b:
        c = min(rows, b - done)
        sums = flat[_random_labels(rng, c, sizes) + offsets].sum(axis=1)
        n_ge += int(np.count_nonzero(sums >= t_sum - tol))
        n_le += int(np.count_nonzero(sums <= t_sum + tol))
        done += c
    return n_ge, n_le


def _label_sets(sizes: np.ndarray, rng, total: float):
    """(L, n) label sets for the CI: all of them if few, else the identity + random ones."""
    if total <= EXACT_CI_MAX:
        grids = np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")
        return np.column_stack([g.reshape(-1) for g in grids]), True
    labels = np.vstack((np.zeros((1, sizes.size), dtype=np.int64),
                        _random_labels(rng, CI_MC_SETS, sizes)))
    return labels, False


def _inversion_ci(vals, m, alternative, level, rng):
    sizes = np.array([v.size for v in vals])
    n = sizes.size
    labels, exact = _label_sets(sizes, rng, float(np.prod(sizes.astype(float))))
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    flat = np.concatenate(vals)
    t = flat[offsets].sum() / n                                    # observed statistic
    t_l = flat[labels + offsets].sum(axis=1) / n
    c = np.where(labels == 0, -1.0, 1.0 / m[None, :]).mean(axis=1)
    slope = 1.0 + c                                                # >= 0; 0 only for identity
    with np.errstate(divide="ignore", invalid="ignore"):
        thr = np.where(slope > 1e-12, (t - t_l) / slope, -np.inf)  # identity: always counts
    total = thr.size
    tail = (1.0 - level) / (2.0 if alternative == "two-sided" else 1.0)
    k = int(math.floor(tail * total + 1e-9))
    low, high = -math.inf, math.inf
    if alternative in ("greater", "two-sided") and k > 0:
        # p_greater(delta) = share of L with delta >= thr_L; lower bound: smallest delta
        # whose p exceeds the tail
        low = float(np.partition(thr, k)[k])
    if alternative in ("less", "two-sided") and k > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            thr_up = np.where(slope > 1e-12, (t - t_l) / slope, np.inf)
        j = total - 1 - k
        high = float(np.partition(thr_up, j)[j])
    how = (f"all {total} label sets" if exact else
           f"Monte Carlo: {CI_MC_SETS} random label sets + identity")
    return low, high, f"inversion of the within-seed permutation test under a shift ({how})"


@dataclass(frozen=True)
class PermutationResult(ResultMixin):
    """Within-seed permutation test of the gain mean_s (mean(draws_s) - policy_s).

    ``statistic`` is always that mean gain (the estimate); the test statistic is
    ``statistic_name``: ``"studentized"`` (mean/se, ``t_statistic``) or ``"mean"`` (the raw
    mean).  ``null_hypothesis`` says in words what a small p rejects; ``ci_model`` the shift
    model the CI inverts.  Fields mirror :class:`~evalkit.stats.signflip.SignFlipResult`: ``p_value`` for
    ``alternative``; ``p_greater``/``p_less``/``p_two_sided`` (two-sided = min(1, 2 min)).
    ``null_size``: label sets enumerated (exact) or B (Monte Carlo).  ``min_p``: smallest p
    these data can reach (tied labels counted, B included).  ``m``: draws per seed.
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
    test: str = "within-seed permutation"
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
        """Sorted null values of the decision's statistic (:attr:`null_statistic`: mean/se,
        or the mean G) for plotting (all label sets or ``max_points`` random)."""
        vals = list(self._vals)
        if self.null_statistic == "studentized":
            from evalkit.stats.studentized import null_t
            return null_t(vals, max_points, seed)
        sizes = np.array([v.size for v in vals])
        if float(np.prod(sizes.astype(float))) <= max_points:
            return np.sort(_all_sums(vals)) / sizes.size
        rng = np.random.default_rng(seed)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        flat = np.concatenate(vals)
        out = flat[_random_labels(rng, max_points, sizes) + offsets].sum(axis=1)
        return np.sort(out) / sizes.size


def within_seed_permutation_test(policy, draws, alternative: str = "greater",
                                 n_resamples=None, rng=None,
                                 confidence_level: float | None = 0.95,
                                 atol: float | None = None,
                                 statistic: str = "studentized") -> PermutationResult:
    """Within-seed permutation test of the policy against its matched-random draws.

    statistic: ``"studentized"`` (default, mean/se recomputed for every label set: tests
      equal means, :mod:`evalkit.stats.studentized`) or ``"mean"`` (raw mean: tests
      "the policy run is exchangeable with its draws").  With one draw per seed both are
      the sign-flip test.
    policy: (n,) V of each seed's policy run; draws: n sequences, (m_s,) V of its draws.
    n_resamples: None -> exact when both meet-in-the-middle halves hold <= 2^21 label sets,
      else Monte Carlo with 100,000; an int >= the number of label sets or ``np.inf`` ->
      exact; a smaller int -> Monte Carlo ``(k + 1) / (B + 1)``.
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
    if confidence_level is not None and not 0.0 < confidence_level < 1.0:
        raise InputError(f"confidence_level must lie in (0, 1), got {confidence_level}",
                         column="confidence_level", fix="use e.g. 0.95 (None: no CI)")
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
    enumerable = exact_enumerable(m, statistic)
    if n_resamples is None:
        exact = enumerable
    else:
        check_n_resamples(n_resamples)
        exact = n_resamples == np.inf or float(n_resamples) >= total
        if exact and not enumerable:
            raise InputError(f"exact enumeration asked for {total:.3g} label sets; exact is "
                             f"limited to halves of {MAX_EXACT_HALF}", column="n_resamples",
                             fix="pass a finite n_resamples for a Monte Carlo p-value")
    if student:
        from evalkit.stats import studentized as st
    label = ("studentized (mean/se) " if statistic == "studentized" else "raw-mean ")
    if exact:
        if student:
            n_ge, n_le, null_size, _ = st.exact_counts(vals)
        else:
            n_ge, n_le, null_size = _exact_counts(vals, t_sum, tol)
        p_greater, p_less = n_ge / null_size, n_le / null_size
        b = None
        method = (f"exact {label}within-seed permutation over all {null_size} label sets "
                  + ("(enumerated)" if student else "(meet-in-the-middle)"))
    else:
        b = DEFAULT_MC_RESAMPLES if n_resamples is None else int(n_resamples)
        if student:
            n_ge, n_le = st.mc_counts(vals, b, gen)
        else:
            n_ge, n_le = _mc_counts(vals, t_sum, tol, b, gen)
        null_size = b
        p_greater, p_less = (n_ge + 1) / (b + 1), (n_le + 1) / (b + 1)
        method = f"Monte Carlo {label}within-seed permutation, B = {b}, p = (k+1)/(B+1)"
    p_two = min(1.0, 2.0 * min(p_greater, p_less))
    p_value = {"greater": p_greater, "less": p_less, "two-sided": p_two}[alternative]
    mean = t_sum / n
    zero_tol = DEFAULT_RTOL * max(1e-300, float(np.mean(np.abs(d_obs))))
    n_pos = int(np.count_nonzero(d_obs > zero_tol))
    n_neg = int(np.count_nonzero(d_obs < -zero_tol))
    wins = {"greater": n_pos, "less": n_neg,
            "two-sided": n_pos if mean >= 0 else n_neg}[alternative]
    if confidence_level is None:          # simulation studies: the p-value only
        ci_low, ci_high, ci_method = math.nan, math.nan, "not computed"
    elif student:
        ci_low, ci_high, ci_method = st.inversion_ci(vals, m.astype(float), alternative,
                                                     confidence_level, gen)
    else:
        ci_low, ci_high, ci_method = _inversion_ci(vals, m.astype(float), alternative,
                                                   confidence_level, gen)
    if student:
        min_p = st.min_attainable_p(vals, alternative, b)
    else:
        min_p = min_attainable_p(m, alternative, b, values=vals)
    from evalkit.stats.studentized import t_statistic
    return PermutationResult(
        statistic=float(mean), p_value=float(p_value), alternative=alternative, n=n,
        m=tuple(int(x) for x in m), wins=wins, exact=bool(exact), null_size=int(null_size),
        min_p=min_p,
        design_min_p=min_attainable_p(m, alternative, b), ci_low=ci_low, ci_high=ci_high,
        ci_method=ci_method,
        confidence_level=math.nan if confidence_level is None else float(confidence_level),
        p_greater=float(p_greater), p_less=float(p_less), p_two_sided=float(p_two),
        method=method, n_resamples=b, atol=float(atol), n_positive=n_pos, n_negative=n_neg,
        n_zero=n - n_pos - n_neg,
        test=("studentized within-seed permutation" if statistic == "studentized"
              else "within-seed permutation"),
        statistic_name=statistic, t_statistic=t_statistic(d_obs),
        null_hypothesis=NULL_TESTED[statistic], _d=d_obs.copy(), _vals=tuple(vals))
