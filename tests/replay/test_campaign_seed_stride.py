"""seed_stride_s: each seed of a file-trace campaign replays its own window (its own trace
realisation), so seeds are independent replicates of the traffic, not one counted n times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalkit.replay.campaign import load_campaign
from evalkit.replay.job import _build_trace
from evalkit.runlog.design import arrival_fingerprint

AZURE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "azure_llm_2023_code.csv"


def _campaign(tmp_path, stride: str) -> object:
    toml = tmp_path / "c.toml"
    toml.write_text(f'''regime = "r"
seeds = 3
matched_random_draws = 1
horizon_s = 120.0
merge_duration_s = 8.0
inner_step_s = 0.5
h_min = 32
h_max = 128
[slo]
e2e_s = 8.0
[trace]
path = "{AZURE.as_posix()}"
format = "azure"
start_s = 100.0
end_s = 220.0
{stride}
[backend]
name = "sim"
[[policies]]
name = "fixed_h"
''')
    return load_campaign(toml)


@pytest.mark.skipif(not AZURE.exists(), reason="shared/traces is not beside the checkout")
def test_each_seed_gets_its_own_window(tmp_path):
    camp = _campaign(tmp_path, "seed_stride_s = 120.0")
    traces = [_build_trace(camp, s) for s in range(3)]
    prints = {arrival_fingerprint(t.arrival_s) for t in traces}
    assert len(prints) == 3
    full = _build_trace(_campaign(tmp_path, ""), 0)
    for s, t in enumerate(traces):           # rebased to 0, within the 120 s window
        assert t.arrival_s.min() >= 0 and t.arrival_s.max() < 120.0
    assert np.array_equal(traces[0].arrival_s, full.arrival_s)
    same = {arrival_fingerprint(_build_trace(_campaign(tmp_path, ""), s).arrival_s)
            for s in range(3)}
    assert len(same) == 1                    # without a stride every seed replays one window
