"""Causality tested, not declared: policies see a read-only copy of the arrivals so far (on
the probe and on the simulator), and the causality probe catches code that reaches the
future (evalkit/policies/causality.py)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from evalkit.policies import POLICIES, Decision, Policy
from evalkit.policies.causality import probe_causality
from evalkit.policies.context import arrivals_so_far
from evalkit.replay.backends.sim.engine import replay
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces import generate
from evalkit.replay.traces.model import Trace


class BaseReader(Policy):
    """The attack: merges when the *next* 10 s are quiet, read through the arrays' base."""

    name = "base_reader"

    def decide(self, state):
        seen = state.recent_arrivals
        whole = seen.base if isinstance(seen.base, np.ndarray) else seen
        ahead = int(np.sum((whole > state.t_s) & (whole <= state.t_s + 10.0)))
        return Decision(merge=ahead < 20, score=float(ahead))


class FrameReader(Policy):
    """The attack without the base: walks up the call stack to the driver's whole stream."""

    name = "frame_reader"

    def decide(self, state):
        frame, ahead = inspect.currentframe().f_back, 0
        while frame is not None:
            whole = frame.f_locals.get("arrivals")
            holder = frame.f_locals.get("self")
            whole = whole if isinstance(whole, np.ndarray) else getattr(holder, "sent", None)
            if isinstance(whole, np.ndarray):
                ahead = int(np.sum((whole > state.t_s) & (whole <= state.t_s + 10.0)))
                break
            frame = frame.f_back
        return Decision(merge=ahead < 20, score=float(ahead))


def test_arrivals_so_far_is_a_read_only_copy_never_a_view_of_the_trace():
    trace = np.arange(10.0)
    seen = arrivals_so_far(trace, 4)
    assert seen.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert seen.base is None and not np.shares_memory(seen, trace)
    with pytest.raises(ValueError):
        seen[0] = 99.0


def test_the_simulator_hands_a_policy_only_the_arrivals_so_far():
    seen = []

    class Recorder(Policy):
        name = "recorder"

        def decide(self, state):
            a = state.recent_arrivals
            seen.append((state.t_s, a.base is None, a.flags.writeable,
                         float(a.max()) if len(a) else -1.0))
            return Decision(merge=False)

    trace = generate("poisson", seed=0, rate=2.0, duration_s=60.0)
    spec = ReplaySpec(run_id="r", seed=0, regime="x", horizon_s=60.0, h_min=4, h_max=10 ** 6)
    replay(spec, trace, Recorder())
    assert seen
    assert all(own and not writeable and last <= t for t, own, writeable, last in seen)


def test_the_base_reader_learns_nothing_from_the_simulator():
    """Through the simulator the attack's decisions do not depend on what comes later."""
    trace = generate("poisson", seed=0, rate=2.0, duration_s=60.0)
    late = trace.requests["arrival_s"] > 30.0
    changed = trace.requests.copy()
    changed.loc[late, "arrival_s"] = 30.0 + (changed.loc[late, "arrival_s"] - 30.0) * 0.3
    changed = changed.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    other = Trace(changed, trace.name, dict(trace.meta))
    spec = ReplaySpec(run_id="r", seed=0, regime="x", horizon_s=60.0, h_min=4, h_max=10 ** 6)

    def decisions(t):
        out = replay(spec, t, BaseReader())
        d = out.decisions
        return d[d.t_s < 30.0][["t_s", "action", "score"]].reset_index(drop=True)

    assert decisions(trace).equals(decisions(other))


@pytest.mark.parametrize("cls", [BaseReader, FrameReader])
def test_the_probe_catches_a_policy_that_reads_the_future(cls):
    causal, why = probe_causality(cls)
    if cls is BaseReader:      # it is handed copies, so it sees nothing ahead: causal
        assert causal is True
        return
    assert causal is False and "reads the future" in why and "changed" in why


@pytest.mark.parametrize("name", ["fixed_h", "pressure_gate", "random_deferral", "wa",
                                  "calibrated_online", "ewma", "no_sync"])
def test_every_builtin_decision_time_policy_passes_the_probe(name):
    causal, why = probe_causality(POLICIES[name])
    assert causal is True, why


def test_a_policy_the_probe_cannot_run_is_not_shown_causal():
    class Broken(Policy):
        name = "broken"

        def decide(self, state):
            raise RuntimeError("boom")

    causal, why = probe_causality(Broken)
    assert causal is None and "RuntimeError: boom" in why

    class Coin(Policy):
        name = "coin"

        def decide(self, state):
            return Decision(merge=bool(np.random.default_rng().random() < 0.5))

    causal, why = probe_causality(Coin)
    assert causal is None and "differently on the same input" in why
