"""Design facts of a run (``evalkit.runlog.design``) against independent computations: arrival
fingerprints (hashlib), tied and identical shares, corridor tolerance and violations."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from evalkit.runlog import design


# ----------------------------------------------------------------------------- design facts


def _fingerprint_reference(arrivals) -> str:
    a = sorted(x for x in arrivals if math.isfinite(x))
    ticks = np.array([round(x * 1_000_000) for x in a], dtype=np.int64)
    return hashlib.sha256(str(len(a)).encode() + ticks.tobytes()).hexdigest()[:32]


@pytest.mark.parametrize("arrivals", [[], [1.0], [0.5, 0.25, 3.000001], [2.0, float("nan"), 1.0],
                                      [1.0, 1.0, 7.123456]])
def test_arrival_fingerprint_matches_hashlib(arrivals):
    assert design.arrival_fingerprint(arrivals) == _fingerprint_reference(arrivals)


def test_arrival_fingerprint_resolves_one_microsecond():
    assert design.arrival_fingerprint([1.0]) != design.arrival_fingerprint([1.000001])
    assert design.arrival_fingerprint([1.0]) == design.arrival_fingerprint([1.0000001])
    assert design.arrival_fingerprint([1.0, 2.0]) == design.arrival_fingerprint([2.0, 1.0])


def _tied_brute(sent, end, window):
    ends = [e for e in end if math.isfinite(e)]
    sends = [s for s in sent if math.isfinite(s)]
    if not sends or not ends:
        return 0.0
    tied = sum(1 for s in sends if any(0 <= s - e <= window for e in ends if e <= s)
               and s - max(e for e in ends if e <= s) <= window)
    return tied / len(sends)


@pytest.mark.parametrize("sent, end, expected", [
    ([1.0005], [1.0], 1.0), ([1.001], [1.0], 1.0), ([1.0011], [1.0], 0.0), ([1.0], [1.0], 1.0),
    ([0.5], [1.0], 0.0), ([1.0005, 5.0], [1.0, 3.0], 0.5), ([5.0, 1.0005], [3.0, 1.0], 0.5),
    ([float("nan"), 1.0005], [1.0], 1.0), ([float("nan")], [1.0], 0.0), ([1.0], [], 0.0),
    ([1.0], [float("nan")], 0.0), ([2.0005, 3.0], [1.0, 2.0, 2.5], 0.5),
    ([1.0005, 2.0005, 9.0], [1.0, 2.0], 2 / 3), ([1.0004, 1.0008], [1.0], 1.0),
    ([1.5], [1.0, 2.0], 0.0), ([0.001], [0.0], 1.0), ([0.0011], [0.0], 0.0),
])
def test_completion_tied_share_cases(sent, end, expected):
    got = design.completion_tied_share(sent, end)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got == pytest.approx(_tied_brute(sent, end, design.TIED_WINDOW_S), abs=1e-12)


@pytest.mark.parametrize("arrivals, expected", [
    ([], 0.0), ([1.0], 0.0), ([1.0, 1.0], 1.0), ([1.0, 2.0], 0.0), ([1.0, 1.0, 2.0, 3.0], 0.5),
    ([1.0, 1.0, 1.0, 2.0], 0.75), ([1.0, 2.0, 3.0], 0.0), ([5.0, 5.0000001, float("nan")], 1.0),
    ([5.0, 5.000001], 0.0),
])
def test_identical_arrival_share_cases(arrivals, expected):
    assert design.identical_arrival_share(arrivals) == pytest.approx(expected, abs=1e-12)


def test_corridor_tolerance_values():
    assert design.corridor_tolerance(0.0) == pytest.approx(0.05)
    assert design.corridor_tolerance(float("nan")) == pytest.approx(0.05)
    assert design.corridor_tolerance(2.0) == pytest.approx(3.05)
    assert design.corridor_tolerance(0.1, base=0.0) == pytest.approx(0.15)


CORRIDOR_META = {"horizon_s": 300.0, "merge_duration_s": 8.0,
                 "corridor": {"min_gap_s": 20.0, "max_gap_s": 200.0}}


@pytest.mark.parametrize("corridor", [None, {}, {"min_gap_s": 20.0}, {"max_gap_s": 200.0},
                                      {"min_gap_s": None, "max_gap_s": 200.0}])
def test_run_corridor_violations_without_both_gaps(corridor):
    meta = {**CORRIDOR_META, "corridor": corridor}
    assert design.run_corridor_violations(meta, [64.0], [72.0]) == [
        "run.json has no corridor (min_gap_s/max_gap_s): F_K cannot be checked"]


def test_run_corridor_violations_measures_from_training_start():
    starts, ends = np.array([60.0, 150.0, 240.0]), np.array([68.0, 158.0, 248.0])
    assert design.run_corridor_violations(CORRIDOR_META, starts, ends) == []
    # the first merge must come at least min_gap after training started (the caller's
    # training start: the plan's or the run's time origin)
    (msg,) = design.run_corridor_violations(CORRIDOR_META, starts, ends, train_start=50.0)
    assert msg.startswith("first merge 10 s after training start < min_gap 20 s")
    # a run's own training_start_s does not move its edge
    late = {**CORRIDOR_META, "training_start_s": 50.0}
    assert design.run_corridor_violations(late, starts, ends) == []
    # measured from 0 when training_start_s is absent or null: exactly min_gap is fine
    edge = np.array([20.0, 150.0, 240.0])
    edge_ends = edge + 8.0
    assert design.run_corridor_violations(CORRIDOR_META, edge - 0.05, edge_ends) == []
    assert design.run_corridor_violations({**CORRIDOR_META, "training_start_s": None},
                                          edge - 0.05, edge_ends) == []
    assert design.run_corridor_violations(CORRIDOR_META, edge - 0.06, edge_ends) != []
    # the tolerance grows with the inner step
    assert design.run_corridor_violations(CORRIDOR_META, edge - 1.0, edge_ends, 1.0) == []
    assert design.run_corridor_violations(CORRIDOR_META, edge - 1.0, edge_ends, 0.5) != []


def test_design_facts_exact():
    meta = {**CORRIDOR_META, "role": "policy"}
    req = {"arrival_s": np.array([0.0, 1.0, 1.0, 3.0]), "sent_s": np.array([0.0, 1.0, 1.0, 3.0]),
           "end_s": np.array([0.9995, 2.0, 2.5, 4.0])}
    mer = {"start_s": np.array([60.0, 150.0, 240.0]), "end_s": np.array([68.0, 159.0, 250.0])}
    steps = {"start_s": np.array([0.0, 1.0, 2.0]), "end_s": np.array([1.0, 2.5, 4.0])}
    facts = design.design_facts(meta, req, mer, steps)
    assert facts == {
        "arrival_fingerprint": _fingerprint_reference(req["arrival_s"]),
        "merge_duration_median_s": 9.0,
        "corridor_violations": 0,
        "corridor_note": "",
        "completion_tied_share": 0.5,
        "identical_arrival_share": 0.5,
        "inner_step_median_s": 1.5,
    }
    assert set(facts) == set(design.DESIGN_COLUMNS)
    no_steps = design.design_facts(meta, req, mer, None)
    assert math.isnan(no_steps["inner_step_median_s"])
    empty_steps = design.design_facts(meta, req, mer, {"start_s": [], "end_s": []})
    assert math.isnan(empty_steps["inner_step_median_s"])
    no_merges = design.design_facts(meta, req, {"start_s": [], "end_s": []}, None)
    assert math.isnan(no_merges["merge_duration_median_s"])


def test_design_facts_corridor_only_for_runs_that_merge_by_policy():
    bad = {"start_s": np.array([5.0]), "end_s": np.array([13.0])}     # first merge too early
    req = {"arrival_s": [0.0], "sent_s": [0.0], "end_s": [1.0]}
    policy = design.design_facts({**CORRIDOR_META, "role": "policy"}, req, bad, None)
    assert policy["corridor_violations"] == len(policy["corridor_note"].split("; ")) >= 1
    assert "first merge 5 s after training start < min_gap 20 s" in policy["corridor_note"]
    no_sync = design.design_facts({**CORRIDOR_META, "role": "no_sync"}, req, bad, None)
    assert no_sync["corridor_violations"] == 0 and no_sync["corridor_note"] == ""
