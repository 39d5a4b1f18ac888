"""A real paced run of the torch backend with the contending merge (CPU, tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.replay.backends.torch import replay
from evalkit.replay.backends.torch.rig import close_rig
from tests.replay.backends.torch.test_rig import PlannedAt, make_spec, small_trace
from tests.support.optional import installed

pytestmark = [installed("torch", "transformers", "aiohttp"), pytest.mark.torch]

PERIOD = 0.1


@pytest.mark.slow
def test_a_paced_run_keeps_its_clock_and_a_clock_it_cannot_keep_fails_the_run():
    horizon = 10.0
    trace = small_trace(horizon, 1.0)
    paced = {"step_period_s": PERIOD, "max_missed_share": 1.0, "merge_load": "memory",
             "merge_min_s": 1.0, "merge_threads": 2, "merge_bytes": 8 * 2**20}
    try:
        out = replay(make_spec(horizon, **paced), trace, PlannedAt([3.0, 6.5]))
        assert out.complete, out.error
        pacing = out.effective["pacing"]
        assert pacing["ticks"] == len(out.steps) > 0
        assert 0 <= pacing["missed_ticks"] <= pacing["ticks"]
        # every step starts at or after its own tick (ticks at j * PERIOD after t0; after a
        # merge the first tick at or after its end): no more steps than the clock allows
        assert len(out.steps) <= horizon / PERIOD + 1
        merge_end = dict(zip(out.merges["inner_step"], out.merges["end_s"]))
        tick = 0
        for step, start in zip(out.steps["step"], out.steps["start_s"]):
            if step - 1 in merge_end:
                tick = max(tick, int(np.ceil(merge_end[step - 1] / PERIOD - 1e-9)))
            assert start >= tick * PERIOD - 1e-6, (step, start, tick)
            tick += 1
        # the contending merge fills merge_min_s
        assert len(out.merges) == 2
        assert (out.merges["duration_s"] >= 1.0).all()

        # a clock far below the step time: nearly every tick is missed, the run fails
        out = replay(make_spec(horizon, step_period_s=0.001, max_missed_share=0.0), trace,
                     PlannedAt([3.0]))
        assert not out.complete
        assert "paced trainer missed" in out.error
        assert out.effective["pacing"]["missed_ticks"] > 0
    finally:
        close_rig()
