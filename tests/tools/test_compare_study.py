"""tools/compare_study.py: its simulated comparisons go through the tool's decision, its
truths are what the docstring says, and a short run writes every table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
study = load_script(ROOT / "tools" / "compare_study.py", "compare_study")


def test_paired_runs_share_the_host_factor_and_b_is_scaled_by_the_effect():
    rng = np.random.default_rng(0)
    a, b = study.draw_runs(rng, 4000, "calm", 0.10, 1, True)
    assert a.shape == (1, 4000)
    ratio = np.log(b / a)
    assert abs(np.median(ratio) - np.log(0.9)) < 0.01
    assert ratio.std() < 0.2                 # the host factor cancels within a pair
    a_u, b_u = study.draw_runs(rng, 4000, "calm", 0.0, 1, False)
    assert np.log(b_u / a_u).std() > 0.25    # ... and not between independent runs
    assert abs(a.mean() - 1.0) < 0.02


def test_a_short_run_writes_every_table(capsys):
    import gc
    collect = gc.collect
    try:
        study.main(["--reps", "4"])
    finally:
        gc.collect = collect
    text = capsys.readouterr().out
    assert "## Identical configurations (A = B)" in text and "## B 10% faster" in text
    assert "| max batch 1 | max batch 8 | ttft_p90 | better |" in text
