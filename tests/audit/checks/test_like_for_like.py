"""like_for_like: the trainer facts of a run over its observed span."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evalkit.audit.checks.like_for_like import run_facts, training_facts


def _ctx(tmp_path, arrival, end, steps, horizon=100.0, merges=()):
    (tmp_path / "steps.parquet").touch()
    tables = {
        "requests": {"arrival_s": np.asarray(arrival, float), "end_s": np.asarray(end, float),
                     "request_id": np.arange(len(arrival)),
                     "prompt_tokens": np.full(len(arrival), 8),
                     "output_tokens": np.full(len(arrival), 4)},
        "merges": {"start_s": np.asarray([m[0] for m in merges], float),
                   "end_s": np.asarray([m[1] for m in merges], float),
                   "bytes": np.asarray([m[2] for m in merges], float)},
        "steps": {"start_s": np.asarray([s for s, _ in steps], float),
                  "end_s": np.asarray([e for _, e in steps], float)}}
    runset = SimpleNamespace(_cache={}, _dirs={"r": tmp_path},
                             columns=lambda run, table, cols: {c: tables[table][c] for c in cols})
    return SimpleNamespace(runset=runset, _meta=lambda run: {"horizon_s": horizon})


def test_the_span_ends_at_the_last_request_end_not_the_last_arrival(tmp_path):
    # arrivals stop at 10 s, the last request ends at 50 s; the trainer stepped over [0, 30]
    steps = [(0.0, 10.0), (10.0, 20.0), (20.0, 30.0)]
    facts = run_facts(_ctx(tmp_path, [0.0, 10.0], [1.0, 50.0], steps), "r")
    assert facts["coverage"] == pytest.approx(30.0 / 50.0)


def test_the_span_is_capped_at_the_horizon_and_an_unfinished_request_ends_there(tmp_path):
    steps = [(0.0, 40.0)]
    facts = run_facts(_ctx(tmp_path, [0.0, 10.0], [1.0, float("nan")], steps, horizon=80.0), "r")
    assert facts["coverage"] == pytest.approx(40.0 / 80.0)
    capped = run_facts(_ctx(tmp_path, [0.0, 10.0], [1.0, 120.0], steps, horizon=80.0), "r")
    assert capped["coverage"] == pytest.approx(40.0 / 80.0)


def test_training_facts_coverage_idle_and_overlaps():
    steps = {"start_s": [0.0, 4.0, 3.5, 20.0], "end_s": [3.0, 6.0, 5.0, 25.0]}
    merges = {"start_s": [8.0], "end_s": [12.0]}
    f = training_facts(steps, merges, (0.0, 50.0))
    assert f["logged"] and f["coverage"] == pytest.approx(25.0 / 50.0)
    assert f["overlaps"] == 1 and f["idle_s"] == pytest.approx(8.0)     # 12 s to 20 s
    assert f["step_median_s"] == pytest.approx(2.5)          # of 3, 2, 1.5 and 5 s
    none = training_facts(None, merges, (0.0, 50.0))
    assert not none["logged"] and np.isnan(none["coverage"])
    # a zero-length last step: the idle time before it is inside the extent
    short = training_facts({"start_s": [0.0, 20.0], "end_s": [10.0, 20.0]},
                           {"start_s": [], "end_s": []}, (0.0, 50.0))
    assert short["idle_s"] == pytest.approx(10.0)
    # a span that does not start at 0: the share is of its own length
    late = training_facts({"start_s": [110.0], "end_s": [135.0]}, merges, (100.0, 150.0))
    assert late["coverage"] == pytest.approx(25.0 / 50.0)


@pytest.mark.parametrize("merges, said", [
    ((), None),                                           # nothing merged: nothing to compare
    (((20.0, 22.0, 4096.0),), "[4096]"),                  # one merge: its payload
    (((20.0, 22.0, 4096.0), (60.0, 62.0, 512.0)), "[512, 4096]"),
    (((20.0, 22.0, float("nan")),), "unknown"),
])
def test_merge_payloads_are_recorded_from_the_first_merge_on(tmp_path, merges, said):
    facts = run_facts(_ctx(tmp_path, [0.0, 10.0], [1.0, 50.0], [(0.0, 30.0)],
                           merges=merges), "r")
    assert facts["merge_bytes"] == said


def _seed_with(idle_s, coverage=1.0, step_median_s=1.0):
    import pandas as pd

    base = {"requests": "same", "merge_bytes": None, "logged": True, "overlaps": 0,
            "coverage": 1.0, "idle_s": 0.0, "step_median_s": 1.0}
    facts = {"p": {**base, "idle_s": idle_s, "coverage": coverage,
                   "step_median_s": step_median_s},
             "d0": base, "d1": base}
    ctx = SimpleNamespace(runset=SimpleNamespace(_cache={("like_for_like", r): f
                                                         for r, f in facts.items()}),
                          _meta=lambda run_id: {})
    pair = SimpleNamespace(seed=4, policy_run="p", no_sync=None,
                           draws=pd.DataFrame({"run_id": ["d0", "d1"]}))
    return ctx, pair


@pytest.mark.parametrize("idle_s, flagged", [(3.0, False), (3.0 + 1e-9, True)])
def test_idle_time_is_flagged_only_beyond_max_idle_steps_of_the_seeds_step(idle_s, flagged):
    from evalkit.audit.checks.like_for_like import seed_differences

    out = seed_differences(*_seed_with(idle_s), step_rel_tol=0.25, min_coverage=0.9,
                           max_idle_steps=3.0)
    assert bool(out) is flagged
    if flagged:
        assert out == ["seed 4: p (policy): the trainer stood idle for 3 s (more than 3 of the "
                       "seed's 1 s steps)"]


@pytest.mark.parametrize("coverage, step, flagged", [(0.9, 1.0, False), (0.9 - 1e-9, 1.0, True),
                                                     (1.0, 1.25, False), (1.0, 1.25 + 1e-6, True)])
def test_coverage_and_step_length_are_flagged_only_past_their_limits(coverage, step, flagged):
    from evalkit.audit.checks.like_for_like import seed_differences

    # the seed's median step is the median of its runs' medians (1 s here)
    out = seed_differences(*_seed_with(0.0, coverage, step), step_rel_tol=0.25,
                           min_coverage=0.9, max_idle_steps=3.0)
    assert bool(out) is flagged
