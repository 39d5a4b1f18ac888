"""Trace transformations.  Each returns a new trace and appends what it did to ``meta['ops']``."""

from __future__ import annotations

import numpy as np

from evalkit.errors import InputError
from evalkit.replay.traces.model import Trace


def _renumber(df):
    df = df.reset_index(drop=True).copy()
    df["request_id"] = np.arange(len(df), dtype=np.int64)
    return df


def slice_window(trace: Trace, start_s: float, end_s: float, rebase: bool = True) -> Trace:
    """Requests arriving in ``[start_s, end_s)``; ``rebase`` makes times restart at 0."""
    start_s, end_s = float(start_s), float(end_s)
    if not (np.isfinite(start_s) and np.isfinite(end_s)) or start_s < 0 or end_s <= start_s:
        raise InputError(f"window [{start_s}, {end_s}) is empty or invalid", column="start/end",
                         fix="use 0 <= start < end")
    t = trace.arrival_s
    mask = (t >= start_s) & (t < end_s)
    if not mask.any():
        raise InputError(f"no requests in [{start_s}, {end_s}) s (trace spans "
                         f"{t[0]:.3f}..{t[-1]:.3f} s)", column="arrival_s",
                         fix="choose a window inside the trace")
    df = _renumber(trace.requests[mask])
    # duration_s is the length of the observation window, which starts at window_start_s.
    origin = float(trace.meta.get("window_start_s", 0.0))
    if rebase:
        df["arrival_s"] = df["arrival_s"] - max(start_s, origin)
    window = min(end_s, max(origin + trace.duration_s, float(t[mask][-1]))) - max(start_s, origin)
    op = {"op": "slice", "start_s": start_s, "end_s": end_s, "rebase": rebase,
          "rows_before": trace.n, "rows_after": int(mask.sum())}
    updates = {"window_s": float(window)}
    if not rebase:
        updates["window_start_s"] = max(start_s, origin)
    out = trace.replace(df, op=op, **updates)
    if rebase:
        out.meta.pop("window_start_s", None)
    return out


def time_scale(trace: Trace, factor: float) -> Trace:
    """Multiply every arrival time by ``factor`` (factor 2 halves the rate); lengths unchanged."""
    factor = float(factor)
    if not (np.isfinite(factor) and factor > 0):
        raise InputError(f"time-scale factor must be finite and > 0, got {factor}",
                         column="factor", fix="e.g. --factor 0.5 to double the rate")
    df = trace.requests.copy()
    df["arrival_s"] = df["arrival_s"] * factor
    updates = {k: trace.meta[k] * factor for k in ("window_s", "window_start_s")
               if k in trace.meta}
    op = {"op": "time_scale", "factor": factor, "rate_before": trace.rate,
          "rate_after": trace.rate / factor}
    return trace.replace(df, op=op, **updates)


def rescale_rate(trace: Trace, target_rate: float) -> Trace:
    """Time-scale the trace so its mean rate (n / duration_s) becomes ``target_rate``."""
    target_rate = float(target_rate)
    if not (np.isfinite(target_rate) and target_rate > 0):
        raise InputError(f"target rate must be finite and > 0, got {target_rate}",
                         column="rate", fix="pass requests per second, e.g. --rate 8")
    if not (np.isfinite(trace.rate) and trace.rate > 0):
        raise InputError("the trace has no duration, so its rate cannot be rescaled",
                         column="arrival_s", fix="use a trace with at least two arrival times")
    return time_scale(trace, trace.rate / target_rate)


def head(trace: Trace, n: int) -> Trace:
    """The first ``n`` requests (window ends at the last kept arrival)."""
    if int(n) != n or n < 1:
        raise InputError(f"n must be a positive integer, got {n!r}", column="n",
                         fix="e.g. head(trace, 1000)")
    n = int(n)
    df = _renumber(trace.requests.iloc[:n])
    op = {"op": "head", "n": n, "rows_before": trace.n, "rows_after": len(df)}
    out = trace.replace(df, op=op)
    out.meta.pop("window_s", None)
    return out
