"""Exact uniform sampling of merge schedules from the feasible class F_K.

A schedule is K window starts ``s_1 < ... < s_K`` (windows ``[s, s + D]`` inside the span
``[t0, t1]``) with consecutive gaps in ``[a, b]``, ``a = max(min_gap, D)`` (windows must not
overlap, so a gap below D is impossible even if the corridor allows it), ``b = max_gap``.
A corridor-bound trainer that starts training at ``t_train`` and runs until ``t_end`` adds
the corridor's **edges** (the default; needs a finite ``b``):

* the leading edge: ``s_1 - t_train`` in ``[min_gap, max_gap]`` (no merge before H_min
  steps, a forced merge at H_max);
* the trailing edge: ``(t_end - D) - s_K < max_gap`` -- otherwise a forced merge would still
  have fitted before the end and K would differ.

In coordinates ``x = s_1 - first_lo`` in ``[0, c]`` and slack gaps ``y_i = s_{i+1} - s_i - a``
in ``[0, w]``, ``w = b - a``, F_K is one polytope ``{L_lo <= x + sum(y) <= L_hi}``.  Without
edges ``c = L_hi = L``, the span's slack, and ``L_lo = -inf``.  "Uniform" is Lebesgue on it.
Three exact samplers, chosen by their exactly computed acceptance rates:

* ``reject-box``: x ~ U[0, c], y ~ U[0, w]^m, keep if the sum lies in ``[L_lo, L_hi]``;
* ``reject-simplex`` (without edges; the only one for an infinite ``max_gap``): (x, y,
  slack) uniform on the simplex of total L (sorted uniforms), keep if every ``y_i <= w``;
* ``sequential``: each y_i from its exact conditional law (CDF inversion by bisection;
  volumes by inclusion-exclusion, float64, which limits it to ``K - 1 <= 60``), then x
  uniform on what is left.  Used when the rejection rates are low (tight spans, large K).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_generator

__all__ = ["FeasibleClass", "edge_class", "feasible_class", "sample_class", "sample_schedules"]

MIN_ACCEPTANCE = 0.02
MAX_SEQUENTIAL_M = 60
METHODS = ("auto", "reject-box", "reject-simplex", "sequential")
EDGE_METHODS = ("auto", "reject-box", "sequential")
_MAX_BATCH = 2_000_000


@dataclass(frozen=True)
class FeasibleClass(ResultMixin):
    """F_K: first start in ``[first_lo, first_hi]``, gaps in ``[gap_low, gap_high]``, last
    start in ``[last_lo, last_hi]`` (``last_lo = -inf`` without edges).  ``acceptance``: the
    exact box-rejection rate; ``acceptance_simplex``: the simplex's (without edges only)."""

    k: int
    first_lo: float
    first_hi: float
    gap_low: float
    gap_high: float
    last_lo: float
    last_hi: float
    duration: float
    acceptance: float
    acceptance_simplex: float = 0.0
    edges: bool = True

    @property
    def m(self) -> int:
        """Number of gaps with freedom (0 when K <= 1 or the gap is fixed)."""
        return 0 if self.k <= 1 or self.gap_high == self.gap_low else self.k - 1

    @property
    def t0(self) -> float:
        return self.first_lo

    @property
    def last_start(self) -> float:
        return self.last_hi

    @property
    def slack(self) -> float:
        """L: the span left to the first start and the slack gaps together."""
        return self.last_hi - self.first_lo - max(self.k - 1, 0) * self.gap_low

    @property
    def acceptance_box(self) -> float:
        return self.acceptance

    def coords(self) -> tuple[float, float, float]:
        """(c, L_lo, L_hi): the first start's width and the bounds on ``x + sum(y)``."""
        if not self.edges:
            return self.slack, -math.inf, self.slack
        m = max(self.k - 1, 0)
        return (self.first_hi - self.first_lo,
                self.last_lo - self.first_lo - m * self.gap_low,
                self.last_hi - self.first_lo - m * self.gap_low)


EdgeClass = FeasibleClass


def _f(j: int, p: int, v, exact: bool = False):
    """p-fold integral of the density of a sum of j unit uniforms, evaluated at v.

    p = 1: volume {y in [0,1]^j, sum y <= v}; each further p integrates once more.
    """
    deg = j + p - 1
    if exact:
        tot = Fraction(0)
        for l in range(j + 1):
            z = v - l
            if z > 0:
                tot += (-1) ** l * math.comb(j, l) * z ** deg
        return tot / math.factorial(deg)
    v = np.asarray(v, dtype=float)
    coefs = _signed_binomials(j)
    tot = np.zeros(v.shape)
    top = float(v.max()) if v.size else 0.0
    # a term with l >= every v is exactly 0 (0 ** deg, deg >= 1) and adds nothing
    used = min(j + 1, max(0, math.ceil(top))) if deg >= 1 and math.isfinite(top) else j + 1
    for l in range(used):           # a fixed order: a BLAS dot product's order varies by CPU
        tot += coefs[l] * _int_power(np.maximum(v - float(l), 0.0), deg)
    return tot / math.factorial(deg)


@functools.lru_cache(maxsize=128)
def _signed_binomials(j: int) -> tuple[float, ...]:
    return tuple(float((-1) ** l * math.comb(j, l)) for l in range(j + 1))


def _int_power(z: np.ndarray, k: int) -> np.ndarray:
    """``z ** k`` by squaring: IEEE products round alike on every CPU, while ``np.power``
    takes SIMD paths (AVX-512 against AVX2) that differ in the last bit."""
    out, base = None, z
    while k:
        if k & 1:
            out = base if out is None else out * base
        k >>= 1
        if k:
            base = base * base
    return np.ones_like(z) if out is None else out


def _g(j: int, c, v, p: int, exact: bool = False):
    """Volume-type function of x + sum of j unit uniforms, x ~ [0, c] (c = 0: x = 0)."""
    if c == 0:
        return _f(j, p, v, exact)
    return _f(j, p + 1, v, exact) - _f(j, p + 1, v - c, exact)


def _box_volume(m: int, c: float, lo: float, hi: float, w: float) -> Fraction:
    """Exact volume of the polytope over ``w^(m+1)`` (lo = -inf: no lower bound)."""
    cu, wf = Fraction(c) / Fraction(w), Fraction(w)
    below = 0 if math.isinf(lo) else _g(m, cu, Fraction(lo) / wf, 1, True)
    return _g(m, cu, Fraction(hi) / wf, 1, True) - below


def _span(span) -> tuple[float, float]:
    try:
        t0, t1 = (float(v) for v in span)
    except (TypeError, ValueError) as exc:
        raise InputError("span must be a pair (t0, t1) of seconds", column="span",
                         fix="pass the observed span, e.g. (t_first_request, t_end)") from exc
    return t0, t1


def feasible_class(k, span, duration, min_gap, max_gap) -> FeasibleClass:
    """F_K without edges (gaps only); infeasible constraints raise InputError."""
    t0, t1 = _span(span)
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
        vol = _box_volume(m, slack, -math.inf, slack, w)       # polytope volume / w^(m+1)
        u = Fraction(slack) / Fraction(w)
        acc_box = float(vol / u)                                # / (L w^m)
        acc_simplex = float(vol * math.factorial(m + 1) / u ** (m + 1))
    return FeasibleClass(k, t0, t0 + slack, a, max_gap, -math.inf, last_start, duration,
                         acc_box, acc_simplex, edges=False)


def edge_class(k, span, duration, min_gap, max_gap, train_start=None,
               run_end=None) -> FeasibleClass:
    """F_K with edges; infeasible constraints raise InputError.

    span = (t0, t1): windows lie inside it (the observed span); ``train_start`` (default t0)
    and ``run_end`` (default t1) are where the trainer's corridor starts and ends.
    """
    t0, t1 = _span(span)
    t_end = t1 if run_end is None else float(run_end)
    k, d = int(k), float(duration)
    min_gap, max_gap = float(min_gap), float(max_gap)
    if not math.isfinite(max_gap):
        raise InputError("F_K's edges need a finite max_gap", column="corridor",
                         fix="give max_gap_s (or H_max and the step time)")
    ref = t0 if train_start is None else float(train_start)
    a = max(min_gap, d)
    first_lo, first_hi = max(t0, ref + min_gap), min(ref + max_gap, t1 - d)
    last_lo, last_hi = t_end - d - max_gap, t1 - d
    if k == 0:
        if t_end - d - ref >= max_gap:
            raise InputError(f"K = 0 is infeasible: {t_end - d - ref:g} s without a merge "
                             f"exceed max_gap = {max_gap:g} s", column="k",
                             fix="a corridor-bound trainer must have merged; check K")
        return FeasibleClass(0, first_lo, first_hi, a, max_gap, last_lo, last_hi, d, 1.0)
    if k >= 2 and max_gap < a:
        raise InputError(f"max_gap = {max_gap} s is shorter than the merge duration D = {d} s",
                         column="corridor", fix="raise max_gap_s or check D")
    m = k - 1
    ec = FeasibleClass(k, first_lo, first_hi, a, max_gap, last_lo, last_hi, d, 1.0)
    c, lo_sum, hi_sum = ec.coords()
    w = max_gap - a
    if c < 0 or hi_sum < 0 or lo_sum > c + m * w:
        raise InputError(f"infeasible corridor: no schedule of K = {k} windows (D = {d} s, "
                         f"gaps [{a:g}, {max_gap:g}] s) fits the run [{t0:g}, {t1:g}] s with "
                         "the corridor's edges", column="k",
                         fix="K, the span and the corridor are inconsistent; check K counts "
                             "observed windows and the corridor is the run's")
    if m >= 1 and w > 0:
        vol = _box_volume(m, c, lo_sum, hi_sum, w)
        cu = Fraction(c) / Fraction(w)
        ec = FeasibleClass(k, first_lo, first_hi, a, max_gap, last_lo, last_hi, d,
                           float(vol / cu) if cu > 0 else float(vol))
    return ec


# ------------------------------------------------------------------ samplers: (n, k) coords

def _rejection(draw, n: int, acceptance: float) -> np.ndarray:
    out, have = [], 0
    while have < n:
        got = draw(int(min(_MAX_BATCH, math.ceil((n - have) / max(acceptance, 1e-6) * 1.1)
                           + 64)))
        out.append(got)
        have += got.shape[0]
    return np.concatenate(out)[:n]


def _box(fc: FeasibleClass, n: int, rng) -> np.ndarray:
    m, w = fc.k - 1, fc.gap_high - fc.gap_low
    c, lo, hi = fc.coords()

    def draw(batch):
        x = rng.uniform(0.0, c, size=batch)
        y = rng.uniform(0.0, w, size=(batch, m))
        tot = x + y.sum(axis=1)
        keep = (tot >= lo) & (tot <= hi)
        return np.column_stack((x[keep], y[keep]))
    return _rejection(draw, n, fc.acceptance)


def _simplex(fc: FeasibleClass, n: int, rng) -> np.ndarray:
    m, w, total = fc.k - 1, fc.gap_high - fc.gap_low, fc.slack

    def draw(batch):
        # m + 2 uniform spacings of [0, L] (x, y_1..y_m, trailing slack): uniform on the simplex
        cuts = np.sort(rng.uniform(0.0, total, size=(batch, m + 1)), axis=1)
        parts = np.diff(cuts, axis=1, prepend=0.0)          # (batch, m + 1): x, y_1..y_m
        return parts[np.all(parts[:, 1:] <= w, axis=1)]
    return _rejection(draw, n, fc.acceptance_simplex)


def _bisect_cdf(cdf, target, n):
    lo, hi = np.zeros(n), np.ones(n)
    for _ in range(56):
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < target
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _sequential(fc: FeasibleClass, n: int, rng) -> np.ndarray:
    m = fc.k - 1
    if m > MAX_SEQUENTIAL_M:
        raise InputError(f"K = {fc.k} with a tight corridor cannot be sampled exactly (box "
                         f"acceptance {fc.acceptance:.2g}; the sequential sampler is limited "
                         f"to K <= {MAX_SEQUENTIAL_M + 1})", column="k",
                         fix="widen the corridor, or split the run")
    w = fc.gap_high - fc.gap_low
    c_s, lo_sum, hi_sum = fc.coords()
    c = c_s / w
    c = 0.0 if c < 1e-12 else c
    lo, hi = np.full(n, lo_sum / w), np.full(n, hi_sum / w)
    ys = np.empty((n, m))
    for i in range(m):
        j = m - i - 1                          # y's still free after this one

        def h(v, j=j):
            return _g(j, c, v, 2)

        # h at the bounds does not move with t: computed once, not at every bisection step
        def cdf_raw(t, lo=lo, hi=hi, h_lo=h(lo), h_hi=h(hi)):
            h_hi_t, h_lo_t = h(np.stack((hi - t, lo - t)))
            return (h_hi - h_hi_t) - (h_lo - h_lo_t)

        target = rng.uniform(size=n) * cdf_raw(np.ones(n))
        y = _bisect_cdf(cdf_raw, target, n)
        ys[:, i] = y
        lo, hi = lo - y, hi - y
    if c > 0:
        x_lo, x_hi = np.clip(lo, 0.0, c), np.clip(hi, 0.0, c)
        x = x_lo + rng.uniform(size=n) * (x_hi - x_lo)
    else:
        x = np.zeros(n)
    return np.column_stack((x * w, ys * w))


def _forced(fc: FeasibleClass, n: int) -> np.ndarray:
    """(n, k) copies of the one schedule of a class of zero volume, where the edges meet at
    a corner: every gap at its minimum from the earliest start, or at its maximum from the
    latest.  Any other zero-volume class is a slice with no uniform distribution."""
    c, lo_sum, hi_sum = fc.coords()
    steps = np.arange(fc.k, dtype=float)
    if hi_sum <= 0:
        return np.tile(fc.first_lo + steps * fc.gap_low, (n, 1))
    if lo_sum >= c + (fc.k - 1) * (fc.gap_high - fc.gap_low):
        return np.tile(fc.first_hi + steps * fc.gap_high, (n, 1))
    raise InputError(f"the corridor leaves no freedom: K = {fc.k} windows fit only on a "
                     "set of zero volume, which has no uniform distribution", column="k",
                     fix="check K and the corridor (a forced schedule cannot show "
                         "placement gain), or widen the corridor")


def _method(fc: FeasibleClass, method: str) -> str:
    if method != "auto":
        return method
    if fc.edges:
        return "reject-box" if fc.acceptance >= MIN_ACCEPTANCE else "sequential"
    if max(fc.acceptance, fc.acceptance_simplex) < MIN_ACCEPTANCE:
        return "sequential"
    return "reject-box" if fc.acceptance >= fc.acceptance_simplex else "reject-simplex"


def _free_coords(fc: FeasibleClass, n: int, rng, method: str) -> np.ndarray:
    """(n, k) coords (x, y) of a class with free gaps."""
    method = _method(fc, method)
    if method == "reject-box" and fc.edges and fc.first_hi == fc.first_lo:
        method = "sequential"
    if method in ("reject-box", "sequential") and math.isinf(fc.gap_high):
        raise InputError(f"{method} needs a finite max_gap", column="method",
                         fix="use method='auto'")
    if method == "reject-box":
        return _box(fc, n, rng)
    if method == "sequential":
        return _sequential(fc, n, rng)
    if method == "reject-simplex" and not fc.edges:
        return _simplex(fc, n, rng)
    raise InputError(f"unknown sampling method {method!r}"
                     + (" for F_K with edges" if fc.edges else ""), column="method",
                     fix="use " + ", ".join(repr(x) for x in (EDGE_METHODS if fc.edges
                                                              else METHODS)))


def sample_class(fc: FeasibleClass, n: int, rng, method: str = "auto") -> np.ndarray:
    """(n, k) sorted window starts drawn exactly uniformly from ``fc``."""
    if fc.k == 0 or n == 0:
        return np.empty((n, fc.k))
    w = fc.gap_high - fc.gap_low
    c, lo_sum, hi_sum = fc.coords()
    if not fc.edges and (fc.m == 0 or fc.slack == 0):   # only the first start is free
        x = rng.uniform(0.0, fc.slack, size=n) if fc.slack > 0 else np.zeros(n)
        coords = np.column_stack((x, np.zeros((n, fc.k - 1))))
    elif fc.k == 1:
        lo, hi = max(fc.first_lo, fc.last_lo), min(fc.first_hi, fc.last_hi)
        return (lo + rng.uniform(size=n) * (hi - lo))[:, None]
    elif fc.edges and w > 0 and fc.acceptance == 0:
        return _forced(fc, n)
    elif w == 0:                                # fixed cadence: only the first start is free
        lo, hi = max(0.0, lo_sum), min(c, hi_sum)
        coords = np.column_stack((lo + rng.uniform(size=n) * (hi - lo), np.zeros((n, fc.k - 1))))
    else:
        coords = _free_coords(fc, n, rng, method)
    starts = fc.first_lo + np.cumsum(
        np.column_stack((coords[:, :1], fc.gap_low + coords[:, 1:])), axis=1)
    # cumulative rounding may overshoot the last feasible start by an ulp
    return np.clip(starts, fc.first_lo, fc.last_hi)


def sample_schedules(k, span, duration, min_gap, max_gap, n, rng=None,
                     method: str = "auto", edges: bool = True,
                     train_start: float | None = None,
                     run_end: float | None = None) -> np.ndarray:
    """n schedules drawn exactly uniformly from F_K: (n, k) sorted window START times.

    span = (t0, t1): windows ``[s, s + duration]`` lie inside it; consecutive start gaps lie
    in ``[max(min_gap, duration), max_gap]``.  rng: Generator or int seed (None -> 0).
    edges (default; needs a finite max_gap): F_K includes the corridor's edges -- the first
    start lies ``[min_gap, max_gap]`` after ``train_start`` (default: the span start) and the
    last start less than ``max_gap`` before the run's last feasible start ``run_end - D``
    (``run_end`` defaults to t1).  With an infinite max_gap only the leading edge remains.
    ``edges=False``: gaps only.  method: "auto" picks the exact sampler with the best
    acceptance (see module doc).
    """
    finite = math.isfinite(float(max_gap))
    if method not in (EDGE_METHODS if edges and finite else METHODS):
        raise InputError(f"unknown sampling method {method!r}" + (
            " for F_K with edges" if edges and finite else ""), column="method",
            fix="use 'auto', 'reject-box' or 'sequential'" if edges and finite
            else f"use one of {METHODS}")
    if edges and finite:
        fc = edge_class(k, span, duration, min_gap, max_gap, train_start, run_end)
    else:
        if edges and train_start is not None:      # infinite max_gap: only the leading edge
            span = (max(float(span[0]), float(train_start) + float(min_gap)), float(span[1]))
        fc = feasible_class(k, span, duration, min_gap, max_gap)
    if int(n) < 0:
        raise InputError(f"n = {n} must be >= 0", column="n", fix="ask for some schedules")
    return sample_class(fc, int(n), as_generator(rng), method)
