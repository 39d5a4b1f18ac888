"""What one replay is asked to do, and what a backend hands back to be written.

Every backend module (``evalkit.replay.backends.<name>``) exposes::

    def replay(spec: ReplaySpec, trace: Trace, policy: Policy, *, progress=None) -> RunOutput

and never writes files itself: :func:`evalkit.replay.runner.run_one` builds ``run.json``
from the spec, the policy and the output, and writes the run atomically.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class ReplaySpec:
    run_id: str
    seed: int
    regime: str
    role: str = "policy"                 # "policy" | "matched_random" | "no_sync"
    draw: int | None = None
    matched_to: str | None = None
    reference_k: int | None = None       # matched_random: K observed in the reference run
    reference_run_id: str | None = None
    backend: str = "sim"
    merge_duration_s: float = 8.0
    horizon_s: float = 600.0
    inner_step_s: float = 0.5
    h_min: int = 128
    h_max: int = 512
    min_gap_s: float | None = None       # default: h_min * inner_step_s
    max_gap_s: float | None = None       # default: h_max * inner_step_s
    slo: dict = field(default_factory=lambda: {"e2e_s": 10.0, "ttft_s": None, "tpot_s": None})
    backend_config: dict = field(default_factory=dict)   # backend-specific knobs (requested)
    policy_seed: int | None = None       # seed of the policy's Generator (default: derived)
    future_requests: object | None = None  # oracles only: DataFrame(arrival_s, end_s)
    # a real backend's capacity probe recorded by an earlier run of this seed (run_id, shape,
    # values): every run of a seed carries one measurement, a re-run included
    seed_probe: dict | None = None

    def gaps(self) -> tuple[float, float]:
        lo = self.min_gap_s if self.min_gap_s is not None else self.h_min * self.inner_step_s
        hi = self.max_gap_s if self.max_gap_s is not None else self.h_max * self.inner_step_s
        return float(lo), float(hi)


@dataclass
class RunOutput:
    """A backend's result.  ``complete=False`` with ``error`` set when the run broke off."""

    requests: pd.DataFrame
    merges: pd.DataFrame
    steps: pd.DataFrame | None = None
    signals: pd.DataFrame | None = None
    decisions: pd.DataFrame | None = None
    effective: dict = field(default_factory=dict)   # effective settings (MLPerf-style)
    rng_seeds: dict = field(default_factory=dict)
    inner_step_s: float | None = None               # measured inner-step time
    complete: bool = True
    error: str | None = None
    notes: list[str] = field(default_factory=list)
