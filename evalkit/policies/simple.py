"""Baselines that need no forecast: no_sync, fixed_h, pressure_gate, random_deferral."""

from __future__ import annotations

from evalkit.policies.base import Decision, DecisionState, Policy, RunContext


class NoSync(Policy):
    """Never merges; the backend must not force merges for it (``never_merges``)."""

    name = "no_sync"
    role = "no_sync"
    never_merges = True

    def decide(self, state: DecisionState) -> Decision:
        return Decision(False, None)


class FixedH(Policy):
    """Merge every ``H`` inner steps (H inside the corridor, else it is clipped by it)."""

    name = "fixed_h"

    def __init__(self, H: int = 256):
        super().__init__(H=int(H))
        self.H = int(H)

    def decide(self, state: DecisionState) -> Decision:
        return Decision(state.steps_since_merge >= self.H, float(state.steps_since_merge))


class PressureGate(Policy):
    """Merge at the first corridor check where fleet pressure <= theta (defer while above)."""

    name = "pressure_gate"
    requires_signals = ("pressure",)

    def __init__(self, theta: float = 0.6):
        super().__init__(theta=float(theta))
        self.theta = float(theta)

    def decide(self, state: DecisionState) -> Decision:
        return Decision(state.pressure <= self.theta, float(state.pressure))


class RandomDeferral(Policy):
    """At every corridor check defer with probability ``p`` (seeded by the run context)."""

    name = "random_deferral"

    def __init__(self, p: float = 0.9):
        super().__init__(p=float(p))
        self.p = float(p)

    def reset(self, ctx: RunContext) -> None:
        super().reset(ctx)
        self.rng = ctx.rng

    def decide(self, state: DecisionState) -> Decision:
        u = float(self.rng.random())
        return Decision(u >= self.p, u)
