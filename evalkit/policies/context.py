"""Build the :class:`RunContext` a backend hands to ``policy.reset`` (shared by all backends)."""

from __future__ import annotations

import zlib

import numpy as np

from evalkit.policies.base import Corridor, RunContext

__all__ = ["arrivals_so_far", "derived_seed", "make_context", "observed_span", "policy_seed"]


def derived_seed(seed: int, *labels) -> int:
    """A stable 63-bit seed from ``seed`` and labels (crc32 of the labels; not Python's hash)."""
    tag = zlib.crc32("|".join(str(x) for x in labels).encode())
    ss = np.random.SeedSequence([int(seed), tag])
    return int(ss.generate_state(2, dtype=np.uint32).astype(np.uint64).dot([1, 1 << 31]))


def arrivals_so_far(arrivals, n: int) -> np.ndarray:
    """The first ``n`` arrival times as a read-only copy: what a policy may see at a decision.
    Never a slice of the trace's array (a view's ``.base`` is the whole trace, future included)."""
    seen = np.array(arrivals[:n], dtype=float)
    seen.flags.writeable = False
    return seen


def policy_seed(spec) -> int:
    if getattr(spec, "policy_seed", None) is not None:
        return int(spec.policy_seed)
    return derived_seed(spec.seed, "policy", spec.role, spec.matched_to or "", spec.draw or 0)


def observed_span(spec, trace) -> tuple[float, float]:
    """Merge starts whose window is surely observed: [t_first_request, t_last_request − D].

    The observed span ends when the last request completes (K counts the windows inside
    it), which is not known before the run; the last scheduled arrival is, and the span
    always reaches it.  A planned window inside this range is therefore always counted.
    """
    arrivals = trace.requests["arrival_s"]
    t_first, t_last = float(arrivals.iloc[0]), float(arrivals.iloc[-1])
    return t_first, min(float(spec.horizon_s), t_last) - float(spec.merge_duration_s)


def make_context(spec, trace, policy=None, *, inner_step_s: float | None = None) -> RunContext:
    """Context for ``policy.reset``; the oracle request intervals reach oracle policies only."""
    oracle = policy is None or getattr(policy, "oracle", False)
    lo, hi = spec.gaps()
    return RunContext(
        seed=int(spec.seed), rng=np.random.default_rng(policy_seed(spec)),
        merge_duration_s=float(spec.merge_duration_s),
        corridor=Corridor(int(spec.h_min), int(spec.h_max), lo, hi),
        span=observed_span(spec, trace), horizon_s=float(spec.horizon_s),
        inner_step_s=float(inner_step_s or spec.inner_step_s),
        future_requests=getattr(spec, "future_requests", None) if oracle else None,
        reference_k=spec.reference_k, reference_run_id=spec.reference_run_id)
