"""Overlap cost C(u) and total overlap Phi(S) of merge schedules against a request log.

``C(u)`` = number of requests in flight during the window ``[u, u + D)``: requests with
``start < u + D`` and ``end > u``.  Because ``end >= start``, a request with ``end <= u``
always has ``start < u + D``, so ``C(u) = #(start < u + D) - #(end <= u)``: two
``searchsorted`` calls over sorted starts and ends, for any number of windows at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin

__all__ = ["OverlapCost", "RequestIndex", "cost_curve", "overlap_cost"]

_CHUNK = 1 << 22


class RequestIndex:
    """Sorted request starts and ends, built once and queried many times."""

    def __init__(self, req_start, req_end):
        start = np.asarray(req_start, dtype=float).ravel()
        end = np.asarray(req_end, dtype=float).ravel()
        if start.shape != end.shape:
            raise InputError(f"request starts ({start.size}) and ends ({end.size}) differ in "
                             "length", column="req_end", fix="pass one start and end per request")
        bad = np.flatnonzero(~(np.isfinite(start) & np.isfinite(end)))
        if bad.size:
            raise InputError(f"{bad.size} requests have a NaN/inf start or end (first at "
                             f"position {bad[0]})", column="req_end",
                             fix="give failed requests an explicit end (e.g. the horizon or "
                                 "timeout, as evalkit.runlog.metrics.request_intervals does)")
        back = np.flatnonzero(end < start)
        if back.size:
            raise InputError(f"{back.size} requests end before they start (first at position "
                             f"{back[0]})", column="req_end", fix="check the request log")
        self.n_requests = start.size
        self.sorted_start = np.sort(start)
        self.sorted_end = np.sort(end)

    def cost(self, starts, duration: float) -> np.ndarray:
        """C(u) for window starts of any shape -> int64 array of the same shape."""
        duration = float(duration)
        if not duration > 0:
            raise InputError(f"merge duration D = {duration} must be positive",
                             column="duration", fix="use the run's merge_duration_s")
        u = np.asarray(starts, dtype=float)
        flat = u.ravel()
        out = np.empty(flat.size, dtype=np.int64)
        for i in range(0, flat.size, _CHUNK):
            part = flat[i:i + _CHUNK]
            # sorted queries make searchsorted cache-friendly: ~5x faster for 10^5+ windows
            order = np.argsort(part) if part.size > 4096 else None
            q = part if order is None else part[order]
            c = (np.searchsorted(self.sorted_start, q + duration, "left")
                 - np.searchsorted(self.sorted_end, q, "right"))
            if order is None:
                out[i:i + part.size] = c
            else:
                out[i + order] = c
        return out.reshape(u.shape)


@dataclass(frozen=True)
class OverlapCost(ResultMixin):
    """Overlap of schedules with requests.

    ``per_window``: C(s) for each start, same shape as ``starts`` ((n_schedules, K) or (K,)).
    ``phi``: Phi(S) = sum of C over the windows of each schedule: shape ``starts.shape[:-1]``.
    """

    per_window: np.ndarray
    phi: np.ndarray
    duration: float
    n_requests: int
    convention: str = field(default="C(u) = #requests with start < u + D and end > u")


def overlap_cost(starts, duration, req_start=None, req_end=None, *,
                 index: RequestIndex | None = None) -> OverlapCost:
    """C per window and Phi per schedule, vectorised over many schedules.

    starts: (..., K) window starts (s); duration: D (s); req_start/req_end: (m,) request
    lifetimes (or a prebuilt ``index`` to skip re-sorting).  Returns :class:`OverlapCost`.
    """
    if index is None:
        if req_start is None or req_end is None:
            raise InputError("overlap_cost needs req_start and req_end (or index=)",
                             column="req_start", fix="pass the no-sync run's request intervals")
        index = RequestIndex(req_start, req_end)
    u = np.asarray(starts, dtype=float)
    if u.ndim == 0:
        raise InputError("starts must have a trailing window axis (K,)", column="starts",
                         fix="pass an array of window starts")
    per_window = index.cost(u, duration)
    return OverlapCost(per_window=per_window, phi=per_window.sum(axis=-1),
                       duration=float(duration), n_requests=index.n_requests)


def cost_curve(grid, duration, req_start, req_end) -> np.ndarray:
    """C(u) on a grid of candidate starts: (g,) -> (g,) int64."""
    return RequestIndex(req_start, req_end).cost(np.asarray(grid, dtype=float), duration)
