"""The policy interface shared by every backend (sim, torch, vllm).

A backend owns the clock and the corridor; a policy only answers "merge now?" at each
corridor check.  The backend calls :meth:`Policy.reset` once per run, then
:meth:`Policy.decide` at every decision point where ``steps_since_merge >= h_min``, the
last merge started at least ``min_gap_s`` earlier, and no merge is forced (at ``h_max``
steps, or ``max_gap_s`` seconds after the last start, the backend merges without asking
and records it as ``forced``).  Only :class:`DecisionState` — information observed up to
``t_s`` — reaches ``decide``; a policy that needs the future must set ``oracle = True`` and
gets the whole trace through :class:`RunContext.future_requests`.

Planned policies (``matched_random``, ``calibrated_offline``) expose ``planned_starts``
after ``reset``: merge start times in seconds.  Backends that can start a merge at an exact
time (sim) should honour them exactly; others merge at the first decision point at or after
each planned start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Corridor:
    """Merge corridor: in inner steps (h_min/h_max) and in seconds between merge starts."""

    h_min: int
    h_max: int
    min_gap_s: float
    max_gap_s: float


@dataclass
class RunContext:
    """What a policy may know before the run starts."""

    seed: int
    rng: np.random.Generator
    merge_duration_s: float
    corridor: Corridor
    span: tuple[float, float]          # observed span [t_first_request, t_end - D] for starts
    horizon_s: float
    inner_step_s: float                # nominal/measured inner-step time
    future_requests: object | None = None   # oracles only: DataFrame (arrival_s, expected end)
    reference_k: int | None = None     # matched_random: K of the completed reference run
    reference_run_id: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class DecisionState:
    """Decision-time information.  Everything here was observable at ``t_s``."""

    t_s: float
    steps_since_merge: int
    total_steps: int
    merges_done: int
    last_merge_end_s: float | None
    inner_step_s: float
    queue_waiting: int = 0             # requests waiting (vllm:num_requests_waiting)
    queue_running: int = 0             # requests running (vllm:num_requests_running)
    pressure: float = 0.0              # fleet/serving pressure in [0, 1]
    net: float = 0.0                   # network utilisation in [0, 1]
    ckpt: float = 0.0                  # checkpoint I/O pressure in [0, 1]
    loss_drop: float = 0.0             # loss decrease since the last merge
    tokens_since_sync: int = 0
    staleness_s: float = 0.0           # seconds since the last merge ended (or run start)
    recent_arrivals: np.ndarray = field(default_factory=lambda: np.empty(0))  # times <= t_s


@dataclass(frozen=True)
class Decision:
    merge: bool
    score: float | None = None
    info: dict = field(default_factory=dict)


class Policy:
    """Base class.  Subclasses set ``name`` and implement :meth:`decide`."""

    name: str = "policy"
    oracle: bool = False
    role: str = "policy"               # "policy" | "matched_random" | "no_sync"
    # DecisionState fields the policy reads that a backend must observe from the serving
    # engine (queue_running, queue_waiting, pressure); against a server without those
    # metrics the run is refused instead of handing the policy zeros.
    requires_signals: tuple[str, ...] = ()

    def __init__(self, **params):
        self.params = dict(params)
        self.planned_starts: np.ndarray | None = None

    def reset(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def decide(self, state: DecisionState) -> Decision:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict:
        """Name, oracle flag and every parameter, for run.json."""
        return {"name": self.name, "oracle": self.oracle, "params": dict(self.params)}

    def run_meta(self) -> dict:
        """Top-level run.json keys this policy adds (none by default)."""
        return {}
