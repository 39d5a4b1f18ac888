"""Per-run facts about the experiment's *design*, read from the logs, never from run.json.

The audit's soundness checks compare these across the runs of a seed: pairing is verified
from the arrivals actually replayed (``arrival_fingerprint``), merge windows from their
observed lengths, the corridor from the merges performed, and open-loop sending from the
request timings.  ``evalkit summarize`` writes them as extra columns (:data:`DESIGN_COLUMNS`);
in a summary table they are the table's word (:mod:`evalkit.audit.table_word`): checked
for consistency, counted only when the user vouches for the table.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from evalkit.runlog.metrics import is_sorted, unique_inverse

__all__ = ["CORRIDOR_TOLERANCE_S", "DESIGN_COLUMNS", "FINGERPRINT_RESOLUTION_S", "TIED_WINDOW_S",
           "arrival_fingerprint", "arrival_ticks", "completion_tied_share", "corridor_tolerance",
           "corridor_violations", "design_facts", "identical_arrival_share",
           "run_corridor_violations"]

DESIGN_COLUMNS = ("arrival_fingerprint", "merge_duration_median_s", "corridor_violations",
                  "corridor_note", "completion_tied_share", "identical_arrival_share",
                  "inner_step_median_s")
FINGERPRINT_RESOLUTION_S = 1e-6     # arrivals are compared to the microsecond
TIED_WINDOW_S = 1e-3                # a send this soon after a completion is tied to it
CORRIDOR_TOLERANCE_S = 0.05         # default slack; real backends add 1.5 inner steps


def arrival_ticks(arrival_s) -> np.ndarray:
    """The finite arrivals in microseconds (int64), sorted: what the fingerprint hashes."""
    a = np.asarray(arrival_s, dtype=float)
    if not is_sorted(a):                   # writers log requests in arrival order
        a = np.sort(a)
    a = a[np.isfinite(a)]
    return np.round(a / FINGERPRINT_RESOLUTION_S).astype(np.int64)


def arrival_fingerprint(arrival_s, ticks: np.ndarray | None = None) -> str:
    """sha256 (first 32 hex digits) of the request count and sorted arrivals in microseconds
    (``ticks``: their :func:`arrival_ticks`, when already computed)."""
    if ticks is None:
        ticks = arrival_ticks(arrival_s)
    h = hashlib.sha256()
    h.update(str(int(ticks.size)).encode())
    h.update(ticks.tobytes())
    return h.hexdigest()[:32]


def completion_tied_share(sent_s, end_s, window_s: float = TIED_WINDOW_S) -> float:
    """Share of requests sent within ``window_s`` after another request completed.

    Open-loop senders keep the trace's schedule: sends coincide with completions only by
    chance (about rate x window).  A closed-loop client sends when a request returns.
    """
    sent = np.asarray(sent_s, dtype=float)
    end = np.asarray(end_s, dtype=float)
    end = end[np.isfinite(end)]
    ok = np.isfinite(sent)
    if not ok.any() or end.size == 0:
        return 0.0
    s = sent[ok]
    if s.min() >= 0 and end.min() >= 0:
        s, prev = _last_completions_merged(s, end)
    else:
        end = np.sort(end)
        i = np.searchsorted(end, s, side="right") - 1          # last completion at or before s
        prev = np.where(i >= 0, end[np.maximum(i, 0)], -np.inf)
    return float(np.count_nonzero(s - prev <= window_s) / s.size)


def _last_completions_merged(s: np.ndarray, end: np.ndarray):
    """``(s sorted, prev)``: each send time with the last completion at or before it
    (``-inf`` for none), the completion ``searchsorted`` on the sorted ``end`` finds.

    For finite times >= 0 the float64 bit patterns sort as the values do, so one sort of
    both, tagged in the lowest bit (a completion sorts before a send at the same time),
    replaces a sort and a binary search per send.  The send times come back sorted and
    with the same values; a share counted over them does not depend on their order.
    """
    one = np.uint64(1)
    keys = np.empty(end.size + s.size, dtype=np.uint64)
    np.left_shift(end.view(np.uint64), one, out=keys[:end.size])
    np.left_shift(s.view(np.uint64), one, out=keys[end.size:])
    keys[end.size:] |= one
    keys.sort()
    is_send = (keys & one).astype(bool)
    values = (keys >> one).view(np.float64)
    sends = np.flatnonzero(is_send)
    before = sends - np.arange(sends.size) - 1          # index of that completion, sorted
    ends = values[np.flatnonzero(~is_send)]
    prev = np.where(before >= 0, ends[np.maximum(before, 0)], -np.inf)
    return values[sends], prev


def identical_arrival_share(arrival_s, ticks: np.ndarray | None = None) -> float:
    """Share of requests whose scheduled arrival equals another request's (to 1 us)
    (``ticks``: their :func:`arrival_ticks`, when already computed)."""
    if ticks is None:
        a = np.asarray(arrival_s, dtype=float)
        ticks = np.round(a[np.isfinite(a)] / FINGERPRINT_RESOLUTION_S).astype(np.int64)
    if ticks.size < 2:
        return 0.0
    if is_sorted(ticks):       # a tick is shared when a neighbour holds the same one
        same = ticks[1:] == ticks[:-1]
        shared = np.zeros(ticks.size, dtype=bool)
        shared[1:] = same
        shared[:-1] |= same
        return float(np.count_nonzero(shared) / ticks.size)
    _, inverse = unique_inverse(ticks)
    counts = np.bincount(inverse)
    return float(np.count_nonzero(counts[inverse] > 1) / ticks.size)


def corridor_tolerance(inner_step_s: float, base: float = CORRIDOR_TOLERANCE_S) -> float:
    """Slack for the corridor check: decisions happen at inner-step boundaries."""
    step = inner_step_s if math.isfinite(inner_step_s) else 0.0
    return float(base + 1.5 * step)


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


def run_corridor_violations(meta: dict, starts, ends, inner_step_s: float = float("nan"),
                            base_tolerance: float = CORRIDOR_TOLERANCE_S,
                            train_start: float = 0.0) -> list[str]:
    """Why the run's merges (every merge it performed) are not in F_K with its edges.

    ``train_start``: where the corridor starts, the run's time origin (as the sweep's F_K
    sampler has it, or the campaign plan's); never a key of the run's own run.json, which
    would let one run move its own edge.  ``inner_step_s``: the step time of the seed's runs
    jointly (the audit passes the smallest), not this run's alone."""
    corridor = meta.get("corridor") or {}
    lo = corridor.get("min_gap_s")
    hi = corridor.get("max_gap_s")
    if lo is None or hi is None:
        return ["run.json has no corridor (min_gap_s/max_gap_s): F_K cannot be checked"]
    return corridor_violations(
        starts, ends, (0.0, float(meta["horizon_s"])), float(meta["merge_duration_s"]),
        float(lo), float(hi), train_start=float(train_start),
        tol=corridor_tolerance(inner_step_s, base_tolerance))


def design_facts(meta: dict, req: dict, merges: dict, steps: dict | None) -> dict:
    """The :data:`DESIGN_COLUMNS` of one run from its numpy columns."""
    starts = np.asarray(merges["start_s"], dtype=float)
    ends = np.asarray(merges["end_s"], dtype=float)
    dur = ends - starts
    step = float("nan")
    if steps is not None and len(steps["start_s"]):
        step = float(np.median(np.asarray(steps["end_s"], float)
                               - np.asarray(steps["start_s"], float)))
    bad = [] if meta.get("role") == "no_sync" else run_corridor_violations(
        meta, starts, ends, step)
    ticks = arrival_ticks(req["arrival_s"])
    return {
        "arrival_fingerprint": arrival_fingerprint(None, ticks),
        "merge_duration_median_s": float(np.median(dur)) if dur.size else float("nan"),
        "corridor_violations": len(bad),
        "corridor_note": "; ".join(bad),
        "completion_tied_share": completion_tied_share(req["sent_s"], req["end_s"]),
        "identical_arrival_share": identical_arrival_share(None, ticks),
        "inner_step_median_s": step,
    }
