"""Holt (level + trend) forecast of requests in flight, and the policy that defers on it.

At each corridor check the policy sees ``q(t) = queue_waiting + queue_running`` (scraped
from the serving engine: decision-time information only) and updates Holt's linear
exponential smoothing for irregularly spaced observations::

    level_t = alpha * q(t) + (1 - alpha) * (level + trend * dt)
    trend_t = beta * (level_t - level) / dt + (1 - beta) * trend

(the first check initialises level = q, trend = 0).  The forecast of the load at the end
of a merge that starts now is ``F = max(0, level_t + trend_t * D)``.  The policy merges at
the first check whose F is at or below the median of the forecasts of this run's earlier
checks, and defers while F is above it; during the first ``warmup`` checks it defers (the
corridor still forces a merge at ``h_max``).
"""

from __future__ import annotations

import bisect

from evalkit.policies import Decision, DecisionState, Policy, RunContext


class HoltForecaster:
    """Holt's linear smoothing over observations at increasing times."""

    def __init__(self, alpha: float, beta: float):
        self.alpha, self.beta = float(alpha), float(beta)
        self.level: float | None = None
        self.trend = 0.0
        self.t: float | None = None

    def update(self, t_s: float, value: float) -> None:
        if self.level is None:
            self.level, self.t = float(value), float(t_s)
            return
        dt = float(t_s) - self.t
        if dt <= 0:                       # same instant: refresh the level only
            self.level = self.alpha * value + (1 - self.alpha) * self.level
            return
        prior = self.level + self.trend * dt
        level = self.alpha * value + (1 - self.alpha) * prior
        self.trend = self.beta * (level - self.level) / dt + (1 - self.beta) * self.trend
        self.level, self.t = level, float(t_s)

    def forecast(self, ahead_s: float) -> float:
        return max(0.0, self.level + self.trend * float(ahead_s))


def running_median(sorted_values: list) -> float:
    n = len(sorted_values)
    mid = n // 2
    return float(sorted_values[mid] if n % 2 else
                 0.5 * (sorted_values[mid - 1] + sorted_values[mid]))


class HoltDeferral(Policy):
    """Defer merges while the Holt forecast of in-flight requests is above its running median."""

    name = "holt_defer"
    oracle = False
    requires_signals = ("queue_running", "queue_waiting")

    def __init__(self, alpha: float = 0.5, beta: float = 0.1, warmup: int = 5,
                 ahead_s: float | None = None):
        if not (0 < alpha <= 1 and 0 <= beta <= 1):
            raise ValueError(f"need 0 < alpha <= 1 and 0 <= beta <= 1, got {alpha}, {beta}")
        if warmup < 0 or (ahead_s is not None and ahead_s < 0):
            raise ValueError("warmup and ahead_s must be >= 0")
        super().__init__(alpha=float(alpha), beta=float(beta), warmup=int(warmup),
                         ahead_s=ahead_s)
        self.alpha, self.beta, self.warmup = float(alpha), float(beta), int(warmup)
        self.ahead_s = ahead_s

    def reset(self, ctx: RunContext) -> None:
        super().reset(ctx)
        self.holt = HoltForecaster(self.alpha, self.beta)
        self.history: list[float] = []
        self.ahead = ctx.merge_duration_s if self.ahead_s is None else float(self.ahead_s)

    def decide(self, state: DecisionState) -> Decision:
        in_flight = state.queue_waiting + state.queue_running
        self.holt.update(state.t_s, in_flight)
        f = self.holt.forecast(self.ahead)
        if len(self.history) < max(1, self.warmup):
            threshold, merge = float("nan"), False
        else:
            threshold = running_median(self.history)
            merge = f <= threshold
        bisect.insort(self.history, f)
        return Decision(merge, f, {"forecast": f, "median": threshold, "in_flight": in_flight})
