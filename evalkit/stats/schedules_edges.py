"""Exact uniform sampling of F_K *with its edges* (the corridor over the whole run).

A corridor-bound trainer that starts training at ``t_train`` and runs until ``t1`` produces
K window starts ``s_1 < ... < s_K`` with

* consecutive gaps in ``[a, b]``, ``a = max(min_gap, D)``, ``b = max_gap`` (finite);
* the leading edge: ``s_1 - t_train`` in ``[min_gap, max_gap]`` (no merge before H_min
  steps, a forced merge at H_max), and ``s_1 >= t0`` (windows inside the span ``[t0, t1]``);
* the trailing edge: ``(t1 - D) - s_K < max_gap`` — otherwise a forced merge would still
  have fitted before the end and K would differ — and ``s_K <= t1 - D``.

In coordinates ``x = s_1 - A_lo`` (width ``c = A_hi - A_lo``) and slack gaps ``y_i = s_{i+1}
- s_i - a`` in ``[0, w]`` the class is the polytope ``{x in [0, c], y in [0, w]^m,
L_lo <= x + sum(y) <= L_hi}``.  It is sampled exactly: by rejection from the box when the
exactly computed acceptance rate is high enough, else sequentially, each ``y_i`` from its
exact conditional law (CDF inversion by bisection; volumes by inclusion-exclusion), then
``x`` uniform on what is left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin

MIN_ACCEPTANCE = 0.02
MAX_SEQUENTIAL_M = 60


@dataclass(frozen=True)
class EdgeClass(ResultMixin):
    """F_K with edges: first start in [first_lo, first_hi], gaps in [gap_low, gap_high],
    last start in [last_lo, last_hi]; ``acceptance``: exact box-rejection rate."""

    k: int
    first_lo: float
    first_hi: float
    gap_low: float
    gap_high: float
    last_lo: float
    last_hi: float
    duration: float
    acceptance: float

    @property
    def m(self) -> int:
        return max(self.k - 1, 0)


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
    z = np.clip(v[..., None] - np.arange(j + 1), 0.0, None)
    coeff = np.array([(-1) ** l * math.comb(j, l) for l in range(j + 1)], dtype=float)
    return (z ** deg) @ coeff / math.factorial(deg)


def _g(j: int, c, v, p: int, exact: bool = False):
    """Volume-type function of x + sum of j unit uniforms, x ~ [0, c] (c = 0: x = 0)."""
    if c == 0:
        return _f(j, p, v, exact)
    return _f(j, p + 1, v, exact) - _f(j, p + 1, v - c, exact)


def edge_class(k, span, duration, min_gap, max_gap, train_start=None,
               run_end=None) -> EdgeClass:
    """Validate and describe F_K with edges; infeasible constraints raise InputError.

    span = (t0, t1): windows lie inside it (the observed span); ``train_start`` (default t0)
    and ``run_end`` (default t1) are where the trainer's corridor starts and ends.
    """
    t0, t1 = (float(v) for v in span)
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
        return EdgeClass(0, first_lo, first_hi, a, max_gap, last_lo, last_hi, d, 1.0)
    if k >= 2 and max_gap < a:
        raise InputError(f"max_gap = {max_gap} s is shorter than the merge duration D = {d} s",
                         column="corridor", fix="raise max_gap_s or check D")
    m = k - 1
    lo_sum = last_lo - first_lo - m * a
    hi_sum = last_hi - first_lo - m * a
    c = first_hi - first_lo
    w = max_gap - a
    if c < 0 or hi_sum < 0 or lo_sum > c + m * w:
        raise InputError(f"infeasible corridor: no schedule of K = {k} windows (D = {d} s, "
                         f"gaps [{a:g}, {max_gap:g}] s) fits the run [{t0:g}, {t1:g}] s with "
                         "the corridor's edges", column="k",
                         fix="K, the span and the corridor are inconsistent; check K counts "
                             "observed windows and the corridor is the run's")
    acc = 1.0
    if m >= 1 and w > 0:
        cf, wf = Fraction(c), Fraction(w)
        cu = cf / wf
        vol = (_g(m, cu, Fraction(hi_sum) / wf, 1, True)
               - _g(m, cu, Fraction(lo_sum) / wf, 1, True))
        acc = float(vol / cu) if cu > 0 else float(vol)
    return EdgeClass(k, first_lo, first_hi, a, max_gap, last_lo, last_hi, d, acc)


def _bisect_cdf(cdf, target, n):
    lo, hi = np.zeros(n), np.ones(n)
    for _ in range(56):
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < target
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _sequential(ec: EdgeClass, n: int, rng) -> np.ndarray:
    m = ec.m
    if m > MAX_SEQUENTIAL_M:
        raise InputError(f"K = {ec.k} with a tight corridor cannot be sampled exactly (box "
                         f"acceptance {ec.acceptance:.2g}; the sequential sampler is limited "
                         f"to K <= {MAX_SEQUENTIAL_M + 1})", column="k",
                         fix="widen the corridor, or split the run")
    w = ec.gap_high - ec.gap_low
    c = (ec.first_hi - ec.first_lo) / w
    c = 0.0 if c < 1e-12 else c
    lo = np.full(n, (ec.last_lo - ec.first_lo - m * ec.gap_low) / w)
    hi = np.full(n, (ec.last_hi - ec.first_lo - m * ec.gap_low) / w)
    ys = np.empty((n, m))
    for i in range(m):
        j = m - i - 1                          # y's still free after this one

        def h(v, j=j):
            return _g(j, c, v, 2)

        def cdf_raw(t, lo=lo, hi=hi):
            return (h(hi) - h(hi - t)) - (h(lo) - h(lo - t))

        total = cdf_raw(np.ones(n))
        target = rng.uniform(size=n) * total
        y = _bisect_cdf(cdf_raw, target, n)
        ys[:, i] = y
        lo, hi = lo - y, hi - y
    if c > 0:
        x_lo, x_hi = np.clip(lo, 0.0, c), np.clip(hi, 0.0, c)
        x = x_lo + rng.uniform(size=n) * (x_hi - x_lo)
    else:
        x = np.zeros(n)
    return np.column_stack((x * w, ys * w))


def _box(ec: EdgeClass, n: int, rng) -> np.ndarray:
    m, w = ec.m, ec.gap_high - ec.gap_low
    c = ec.first_hi - ec.first_lo
    lo = ec.last_lo - ec.first_lo - m * ec.gap_low
    hi = ec.last_hi - ec.first_lo - m * ec.gap_low
    out, have = [], 0
    while have < n:
        batch = int(min(2_000_000, math.ceil((n - have) / max(ec.acceptance, 1e-6) * 1.1) + 64))
        x = rng.uniform(0.0, c, size=batch)
        y = rng.uniform(0.0, w, size=(batch, m))
        tot = x + y.sum(axis=1)
        keep = (tot >= lo) & (tot <= hi)
        out.append(np.column_stack((x[keep], y[keep])))
        have += int(keep.sum())
    return np.concatenate(out)[:n]


def _forced(ec: EdgeClass, n: int) -> np.ndarray:
    """(n, k) copies of the one schedule of a class of zero volume, where the edges meet at
    a corner: every gap at its minimum from the earliest start, or at its maximum from the
    latest.  Any other zero-volume class is a slice with no uniform distribution."""
    m = ec.m
    lo_sum = ec.last_lo - ec.first_lo - m * ec.gap_low
    top = (ec.first_hi - ec.first_lo) + m * (ec.gap_high - ec.gap_low)
    steps = np.arange(ec.k, dtype=float)
    if ec.last_hi - ec.first_lo - m * ec.gap_low <= 0:
        row = ec.first_lo + steps * ec.gap_low
    elif lo_sum >= top:
        row = ec.first_hi + steps * ec.gap_high
    else:
        raise InputError(f"the corridor leaves no freedom: K = {ec.k} windows fit only on a "
                         "set of zero volume, which has no uniform distribution", column="k",
                         fix="check K and the corridor (a forced schedule cannot show "
                             "placement gain), or widen the corridor")
    return np.tile(row, (n, 1))


def sample_edge_schedules(ec: EdgeClass, n: int, rng, method: str = "auto") -> np.ndarray:
    """(n, k) sorted window starts drawn exactly uniformly from ``ec``."""
    if ec.k == 0 or n == 0:
        return np.empty((n, ec.k))
    if ec.k == 1:
        lo, hi = max(ec.first_lo, ec.last_lo), min(ec.first_hi, ec.last_hi)
        return (lo + rng.uniform(size=n) * (hi - lo))[:, None]
    w = ec.gap_high - ec.gap_low
    if w > 0 and ec.acceptance == 0:
        return _forced(ec, n)
    if w == 0:                                  # fixed cadence: only the first start is free
        m = ec.m
        lo = max(0.0, ec.last_lo - ec.first_lo - m * ec.gap_low)
        hi = min(ec.first_hi - ec.first_lo, ec.last_hi - ec.first_lo - m * ec.gap_low)
        x = lo + rng.uniform(size=n) * (hi - lo)
        coords = np.column_stack((x, np.zeros((n, m))))
    else:
        if method == "auto":
            method = "reject-box" if ec.acceptance >= MIN_ACCEPTANCE else "sequential"
        if method == "reject-box":
            if ec.first_hi == ec.first_lo:
                method = "sequential"
            else:
                coords = _box(ec, n, rng)
        if method == "sequential":
            coords = _sequential(ec, n, rng)
        elif method != "reject-box":
            raise InputError(f"unknown sampling method {method!r} for F_K with edges",
                             column="method", fix="use 'auto', 'reject-box' or 'sequential'")
    starts = ec.first_lo + np.cumsum(
        np.column_stack((coords[:, :1], ec.gap_low + coords[:, 1:])), axis=1)
    return np.clip(starts, ec.first_lo, ec.last_hi)


def corridor_violations(starts, ends, span, duration, min_gap, max_gap, train_start=0.0,
                        tol: float = 0.0) -> list[str]:
    """Why a run's merge schedule is not in F_K (empty list: it is).

    starts/ends: (K,) every merge the trainer performed; span = (t0, t1) of the run;
    tol: slack in seconds for real backends (decisions happen at step boundaries).
    """
    s = np.sort(np.asarray(starts, dtype=float))
    e = np.asarray(ends, dtype=float)[np.argsort(np.asarray(starts, dtype=float))]
    t0, t1 = (float(v) for v in span)
    d, min_gap, max_gap = float(duration), float(min_gap), float(max_gap)
    ref = float(train_start)
    out = []
    last_ok = t1 - d
    if s.size == 0:
        if math.isfinite(max_gap) and last_ok - ref >= max_gap + tol:
            out.append(f"no merge in {last_ok - ref:.4g} s of training: max_gap {max_gap:g} s "
                       "forces one")
        return out
    first = s[0] - ref
    if first < min_gap - tol:
        out.append(f"first merge {first:.4g} s after training start < min_gap {min_gap:g} s")
    if math.isfinite(max_gap) and first > max_gap + tol:
        out.append(f"first merge {first:.4g} s after training start > max_gap {max_gap:g} s")
    gaps = np.diff(s)
    a = max(min_gap, d)
    for i in np.flatnonzero(gaps < a - tol)[:3]:
        out.append(f"merges {i} and {i + 1} start {gaps[i]:.4g} s apart < "
                   f"{'min_gap' if min_gap >= d else 'D'} {a:g} s")
    if math.isfinite(max_gap):
        for i in np.flatnonzero(gaps > max_gap + tol)[:3]:
            out.append(f"merges {i} and {i + 1} start {gaps[i]:.4g} s apart > max_gap "
                       f"{max_gap:g} s")
        trail = last_ok - s[-1]
        if trail >= max_gap + tol:
            out.append(f"last merge {trail:.4g} s before the last feasible start: a forced "
                       f"merge (max_gap {max_gap:g} s) would have followed")
    if s[-1] > last_ok + tol or (e.size and np.nanmax(e) > t1 + tol):
        out.append("a merge window runs past the end of the run")
    return out
