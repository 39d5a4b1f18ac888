"""Design facts of a run (``evalkit.runlog.design``) against independent computations: arrival
fingerprints (hashlib), tied and identical shares, corridor tolerance and violations.

Corridor violations at their edges: gaps of exactly min_gap / max_gap / D, no merges,
windows past the run's end.

The design facts' fast paths (one merged sort for the last completion before each send,
shared arrival ticks) give the numbers of the plain computations they replace."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from evalkit.runlog import design
from evalkit.runlog.design import (arrival_fingerprint, arrival_ticks, completion_tied_share,
                                   corridor_violations, identical_arrival_share)


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


def test_corridor_violation_edges():
    span, d = (0.0, 300.0), 8.0
    ok = [64.0, 128.0, 192.0, 256.0]
    ends = [x + d for x in ok]
    assert corridor_violations(ok, ends, span, d, 64.0, 64.0) == []
    # first merge one ulp-ish early / late
    early = [63.99] + ok[1:]
    assert any("< min_gap" in v for v in corridor_violations(early, ends, span, d, 64, 70))
    assert corridor_violations(early, ends, span, d, 64, 70, tol=0.01) == []
    late = [70.01, 134.01, 198.01, 262.01]
    assert any("> max_gap" in v for v in corridor_violations(late, ends, span, d, 0, 70))
    # gaps: exactly D is allowed when min_gap < D; below D is not
    tight = [64.0, 72.0, 136.0, 200.0, 264.0]
    assert corridor_violations(tight, [x + d for x in tight], span, d, 4.0, 70.0) == []
    tighter = [64.0, 71.9, 136.0, 200.0, 264.0]
    out = corridor_violations(tighter, [x + d for x in tighter], span, d, 4.0, 70.0)
    assert len(out) == 1 and "< D" in out[0]
    # the trailing edge: last start 292 - 70 = 222 s before the last feasible start is forced
    trail_ok = [64.0, 128.0, 192.0, 222.01]
    assert corridor_violations(trail_ok, [x + d for x in trail_ok], span, d, 0, 70) == []
    trail_bad = [64.0, 128.0, 192.0, 222.0]
    out = corridor_violations(trail_bad, [x + d for x in trail_bad], span, d, 0, 70)
    assert len(out) == 1 and "forced merge" in out[0]
    # with a tolerance the trailing edge moves out by it, not in
    assert corridor_violations(trail_bad, [x + d for x in trail_bad], span, d, 0, 70,
                               tol=0.5) == []
    trail_late = [64.0, 128.0, 192.0, 221.5]
    out = corridor_violations(trail_late, [x + d for x in trail_late], span, d, 0, 70, tol=0.5)
    assert len(out) == 1 and "forced merge" in out[0]


def test_corridor_no_merges_edge():
    # 292 s of training without a merge: forced at max_gap >= 292, allowed when max_gap > 292
    assert corridor_violations([], [], (0, 300), 8.0, 0, 292.0) != []
    assert corridor_violations([], [], (0, 300), 8.0, 0, 292.01) == []


def test_corridor_window_past_end():
    assert corridor_violations([200.0], [300.0], (0, 300), 8.0, 0, 300) == []
    out = corridor_violations([200.0], [300.5], (0, 300), 8.0, 0, 300)
    assert out == ["a merge window runs past the end of the run"]
    out = corridor_violations([292.5], [300.0], (0, 300), 8.0, 0, 300)
    assert out and "past the end" in out[-1]


def test_corridor_window_end_within_tolerance_of_the_run_end():
    kw = dict(train_start=0.0, tol=0.05)
    assert corridor_violations([200.0], [300.0], (0, 300), 8.0, 0, 300, **kw) == []
    assert corridor_violations([200.0], [300.04], (0, 300), 8.0, 0, 300, **kw) == []
    out = corridor_violations([200.0], [300.06], (0, 300), 8.0, 0, 300, **kw)
    assert out and "past the end" in out[-1]


def test_corridor_gap_within_tolerance_of_max_gap_is_allowed_from_both_sides():
    span, d, tol = (0.0, 300.0), 8.0, 0.5
    def gaps_of(g):
        s = [64.0 + i * g for i in range(4)]
        return corridor_violations(s, [x + d for x in s], span, d, 0.0, 70.0, tol=tol)
    assert gaps_of(69.8) == []                     # just below max_gap: never a violation
    assert gaps_of(70.4) == []                     # above it, but within the tolerance
    out = gaps_of(70.6)
    assert len(out) == 3 and all("> max_gap" in v for v in out)


def searched_tied_share(sent, end, window=1e-3):
    sent, end = np.asarray(sent, float), np.asarray(end, float)
    end = np.sort(end[np.isfinite(end)])
    s = sent[np.isfinite(sent)]
    if s.size == 0 or end.size == 0:
        return 0.0
    i = np.searchsorted(end, s, side="right") - 1
    prev = np.where(i >= 0, end[np.maximum(i, 0)], -np.inf)
    return float(np.count_nonzero(s - prev <= window) / s.size)


@pytest.mark.parametrize("seed", range(30))
def test_last_completion_by_merged_sort_gives_the_searched_share(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 3000))
    sent = np.sort(rng.uniform(0, 300, n)) + rng.exponential(0.002, n)
    end = sent + rng.gamma(2.0, 0.2, n)
    if seed % 2:
        sent, end = np.round(sent, 2), np.round(end, 2)     # sends tied to completions
    end[rng.random(n) < 0.05] = np.nan
    sent[rng.random(n) < 0.02] = np.nan
    for window in (1e-3, 0.05, 0.0):
        assert completion_tied_share(sent, end, window) == \
            searched_tied_share(sent, end, window)


@pytest.mark.parametrize("sent, end", [
    ([0.0, -0.0, 1.0, 1.0], [-0.0, 0.0, 1.0, 0.9995]),     # signed zeros, exact ties
    ([-1.0, 0.5, 2.0], [0.4995, 1.0, 2.0]),                 # a negative time: plain search
    ([3.0, 4.0], [np.nan, np.nan]),                          # no completion at all
    ([np.nan], [1.0]),
])
def test_tied_share_edges(sent, end):
    assert completion_tied_share(sent, end) == searched_tied_share(sent, end)


@pytest.mark.parametrize("arrival", [
    np.array([3.0, 1.0, 1.0, 2.0]), np.array([1.0, 1.0000001, 2.0, np.nan, 2.0]),
    np.arange(10.0), np.array([4.0]),
])
def test_arrival_ticks_serve_fingerprint_and_identical_share(arrival):
    ticks = arrival_ticks(arrival)
    assert arrival_fingerprint(arrival) == arrival_fingerprint(None, ticks)
    assert identical_arrival_share(arrival) == identical_arrival_share(None, ticks)
    a = arrival[np.isfinite(arrival)]
    if a.size >= 2:
        us = np.round(a / 1e-6).astype(np.int64)
        _, inverse, counts = np.unique(us, return_inverse=True, return_counts=True)
        assert identical_arrival_share(arrival) == np.count_nonzero(counts[inverse] > 1) / a.size
