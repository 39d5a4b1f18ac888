"""Per-run quantities of the protocol as pure array functions.

Conventions: ``n`` requests, ``k`` merges; times in seconds from the run's origin.  A
failed request (``ok`` false, or no ``end_s``) has latency ``+inf``: it violates every SLO
and a latency percentile that lands among failed requests is ``inf``.  Missing values are
NaN (pandas/Arrow nulls).  No function loops over requests in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from evalkit.errors import InputError

__all__ = ["SAMPLE_SIZE", "SloFlags", "Span", "clopper_pearson", "e2e_latency", "goodput_flags",
           "is_sorted", "observed_span", "observed_windows", "overlaps_windows", "quantile",
           "quantiles", "request_exposure", "request_intervals", "slo_flags", "step_rate",
           "time_exposure", "tpot", "ttft", "union_windows", "unique_inverse", "violations",
           "windows_observed"]


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=float)


def _completed(ok, end_s) -> np.ndarray:
    return np.asarray(ok, dtype=bool) & np.isfinite(_f(end_s))


def e2e_latency(arrival_s, end_s, ok) -> np.ndarray:
    """End-to-end latency from the *scheduled* arrival (open loop).

    arrival_s, end_s (NaN if failed), ok: (n,) -> (n,) float, ``inf`` for failed requests.
    """
    done = _completed(ok, end_s)
    return np.where(done, _f(end_s) - _f(arrival_s), np.inf)


def ttft(arrival_s, first_token_s, ok) -> np.ndarray:
    """Time to first token from the scheduled arrival: (n,) -> (n,); ``inf`` if failed/no token."""
    first = _f(first_token_s)
    good = np.asarray(ok, dtype=bool) & np.isfinite(first)
    return np.where(good, first - _f(arrival_s), np.inf)


def tpot(first_token_s, end_s, output_tokens, ok) -> np.ndarray:
    """Time per output token after the first: ``(end_s - first_token_s) / (output_tokens - 1)``.

    (n,) -> (n,).  Requests with at most one output token have no TPOT and get 0 (they cannot
    violate a TPOT SLO, as in vLLM's goodput); failed requests or a missing first token: ``inf``.
    """
    first, end = _f(first_token_s), _f(end_s)
    tokens = np.asarray(output_tokens, dtype=float)
    good = _completed(ok, end) & np.isfinite(first)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_token = np.where(tokens > 1, (end - first) / (tokens - 1), 0.0)
    return np.where(good, per_token, np.inf)


def violations(latency, slo_s: float) -> np.ndarray:
    """(n,) latency -> (n,) bool: latency strictly exceeds the SLO (``inf`` always does)."""
    return _f(latency) > float(slo_s)


@dataclass(frozen=True)
class SloFlags:
    """Per-request violation flags, (n,) bool each; ``None`` where that SLO is not set.

    The one definition of V used everywhere (summary rows, both scan engines, the audit):
    a request violates when it failed or misses *any* configured SLO (vLLM's goodput
    definition), ``V = mean(violated)``.
    """

    e2e: np.ndarray
    ttft: np.ndarray | None
    tpot: np.ndarray | None
    good: np.ndarray       # ok and every configured SLO holds (vLLM goodput)

    @property
    def violated(self) -> np.ndarray:
        """(n,) bool: the request counts towards V (``~good``)."""
        return ~self.good

    @classmethod
    def of(cls, e2e, ttft_values, tpot_values, slo: dict) -> "SloFlags":
        """Flags from (n,) latencies that are ``inf`` for failed requests (:func:`e2e_latency`,
        :func:`ttft`, :func:`tpot`); ``tpot_values`` may be a zero-argument callable,
        evaluated only when a TPOT SLO is configured."""
        v_e2e = violations(e2e, slo["e2e_s"])
        t1, t2 = slo.get("ttft_s"), slo.get("tpot_s")
        v_ttft = None if t1 is None else violations(ttft_values, t1)
        if t2 is None:
            v_tpot = None
        else:
            v_tpot = violations(tpot_values() if callable(tpot_values) else tpot_values, t2)
        bad = v_e2e.copy()      # a failed request has e2e latency inf: always a violation
        for flags in (v_ttft, v_tpot):
            if flags is not None:
                bad |= flags
        return cls(e2e=v_e2e, ttft=v_ttft, tpot=v_tpot, good=~bad)


def slo_flags(arrival_s, first_token_s, end_s, output_tokens, ok, slo: dict) -> SloFlags:
    """Violation flags for ``slo = {"e2e_s": float, "ttft_s": float|None, "tpot_s": float|None}``.

    All inputs (n,); see :class:`SloFlags`.
    """
    ok = np.asarray(ok, dtype=bool)
    return SloFlags.of(e2e_latency(arrival_s, end_s, ok), ttft(arrival_s, first_token_s, ok),
                       lambda: tpot(first_token_s, end_s, output_tokens, ok), slo)


def violation_rate(arrival_s, first_token_s, end_s, output_tokens, ok, slo: dict) -> float:
    """V: share of the (n,) requests that failed or miss any configured SLO; NaN for n = 0."""
    flags = slo_flags(arrival_s, first_token_s, end_s, output_tokens, ok, slo).violated
    return float(np.mean(flags)) if flags.size else float("nan")


def goodput_flags(arrival_s, first_token_s, end_s, output_tokens, ok, slo: dict) -> np.ndarray:
    """(n,) bool: the request completed and every configured SLO holds."""
    return slo_flags(arrival_s, first_token_s, end_s, output_tokens, ok, slo).good


def quantile(values, q: float) -> float:
    """Linear-interpolated quantile of (n,) values that may hold ``+inf`` (failed requests).

    Same as ``numpy.quantile(method="linear")`` on finite data; a quantile that interpolates
    towards an ``inf`` is ``inf`` (numpy would give NaN where the weight is 0).  Empty -> NaN.
    """
    return float(quantiles(values, (q,))[0])


WINDOW_MIN_N = 4096     # below this a plain sort is as fast as the sample bracket
SAMPLE_SIZE = 1024


def is_sorted(values: np.ndarray) -> bool:
    """(n,) -> every value >= the one before (False with a NaN anywhere but alone)."""
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def unique_inverse(values) -> tuple[np.ndarray, np.ndarray]:
    """(n,) -> ``np.unique(values, return_inverse=True)``: unique values (u,), inverse (n,).

    Run logs list requests in arrival order, so a non-decreasing array is the rule: its
    unique values and inverse come from one pass over neighbours, no sort (the same
    arrays; ``tests/runlog/test_metrics.py`` compares them with ``np.unique``).
    """
    v = np.asarray(values)
    if v.ndim != 1 or v.size < 2 or not is_sorted(v):
        return np.unique(v, return_inverse=True)
    new = np.empty(v.size, dtype=bool)
    new[0] = True
    np.not_equal(v[1:], v[:-1], out=new[1:])
    return v[new], np.cumsum(new, dtype=np.intp) - 1


def quantiles(values, qs) -> np.ndarray:
    """:func:`quantile` at each of ``qs`` (m,) -> (m,), sorting (n,) values at most once.

    Only the two order statistics each interpolation needs are used, and they are exactly
    those of a full sort (NaN last, as ``np.sort``), so every value equals the full-sort
    result bit for bit.  For one quantile of large n, a strided sample brackets the pair in
    ``[a, b]``; one pass counts the values below ``a`` and keeps those in ``[a, b]`` (a few
    percent), which are partitioned instead of sorting all n.  When the bracket misses (ties,
    NaN, bad luck) -- or for several quantiles, where one vectorised ``np.sort`` is faster
    than a bracket each -- the whole array is sorted.
    """
    v = _f(values).ravel()
    qs = [float(q) for q in qs]
    n = v.size
    out = np.full(len(qs), np.nan)
    if n == 0:
        return out
    pos = []
    for q in qs:
        h = (n - 1) * q
        lo = int(np.floor(h))
        pos.append((lo, min(lo + 1, n - 1), h - lo))
    pairs = [None] * len(qs)
    if n >= WINDOW_MIN_N and len(qs) == 1:
        sample = np.sort(v[:: n // SAMPLE_SIZE])
        pairs[0] = _bracketed_pair(v, sample, pos[0][0], pos[0][1], sample.size)
    if pairs[0] is None:
        full = np.sort(v)
        pairs = [(full[lo], full[hi]) for lo, hi, _ in pos]
    for i, ((a, b), (_, _, frac)) in enumerate(zip(pairs, pos)):
        if frac == 0.0 or a == b:
            out[i] = a
        elif not np.isfinite(b):
            out[i] = np.inf
        else:
            out[i] = a + (b - a) * frac
    return out


def _bracketed_pair(v, sample, lo: int, hi: int, m: int):
    """Order statistics ``lo``, ``hi`` of (n,) ``v`` via a sample bracket; None if it misses."""
    n = v.size
    q = lo / max(n - 1, 1)
    margin = 6.0 * np.sqrt(max(q * (1 - q), 1.0 / m) / m) + 2.0 / m
    a = sample[max(int(np.floor((q - margin) * (m - 1))), 0)] if q - margin > 0 else -np.inf
    b = sample[min(int(np.ceil((q + margin) * (m - 1))), m - 1)] if q + margin < 1 else np.inf
    if not (a <= b):                     # NaN in the sample bracket
        return None
    if np.isinf(a) and np.isinf(b):
        return None                      # the bracket would keep everything
    below = int(np.count_nonzero(v < a))
    inside = v[(v >= a) & (v <= b)]
    if not below <= lo or not hi < below + inside.size:
        return None
    k = (lo - below, hi - below)
    part = np.partition(inside, sorted(set(k)))
    return part[k[0]], part[k[1]]


class Span:
    """The observed span ``[start_s, end_s]``: from the first arrival to the end of activity.

    Unpacks as ``start_s, end_s``.  ``last_start_s = end_s - merge_duration_s`` is the latest
    start of a window inside the span, so the feasible starts of ``F_K`` are
    ``[start_s, last_start_s]`` (:meth:`starts`).
    """

    __slots__ = ("start_s", "end_s", "merge_duration_s")

    def __init__(self, start_s: float, end_s: float, merge_duration_s: float):
        self.start_s = float(start_s)
        self.end_s = float(end_s)
        self.merge_duration_s = float(merge_duration_s)

    @property
    def length_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    @property
    def last_start_s(self) -> float:
        return self.end_s - self.merge_duration_s

    def starts(self) -> tuple[float, float]:
        return self.start_s, self.last_start_s

    def __iter__(self):
        return iter((self.start_s, self.end_s))

    def __eq__(self, other):
        return isinstance(other, Span) and (self.start_s, self.end_s, self.merge_duration_s) == (
            other.start_s, other.end_s, other.merge_duration_s)

    def __repr__(self):
        return f"Span(start_s={self.start_s}, end_s={self.end_s}, D={self.merge_duration_s})"


def observed_span(arrival_s, end_s, horizon_s: float, merge_duration_s: float) -> Span:
    """The span that had requests: first scheduled arrival to the last moment one was in flight.

    arrival_s, end_s: (n,), ``end_s`` NaN for failed requests, which count as in flight until
    ``horizon_s`` (a timeout).  The end is clipped to ``horizon_s``.  Protocol pitfall 3: a
    replay clock that starts before the engine serves leaves a request-free prefix that is
    not part of the span.
    """
    arrival = _f(arrival_s)
    if arrival.size == 0:
        raise InputError("no requests: the observed span is undefined", column="arrival_s",
                         fix="a run needs at least one request")
    end = np.where(np.isfinite(_f(end_s)), _f(end_s), float(horizon_s))
    last = max(float(np.max(end)), float(np.max(arrival)))
    return Span(float(np.min(arrival)), min(float(horizon_s), last), merge_duration_s)


def observed_windows(merge_start, merge_end, span) -> np.ndarray:
    """(k,) bool: the merge window lies inside the observed span (``span = (start, end)``)."""
    lo, hi = span
    return (_f(merge_start) >= lo) & (_f(merge_end) <= hi)


def windows_observed(merge_start, merge_end, span) -> int:
    """K: number of merges whose window ``[start, end]`` lies inside the observed span."""
    return int(np.count_nonzero(observed_windows(merge_start, merge_end, span)))


def union_windows(start, end) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint union of intervals: (k,), (k,) -> (m,), (m,) with m <= k."""
    start, end = _f(start), _f(end)
    if start.size == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new_block = np.ones(s.size, dtype=bool)
    new_block[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new_block)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def request_intervals(arrival_s, sent_s, end_s, ok, horizon_s: float):
    """Lifetime of each request: (n,) inputs -> (lo (n,), hi (n,)).

    Completed: ``[arrival_s, end_s]``.  Failed: ``[sent_s, end_s]``, or ``[sent_s, horizon_s]``
    when it has no ``end_s`` (it was in flight until the run's timeout).
    """
    done = _completed(ok, end_s)
    end = _f(end_s)
    sent = _f(sent_s)
    lo = np.where(done, _f(arrival_s), sent)
    hi = np.where(np.isfinite(end), end, np.maximum(float(horizon_s), sent))
    return lo, hi


def overlaps_windows(lo, hi, merge_start, merge_end) -> np.ndarray:
    """(n,) bool: interval ``[lo_i, hi_i]`` overlaps some merge window (positive overlap)."""
    lo, hi = _f(lo), _f(hi)
    ws, we = union_windows(merge_start, merge_end)
    if ws.size == 0:
        return np.zeros(lo.shape, dtype=bool)
    j = np.searchsorted(we, lo, side="right")   # first window ending after lo
    # past the last window (j = m) the padded start +inf is never < hi
    return np.append(ws, np.inf)[j] < hi


def request_exposure(arrival_s, sent_s, end_s, ok, merge_start, merge_end,
                     horizon_s: float) -> float:
    """Request-weighted exposure: share of requests in flight during any merge window.

    (n,) request columns, (k,) merge windows -> float in [0, 1]; NaN for no requests.
    """
    lo, hi = request_intervals(arrival_s, sent_s, end_s, ok, horizon_s)
    if lo.size == 0:
        return float("nan")
    return float(np.mean(overlaps_windows(lo, hi, merge_start, merge_end)))


def time_exposure(merge_start, merge_end, span) -> float:
    """Time-weighted exposure: share of the observed span covered by merge windows.

    (k,), (k,), ``span = (start, end)`` -> float in [0, 1]; NaN for an empty span.
    """
    lo, hi = span
    if not hi > lo:
        return float("nan")
    ws, we = union_windows(merge_start, merge_end)
    covered = np.clip(np.minimum(we, hi) - np.maximum(ws, lo), 0.0, None).sum()
    return float(covered / (hi - lo))


def step_rate(n_steps: int, first_start_s: float, last_end_s: float, merge_start,
              merge_end) -> float:
    """Inner steps per second of the time the trainer could step.

    The steps' wall-clock extent ``[first_start_s, last_end_s]`` minus the merge windows
    ((k,), (k,)) inside it, since a merge pauses inner steps: a no-sync run and a merging run
    under the same training load get the same rate.  NaN without steps or time.
    """
    width = float(last_end_s) - float(first_start_s)
    if not n_steps or not width > 0:
        return float("nan")
    free = width * (1.0 - time_exposure(merge_start, merge_end, (first_start_s, last_end_s)))
    return float(n_steps) / free if free > 0 else float("nan")


def clopper_pearson(k, n, confidence: float = 0.95):
    """Exact (Clopper–Pearson) two-sided CI for a binomial proportion ``k / n``.

    Scalars or broadcastable arrays -> (low, high) of the same shape.  ``n = 0`` has no
    denominator and raises :class:`InputError` (never read as rate 0).
    """
    k_arr, n_arr = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    # beta quantiles: Beta(k, n-k+1).ppf(alpha/2) and Beta(k+1, n-k).ppf(1-alpha/2)
    if np.any(n_arr <= 0) or np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise InputError("Clopper–Pearson needs 0 <= k <= n and n > 0", column="n",
                         fix="a violation rate needs at least one request")
    alpha = 1.0 - float(confidence)
    with np.errstate(invalid="ignore"):
        low = np.where(k_arr == 0, 0.0, special.betaincinv(k_arr, n_arr - k_arr + 1, alpha / 2))
        high = np.where(k_arr == n_arr, 1.0,
                        special.betaincinv(k_arr + 1, n_arr - k_arr, 1 - alpha / 2))
    if low.ndim == 0:
        return float(low), float(high)
    return low, high
