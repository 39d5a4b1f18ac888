"""Exact uniform sampling of merge schedules from the feasible class F_K.

A schedule is K window starts ``t0 <= s_1 < ... < s_K <= t1 - D`` with consecutive start gaps
in ``[a, b]``, where ``a = max(min_gap, D)`` (windows of length D must not overlap, so a gap
below D is impossible even if the corridor allows it) and ``b = max_gap`` (may be ``inf``).
The first window is not constrained by the span start, nor the last by the span end, beyond
lying inside the span.

Coordinates: ``x = s_1 - t0 >= 0`` and slack gaps ``y_i = s_{i+1} - s_i - a`` in ``[0, w]``,
``w = b - a``, with ``x + sum(y) <= L = t1 - D - t0 - (K-1) a``.  F_K is this polytope and
"uniform" means uniform (Lebesgue) on it.  Three exact samplers, chosen by their exactly
computed acceptance rate:

* ``reject-box``: x ~ U[0, L], y ~ U[0, w]^m, keep if ``x + sum(y) <= L`` (good when the
  span is loose, L >> m w);
* ``reject-simplex``: (x, y, slack) uniform on the simplex of total L (sorted uniforms), keep
  if every ``y_i <= w`` (good when the gap cap rarely binds);
* ``sequential``: draw y_1, y_2, ... from their exact conditional laws by inverting the CDF,
  using the exact volume ``f_j(v) = sum_l (-1)^l C(j,l) (v-l)_+^(j+1) / (j+1)!`` (units of w),
  then x uniform on what is left.  Used when both rejection rates are low (tight spans, large
  K); float64 inclusion-exclusion limits it to ``K - 1 <= 60``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_generator

MIN_ACCEPTANCE = 0.02
MAX_SEQUENTIAL_M = 60
METHODS = ("auto", "reject-box", "reject-simplex", "sequential")


@dataclass(frozen=True)
class FeasibleClass(ResultMixin):
    """The feasible class F_K in the coordinates above, with both rejection rates."""

    k: int
    t0: float
    last_start: float          # t1 - D
    duration: float
    gap_low: float             # a = max(min_gap, D)
    gap_high: float            # b (may be inf)
    slack: float               # L
    acceptance_box: float
    acceptance_simplex: float

    @property
    def m(self) -> int:
        """Number of gaps with freedom (0 when K <= 1 or the gap is fixed)."""
        return 0 if self.k <= 1 or self.gap_high == self.gap_low else self.k - 1


def _unit_volume_exact(m: int, u: Fraction) -> Fraction:
    """f_m(u) = integral over [0,1]^m of (u - sum y)_+, exactly (rational arithmetic)."""
    total = Fraction(0)
    for i in range(0, min(m, math.floor(u)) + 1):
        total += (-1) ** i * math.comb(m, i) * (u - i) ** (m + 1)
    return total / math.factorial(m + 1)


def feasible_class(k, span, duration, min_gap, max_gap) -> FeasibleClass:
    """Validate the constraints and describe F_K; infeasible constraints raise InputError."""
    try:
        t0, t1 = (float(v) for v in span)
    except (TypeError, ValueError) as exc:
        raise InputError("span must be a pair (t0, t1) of seconds", column="span",
                         fix="pass the observed span, e.g. (t_first_request, t_end)") from exc
    try:
        k, duration = int(k), float(duration)
        min_gap, max_gap = float(min_gap), float(max_gap)
    except (TypeError, ValueError) as exc:
        raise InputError(f"K, D and the corridor gaps must be numbers, got K = {k!r}, D = "
                         f"{duration!r}, gaps ({min_gap!r}, {max_gap!r})", column="k",
                         fix="pass K as an integer and seconds as numbers") from exc
    if k < 0:
        raise InputError(f"K = {k} is negative", column="k", fix="K counts merge windows")
    if not (math.isfinite(t0) and math.isfinite(t1) and math.isfinite(duration)
            and math.isfinite(min_gap)) or math.isnan(max_gap):
        raise InputError("span, duration and min_gap must be finite (max_gap may be inf)",
                         column="span", fix="check the run's horizon and corridor")
    if duration <= 0:
        raise InputError(f"merge duration D = {duration} must be positive", column="duration",
                         fix="use the run's merge_duration_s")
    if min_gap < 0 or max_gap < min_gap:
        raise InputError(f"corridor gaps must satisfy 0 <= min_gap <= max_gap, got "
                         f"[{min_gap}, {max_gap}]", column="corridor",
                         fix="check min_gap_s/max_gap_s (or H_min/H_max and the step time)")
    a = max(min_gap, duration)
    if k >= 2 and max_gap < a:
        raise InputError(f"max_gap = {max_gap} s is shorter than the merge duration D = "
                         f"{duration} s: consecutive windows would overlap", column="corridor",
                         fix="raise max_gap_s or check D")
    last_start = t1 - duration
    if k >= 1 and last_start < t0:
        raise InputError(f"the span [{t0}, {t1}] is shorter than one window (D = {duration} s)",
                         column="span", fix="a schedule needs a span of at least D seconds")
    slack = last_start - t0 - max(k - 1, 0) * a
    if k >= 2 and slack < 0:
        need = (k - 1) * a + duration
        raise InputError(f"infeasible corridor: K = {k} windows with start gaps >= {a} s need "
                         f"at least {need} s but the span is {t1 - t0} s", column="k",
                         fix="K, the span and min_gap are inconsistent; check K counts only "
                             "observed windows")
    m = 0 if k <= 1 or max_gap == a else k - 1
    w = max_gap - a
    if m == 0 or slack == 0:
        acc_box = acc_simplex = 1.0
    elif math.isinf(w):
        acc_box, acc_simplex = 0.0, 1.0
    else:
        u = Fraction(slack) / Fraction(w)
        vol = _unit_volume_exact(m, u)                     # polytope volume / w^(m+1)
        acc_box = float(vol / u)                           # / (L w^m)
        acc_simplex = float(vol * math.factorial(m + 1) / u ** (m + 1))
    return FeasibleClass(k, t0, last_start, duration, a, max_gap, slack, acc_box, acc_simplex)


def _rejection(sample_batch, n: int, acceptance: float) -> np.ndarray:
    out, have = [], 0
    while have < n:
        batch = int(min(5_000_000, math.ceil((n - have) / max(acceptance, 1e-6) * 1.1) + 64))
        got = sample_batch(batch)
        out.append(got)
        have += got.shape[0]
    return np.concatenate(out)[:n]


def _box_batch(fc: FeasibleClass, m: int, rng):
    w, L = fc.gap_high - fc.gap_low, fc.slack

    def draw(batch):
        x = rng.uniform(0.0, L, size=batch)
        y = rng.uniform(0.0, w, size=(batch, m))
        keep = x + y.sum(axis=1) <= L
        return np.column_stack((x[keep], y[keep]))
    return draw


def _simplex_batch(fc: FeasibleClass, m: int, rng):
    w, L = fc.gap_high - fc.gap_low, fc.slack

    def draw(batch):
        # m + 2 uniform spacings of [0, L] (x, y_1..y_m, trailing slack): uniform on the simplex
        cuts = np.sort(rng.uniform(0.0, L, size=(batch, m + 1)), axis=1)
        parts = np.diff(cuts, axis=1, prepend=0.0)          # (batch, m + 1): x, y_1..y_m
        keep = np.all(parts[:, 1:] <= w, axis=1)
        return parts[keep]
    return draw


def _g_coeffs(j: int) -> np.ndarray:
    """Coefficients of g_j(v) = sum_l c_l (v - l)_+^(j+2), the integral of f_j."""
    return np.array([(-1) ** l * math.comb(j, l) / math.factorial(j + 2) for l in range(j + 1)])


def _g_and_slope(v: np.ndarray, coeff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g_j(v) and its derivative f_j(v): (n,) -> (n,), (n,); units of w."""
    power = coeff.size + 1
    z = np.clip(v[:, None] - np.arange(coeff.size), 0.0, None)
    zp = z ** (power - 1)
    return (zp * z) @ coeff, zp @ (coeff * power)


def _sequential(fc: FeasibleClass, m: int, n: int, rng) -> np.ndarray:
    if m > MAX_SEQUENTIAL_M:
        raise InputError(f"K = {fc.k} with a tight corridor and span cannot be sampled exactly "
                         f"(both rejection rates below {MIN_ACCEPTANCE}; the sequential "
                         f"sampler is limited to K <= {MAX_SEQUENTIAL_M + 1})", column="k",
                         fix="widen the corridor, or split the span")
    w = fc.gap_high - fc.gap_low
    s = np.full(n, fc.slack / w)                     # remaining budget in units of w
    ys = np.empty((n, m))
    for i in range(m):
        coeff = _g_coeffs(m - i - 1)
        lo, hi = s - np.minimum(1.0, s), s.copy()   # bracket for v = s - y
        g_lo, _ = _g_and_slope(lo, coeff)
        g_hi, _ = _g_and_slope(hi, coeff)
        target = g_hi - rng.uniform(size=n) * (g_hi - g_lo)
        v = 0.5 * (lo + hi)
        # Newton on the increasing g_j, safeguarded by bisection inside the bracket; stop at
        # 1e-10 w (float64 inclusion-exclusion noise in g_j is about 1e-12)
        for _ in range(60):
            g, slope = _g_and_slope(v, coeff)
            below = g < target
            lo = np.where(below, v, lo)
            hi = np.where(below, hi, v)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = (target - g) / slope
            newton = v + step
            ok = np.isfinite(newton) & (newton >= lo) & (newton <= hi)
            v_new = np.where(ok, newton, 0.5 * (lo + hi))
            done = np.max(np.abs(v_new - v)) <= 1e-10 * max(1.0, float(np.max(s)))
            v = v_new
            if done:
                break
        y = np.clip(s - v, 0.0, np.minimum(1.0, s))
        ys[:, i] = y
        s = s - y
    x = rng.uniform(size=n) * s
    return np.column_stack((x, ys)) * w


def sample_schedules(k, span, duration, min_gap, max_gap, n, rng=None,
                     method: str = "auto", edges: bool = True,
                     train_start: float | None = None,
                     run_end: float | None = None) -> np.ndarray:
    """n schedules drawn exactly uniformly from F_K: (n, k) sorted window START times.

    span = (t0, t1): windows ``[s, s + duration]`` lie inside it; consecutive start gaps lie
    in ``[max(min_gap, duration), max_gap]``.  rng: Generator or int seed (None -> 0).
    edges (default; needs a finite max_gap): F_K includes the corridor's edges — the first
    start lies ``[min_gap, max_gap]`` after ``train_start`` (default: the span start) and the
    last start less than ``max_gap`` before the run's last feasible start ``run_end - D``
    (``run_end`` defaults to t1; :mod:`evalkit.stats.schedules_edges`).  ``edges=False``: gaps only (the class without
    edges, kept for comparison).
    method: "auto" picks the exact sampler with the best acceptance (see module doc).
    """
    if edges and math.isfinite(float(max_gap)):
        from evalkit.stats.schedules_edges import edge_class, sample_edge_schedules

        if method not in ("auto", "reject-box", "sequential"):
            raise InputError(f"unknown sampling method {method!r} for F_K with edges",
                             column="method", fix="use 'auto', 'reject-box' or 'sequential'")
        ec = edge_class(k, span, duration, min_gap, max_gap, train_start, run_end)
        if int(n) < 0:
            raise InputError(f"n = {n} must be >= 0", column="n", fix="ask for some schedules")
        return sample_edge_schedules(ec, int(n), as_generator(rng), method)
    if edges and train_start is not None:          # infinite max_gap: only the leading edge
        span = (max(float(span[0]), float(train_start) + float(min_gap)), float(span[1]))
    if method not in METHODS:
        raise InputError(f"unknown sampling method {method!r}", column="method",
                         fix=f"use one of {METHODS}")
    fc = feasible_class(k, span, duration, min_gap, max_gap)
    n = int(n)
    if n < 0:
        raise InputError(f"n = {n} must be >= 0", column="n", fix="ask for some schedules")
    gen = as_generator(rng)
    if fc.k == 0 or n == 0:
        return np.empty((n, fc.k))
    m = fc.m
    if m == 0 or fc.slack == 0:
        x = gen.uniform(0.0, fc.slack, size=n) if fc.slack > 0 else np.zeros(n)
        coords = np.column_stack((x, np.zeros((n, fc.k - 1))))
    else:
        if method == "auto":
            best = max(fc.acceptance_box, fc.acceptance_simplex)
            if best < MIN_ACCEPTANCE:
                method = "sequential"
            elif fc.acceptance_box >= fc.acceptance_simplex:
                method = "reject-box"
            else:
                method = "reject-simplex"
        if method == "reject-box":
            if math.isinf(fc.gap_high):
                raise InputError("reject-box needs a finite max_gap", column="method",
                                 fix="use method='auto'")
            coords = _rejection(_box_batch(fc, m, gen), n, fc.acceptance_box)
        elif method == "reject-simplex":
            coords = _rejection(_simplex_batch(fc, m, gen), n, fc.acceptance_simplex)
        else:
            if math.isinf(fc.gap_high):
                raise InputError("sequential needs a finite max_gap", column="method",
                                 fix="use method='auto'")
            coords = _sequential(fc, m, n, gen)
    gaps = fc.gap_low + coords[:, 1:]
    starts = fc.t0 + np.cumsum(np.column_stack((coords[:, :1], gaps)), axis=1)
    # cumulative rounding may overshoot the last feasible start by an ulp
    return np.minimum(starts, fc.last_start)
