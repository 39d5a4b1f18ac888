"""Planned policies: the whole schedule is fixed at ``reset`` (``planned_starts``).

``calibrated_offline`` (oracle): K windows on a grid of candidate starts inside the span,
consecutive starts ``min_gap_s``..``max_gap_s`` apart, minimising Φ(S) = Σ_k C(s_k), with
C(u) = requests in flight during [u, u + D] computed from the oracle request intervals.
Solved exactly on the grid by dynamic programming (:func:`min_phi_schedule`).

``matched_random``: K from a completed reference run; starts drawn uniformly from F_K with
the statistical core's :func:`evalkit.stats.sample_schedules`.
"""

from __future__ import annotations

import numpy as np

from evalkit.errors import InputError
from evalkit.policies.base import Decision, DecisionState, Policy, RunContext


def window_costs(starts: np.ndarray, duration: float, arrival_s: np.ndarray,
                 end_s: np.ndarray, horizon_s: float) -> np.ndarray:
    """C(u) per candidate start (m,) from a request log: arrival/end (n,), end = inf (or NaN)
    for a request still in flight at the end of the run, counted as in flight to the horizon.

    Candidates lie before ``horizon_s - D``, so ending those requests at the horizon gives the
    same C(u) as an infinite end; :func:`evalkit.stats.cost_curve` does the counting.
    """
    from evalkit.stats.overlap import cost_curve   # evalkit.stats pulls in pandas/scipy

    arrival = np.asarray(arrival_s, dtype=float)
    end = np.asarray(end_s, dtype=float)
    end = np.where(np.isfinite(end), end, np.maximum(float(horizon_s), arrival))
    return cost_curve(np.asarray(starts, dtype=float), duration, arrival, end)


def min_phi_schedule(cost: np.ndarray, k: int, gap_lo: int, gap_hi: int,
                     first_ok: np.ndarray | None = None,
                     last_ok: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Exact minimiser of Σ cost[i_j] over index sets i_1 < … < i_k with gaps in [gap_lo, gap_hi].

    ``cost`` shape (m,); ``first_ok``/``last_ok`` (m,) bool: candidates the first / last
    window may take (F_K's edges; None: any).  Returns (indices shape (k,), minimal total).
    Ties go to the earliest indices.  Raises InputError when no feasible schedule exists.
    """
    cost = np.asarray(cost, dtype=float)
    m = len(cost)
    if k <= 0:
        return np.empty(0, dtype=np.int64), 0.0
    gap_lo, gap_hi = max(1, int(gap_lo)), int(gap_hi)
    best = cost.copy()                         # best[i]: min cost of j windows ending at i
    if first_ok is not None:
        best[~np.asarray(first_ok, dtype=bool)] = np.inf
    back = np.full((k, m), -1, dtype=np.int64)
    for j in range(1, k):
        new = np.full(m, np.inf)
        for i in range(gap_lo, m):
            lo, hi = max(0, i - gap_hi), i - gap_lo
            window = best[lo:hi + 1]
            a = int(np.argmin(window))
            if np.isfinite(window[a]):
                new[i] = window[a] + cost[i]
                back[j, i] = lo + a
        best = new
    if last_ok is not None:
        best = np.where(np.asarray(last_ok, dtype=bool), best, np.inf)
    end = int(np.argmin(best))
    if not np.isfinite(best[end]):
        raise InputError(f"no schedule of K={k} windows fits the span with the corridor",
                         column="k", fix="lower K or widen the corridor / horizon")
    idx = [end]
    for j in range(k - 1, 0, -1):
        idx.append(int(back[j, idx[-1]]))
    return np.array(idx[::-1], dtype=np.int64), float(best[end])


class _Planned(Policy):
    def decide(self, state: DecisionState) -> Decision:   # never asked: starts are planned
        return Decision(False, None)

    def _k(self, ctx: RunContext) -> int:
        k = self.params.get("k")
        if k is None:
            k = ctx.reference_k
        if k is None:
            raise InputError(f"policy {self.name!r} needs K: give the parameter k or a "
                             "reference run", column="k",
                             fix="set k=<int> or run it in a campaign with k_from=<policy>")
        if int(k) < 0:
            raise InputError(f"K must be >= 0, got {k}", column="k", fix="use k >= 0")
        return int(k)


class CalibratedOffline(_Planned):
    """Oracle bound: the Φ-minimising schedule of K windows (K = ``k`` or the reference K)."""

    name = "calibrated_offline"
    oracle = True

    def __init__(self, k: int | None = None, k_from: str | None = None, grid_s: float = 1.0):
        super().__init__(k=k, k_from=k_from, grid_s=float(grid_s))
        if float(grid_s) <= 0:
            raise InputError(f"grid_s must be > 0, got {grid_s}", column="grid_s",
                             fix="use e.g. grid_s = 1.0")

    def reset(self, ctx: RunContext) -> None:
        super().reset(ctx)
        k = self._k(ctx)
        fr = ctx.future_requests
        if fr is None:
            raise InputError("calibrated_offline is an oracle and needs the request intervals",
                             column="future_requests",
                             fix="run it through evalkit.replay.runner (it supplies them)")
        lo, hi = ctx.span
        grid = float(self.params["grid_s"])
        cand = lo + grid * np.arange(int(np.floor((hi - lo) / grid + 1e-9)) + 1)
        c = window_costs(cand, ctx.merge_duration_s, fr["arrival_s"].to_numpy(),
                         fr["end_s"].to_numpy(), ctx.horizon_s)
        gap_lo = int(np.ceil(max(ctx.corridor.min_gap_s, ctx.merge_duration_s) / grid - 1e-9))
        gap_hi = int(np.floor(ctx.corridor.max_gap_s / grid + 1e-9))
        # F_K's edges: training starts at the run's time origin; no forced merge may fit
        # after the last window
        min_gap, max_gap = ctx.corridor.min_gap_s, ctx.corridor.max_gap_s
        first_ok = (cand >= min_gap - 1e-9) & (cand <= max_gap + 1e-9)
        last_ok = cand > ctx.horizon_s - ctx.merge_duration_s - max_gap
        idx, phi = min_phi_schedule(c, k, gap_lo, gap_hi, first_ok, last_ok)
        self.planned_starts = cand[idx]
        self.k, self.phi = k, phi
        self.planned_scores = c[idx].astype(float)


class MatchedRandom(_Planned):
    """K merges placed uniformly over F_K (K from the reference run)."""

    name = "matched_random"
    role = "matched_random"

    def __init__(self, k: int | None = None):
        super().__init__(k=k)

    def reset(self, ctx: RunContext) -> None:
        super().reset(ctx)
        from evalkit.stats.fk import sample_schedules  # scipy: loaded when a draw is planned

        k = self._k(ctx)
        self.k = k
        if k == 0:
            self.planned_starts = np.empty(0)
        else:
            lo, hi = ctx.span
            # the sampler's span holds whole windows: (first start, last start + D)
            # F_K with its edges: training starts at the run's time origin
            starts = sample_schedules(k, (lo, hi + ctx.merge_duration_s), ctx.merge_duration_s,
                                      ctx.corridor.min_gap_s, ctx.corridor.max_gap_s, 1, ctx.rng,
                                      train_start=0.0, run_end=ctx.horizon_s)
            self.planned_starts = np.sort(np.asarray(starts, dtype=float).reshape(-1))
        self.planned_scores = np.full(k, np.nan)
