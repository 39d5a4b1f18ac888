"""WA-DiLoCo score and the forecast-driven policies: wa, calibrated_online, ewma.

Score (notes/protocol.md, all weights configurable)::

    progress = w_loss·cap(loss_drop/loss_ref) + w_tokens·cap(tokens_since_sync/tokens_ref)
    pressure = w_net·net + w_serving·serving + w_ckpt·ckpt + w_cost·cap(cost)
               + w_stale·cap(staleness_s/stale_ref)
    merge  <=>  progress − pressure > tau

with defaults 0.5, 0.05, 0.5, 1e6, 0.5, 0.75, 0.25, w_cost, 0.25, 1800 s, tau = 0 and
``cap(x) = min(1, max(0, x))``.  Plain ``wa`` has no cost model (``w_cost = 0``).

Both online forecasters use only decision-time information: Ĉ(t) = q(t) + λ̂·D, where
q(t) = requests in flight now (waiting + running) and λ̂ is a one-step EWMA of the arrival
rate observed in bins of one inner step (λ̂ ← α·rate + (1 − α)·λ̂, first bin initialises).
"""

from __future__ import annotations

import bisect

import numpy as np

from evalkit.policies.base import Decision, DecisionState, Policy, RunContext


def cap(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


WA_DEFAULTS = dict(w_loss=0.5, loss_ref=0.05, w_tokens=0.5, tokens_ref=1e6, w_net=0.5,
                   w_serving=0.75, w_ckpt=0.25, w_cost=0.0, w_stale=0.25, stale_ref=1800.0,
                   tau=0.0)


def wa_score(state: DecisionState, cost: float, w: dict) -> tuple[float, float, float]:
    """(score, progress, pressure) of the WA-DiLoCo rule for one decision state."""
    progress = (w["w_loss"] * cap(state.loss_drop / w["loss_ref"])
                + w["w_tokens"] * cap(state.tokens_since_sync / w["tokens_ref"]))
    pressure = (w["w_net"] * state.net + w["w_serving"] * state.pressure
                + w["w_ckpt"] * state.ckpt + w["w_cost"] * cap(cost)
                + w["w_stale"] * cap(state.staleness_s / w["stale_ref"]))
    return progress - pressure, progress, pressure


class ArrivalRateEWMA:
    """One-step EWMA of the arrival rate over fixed bins, fed with arrivals seen so far."""

    def __init__(self, alpha: float, bin_s: float):
        self.alpha, self.bin_s = float(alpha), float(bin_s)
        self.lam: float | None = None
        self.bins_done = 0

    def update(self, arrivals: np.ndarray, t_s: float) -> float:
        """Fold in every complete bin ending at or before ``t_s``; arrivals shape (m,), sorted."""
        n_full = int(np.floor(t_s / self.bin_s + 1e-9))
        if n_full > self.bins_done:
            edges = self.bin_s * np.arange(self.bins_done, n_full + 1)
            counts = np.diff(np.searchsorted(arrivals, edges, side="left"))
            for rate in counts / self.bin_s:
                self.lam = rate if self.lam is None else (
                    self.alpha * rate + (1.0 - self.alpha) * self.lam)
            self.bins_done = n_full
        return 0.0 if self.lam is None else float(self.lam)


def sorted_quantile(values: list, q: float) -> float:
    """numpy's default (linear) quantile of an already sorted list."""
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return float(values[lo] + (values[hi] - values[lo]) * (pos - lo))


class _Forecasting(Policy):
    requires_signals = ("queue_running", "queue_waiting")

    def run_meta(self) -> dict:
        """The arrival-rate EWMA's smoothing factor (not a significance level)."""
        return {"ewma_alpha": self.params.get("alpha")}

    def reset(self, ctx: RunContext) -> None:
        super().reset(ctx)
        self.ewma = ArrivalRateEWMA(self.alpha, self.params.get("bin_s") or ctx.inner_step_s)
        self.history: list[float] = []
        self.total = 0.0
        self.D = ctx.merge_duration_s

    def forecast(self, state: DecisionState) -> tuple[float, float, int]:
        """(Ĉ, λ̂, q) at ``state.t_s``."""
        lam = self.ewma.update(state.recent_arrivals, state.t_s)
        q = int(state.queue_waiting + state.queue_running)
        return q + lam * self.D, lam, q


class WA(Policy):
    """WA-DiLoCo: merge when progress − pressure > tau."""

    name = "wa"
    requires_signals = ("pressure",)

    def __init__(self, **weights):
        w = dict(WA_DEFAULTS)
        w.update({k: float(v) for k, v in weights.items()})
        super().__init__(**w)
        self.w = w

    def decide(self, state: DecisionState) -> Decision:
        score, progress, pressure = wa_score(state, 0.0, self.w)
        return Decision(score > self.w["tau"], score,
                        {"progress": progress, "pressure_term": pressure})


class CalibratedOnline(_Forecasting):
    """WA with w_cost = 1 and cost = predicted overlap Ĉ / scale (decision-time only).

    ``cost_scale``: fixed normaliser of Ĉ; default (None) is twice the mean forecast seen at
    earlier checks of this run, so an average-load window costs 0.5.
    """

    name = "calibrated_online"
    requires_signals = ("queue_running", "queue_waiting", "pressure")

    def __init__(self, alpha: float = 0.2, cost_scale: float | None = None,
                 bin_s: float | None = None, **weights):
        w = dict(WA_DEFAULTS, w_cost=1.0)
        w.update({k: float(v) for k, v in weights.items()})
        super().__init__(alpha=float(alpha), cost_scale=cost_scale, bin_s=bin_s, **w)
        self.alpha, self.cost_scale, self.w = float(alpha), cost_scale, w

    def decide(self, state: DecisionState) -> Decision:
        c_hat, lam, q = self.forecast(state)
        scale = self.cost_scale
        if scale is None:
            scale = 2.0 * self.total / len(self.history) if self.history else 2.0 * c_hat
        cost = c_hat / scale if scale > 0 else 0.0
        self.history.append(c_hat)
        self.total += c_hat
        score, progress, pressure = wa_score(state, cost, self.w)
        return Decision(score > self.w["tau"], score,
                        {"c_hat": c_hat, "lambda_hat": lam, "in_flight": q, "cost": cost})


class EWMA(_Forecasting):
    """Merge when the burst forecast Ĉ(t) = q(t) + λ̂·D is low.

    Rule: merge at the first corridor check whose Ĉ is at or below the ``quantile`` of the
    forecasts seen at this run's earlier checks; with fewer than ``warmup`` earlier checks,
    defer (the corridor still forces a merge at h_max).  Defaults alpha = 0.2,
    quantile = 0.25, warmup = 10, bins of one inner step.
    """

    name = "ewma"

    def __init__(self, alpha: float = 0.2, quantile: float = 0.25, warmup: int = 10,
                 bin_s: float | None = None):
        super().__init__(alpha=float(alpha), quantile=float(quantile), warmup=int(warmup),
                         bin_s=bin_s)
        self.alpha, self.quantile, self.warmup = float(alpha), float(quantile), int(warmup)

    def decide(self, state: DecisionState) -> Decision:
        c_hat, lam, q = self.forecast(state)
        if len(self.history) < max(1, self.warmup):
            threshold, merge = float("nan"), False
        else:
            threshold = sorted_quantile(self.history, self.quantile)
            merge = c_hat <= threshold
        bisect.insort(self.history, c_hat)          # kept sorted: O(log n) quantiles
        return Decision(merge, c_hat, {"c_hat": c_hat, "lambda_hat": lam, "in_flight": q,
                                       "threshold": threshold})
