"""Causality tested, not declared: does changing the future change a policy's past decisions?

:func:`probe_causality` drives a policy class over a synthetic arrival stream the way a
backend does (one :class:`DecisionState` per inner step, arrivals so far as a read-only copy
from :func:`evalkit.policies.context.arrivals_so_far`), then again with every arrival after a
cut replaced by a different stream, and compares the decisions before the cut.  A policy that
uses decision-time information only decides the same up to the cut; one that reaches the
future (through the arrays it is handed or any other channel the driver exposes) does not.
It is a test of the code, run by the audit on the class the run's recorded code identity
resolves to; a pass is evidence for the interface the backends give, not a proof.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np

from evalkit.policies.base import Corridor, DecisionState, RunContext
from evalkit.policies.context import arrivals_so_far

__all__ = ["PROBE", "probe_causality"]

# the probe's window: a bursty stream over the horizon, cut twice
PROBE = {"horizon_s": 240.0, "step_s": 0.5, "merge_s": 5.0, "cuts_s": (80.0, 160.0),
         "seed": 20261205}


def _bursty_arrivals(rng: np.random.Generator, start_s: float, end_s: float,
                     low: float, high: float, period_s: float) -> np.ndarray:
    """Poisson arrivals whose rate alternates between ``low`` and ``high`` every period."""
    out, t = [], start_s
    while t < end_s:
        stop = min(end_s, t + period_s)
        rate = high if int(t // period_s) % 2 else low
        n = rng.poisson(rate * (stop - t))
        out.append(np.sort(rng.uniform(t, stop, n)))
        t = stop
    return np.concatenate(out) if out else np.empty(0)


def _streams() -> tuple[np.ndarray, dict[float, np.ndarray]]:
    """The stream, and for each cut the stream whose arrivals after the cut are another's."""
    rng = np.random.default_rng(PROBE["seed"])
    horizon = PROBE["horizon_s"]
    base = _bursty_arrivals(rng, 0.0, horizon, 2.0, 12.0, 20.0)
    perturbed = {}
    for cut in PROBE["cuts_s"]:
        later = _bursty_arrivals(rng, cut, horizon, 30.0, 0.5, 7.0)
        perturbed[cut] = np.concatenate([base[base <= cut], later[later > cut]])
    return base, perturbed


def _decide_all(cls, params: dict, arrivals: np.ndarray) -> list[tuple[float, bool, object]]:
    """Every decision the policy takes over ``arrivals``: (t, merge, score)."""
    step, merge_s, horizon = PROBE["step_s"], PROBE["merge_s"], PROBE["horizon_s"]
    policy = cls(**params)
    policy.reset(RunContext(
        seed=0, rng=np.random.default_rng(PROBE["seed"]), merge_duration_s=merge_s,
        corridor=Corridor(1, 1_000_000, 0.0, math.inf), span=(0.0, horizon - merge_s),
        horizon_s=horizon, inner_step_s=step))
    since, merges, last_end, busy_until = 0, 0, None, -1.0
    out = []
    for i in range(1, int(horizon / step)):
        t = i * step
        if t < busy_until or t + merge_s > horizon:
            continue
        since += 1
        n = int(np.searchsorted(arrivals, t, side="right"))
        waiting = n - int(np.searchsorted(arrivals, t - 2.0, side="right"))
        running = int(np.searchsorted(arrivals, t - 2.0, side="right")) - int(
            np.searchsorted(arrivals, t - 6.0, side="right"))
        state = DecisionState(
            t_s=t, steps_since_merge=since, total_steps=i, merges_done=merges,
            last_merge_end_s=last_end, inner_step_s=step, queue_waiting=waiting,
            queue_running=running, pressure=min(1.0, (waiting + running) / 64.0),
            loss_drop=0.01 * since, tokens_since_sync=1000 * since,
            staleness_s=t - (last_end or 0.0), recent_arrivals=arrivals_so_far(arrivals, n))
        d = policy.decide(state)
        score = None if d.score is None else float(d.score)
        out.append((t, bool(d.merge), score))
        if d.merge:
            merges, since, last_end, busy_until = merges + 1, 0, t + merge_s, t + merge_s
    return out


def _same(a, b) -> bool:
    return a[:2] == b[:2] and (a[2] == b[2] or (a[2] is not None and b[2] is not None
                                                and math.isnan(a[2]) and math.isnan(b[2])))


def _first_difference(a: list, b: list, before_s: float) -> float | None:
    """The first decision time before ``before_s`` at which the two runs differ."""
    a = [d for d in a if d[0] < before_s]
    b = [d for d in b if d[0] < before_s]
    for x, y in zip(a, b):
        if not _same(x, y):
            return min(x[0], y[0])
    if len(a) != len(b):
        return (a[len(b)] if len(a) > len(b) else b[len(a)])[0]
    return None


def probe_causality(cls, params: dict | None = None) -> tuple[bool | None, str]:
    """(causal, why): True when no cut changes an earlier decision, False when one does,
    None when the probe cannot tell (the policy raises, or decides differently on the same
    input twice)."""
    return _probe(cls, json.dumps(params or {}, sort_keys=True, default=str))


@functools.lru_cache(maxsize=64)
def _probe(cls, params_json: str) -> tuple[bool | None, str]:
    params = json.loads(params_json)
    base, perturbed = _streams()
    try:
        first = _decide_all(cls, params, base)
        again = _decide_all(cls, params, base)
        if _first_difference(first, again, math.inf) is not None:
            return None, ("decides differently on the same input twice, so the causality "
                          "probe cannot tell")
        for cut, stream in perturbed.items():
            changed = _first_difference(first, _decide_all(cls, params, stream), cut)
            if changed is not None:
                return False, (f"reads the future: with the arrivals after t = {cut:g} s "
                               f"changed, its decision at t = {changed:g} s changed "
                               "(causality probe)")
    except Exception as exc:  # the plugin's own error: the probe cannot tell, it is not ours
        return None, f"the causality probe could not run it ({type(exc).__name__}: {exc})"
    n = len(first)
    return True, (f"its {n} decisions before each of {len(perturbed)} cuts did not change when "
                  "the arrivals after the cut did (causality probe)")
