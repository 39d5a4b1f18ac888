"""Design facts: corridor tolerance, the completion-tied window and share, shares against brute
force, arrival fingerprints and a run's design facts."""

from __future__ import annotations


import numpy as np
import pytest


def test_corridor_tolerance_adds_one_and_a_half_steps():
    from evalkit.runlog.design import CORRIDOR_TOLERANCE_S, corridor_tolerance

    assert corridor_tolerance(float("nan")) == CORRIDOR_TOLERANCE_S
    assert corridor_tolerance(2.0) == pytest.approx(CORRIDOR_TOLERANCE_S + 3.0)
    assert corridor_tolerance(0.0, base=0.0) == 0.0


def test_completion_tied_window_is_one_millisecond():
    from evalkit.runlog.design import TIED_WINDOW_S, completion_tied_share

    assert TIED_WINDOW_S == 1e-3
    end = [1.0, 2.0, 3.0, 4.0]
    assert completion_tied_share([1.0005, 2.001, 3.0015, 4.0019], end) == 0.5


def test_completion_tied_share_without_sends_or_completions_is_zero():
    from evalkit.runlog.design import completion_tied_share

    assert completion_tied_share([], [1.0]) == 0.0
    assert completion_tied_share([np.nan], [1.0]) == 0.0
    assert completion_tied_share([1.0, 2.0], [np.nan, np.nan]) == 0.0


def _tied_share_brute(sent, end, window):
    done = [e for e in end if np.isfinite(e)]
    sends = [s for s in sent if np.isfinite(s)]
    if not sends or not done:
        return 0.0
    tied = 0
    for s in sends:
        before = [e for e in done if e <= s]
        tied += bool(before) and s - max(before) <= window
    return tied / len(sends)


@pytest.mark.parametrize("seed", range(5))
def test_design_shares_match_brute_force(seed):
    from evalkit.runlog.design import completion_tied_share, identical_arrival_share

    rng = np.random.default_rng(seed)
    n = 60
    # a grid of 1 ms steps makes exact ties, sends exactly 1 ms after a completion, and
    # repeated arrivals common; some requests never completed or were never sent
    sent = rng.integers(0, 80, n) * 1e-3
    end = rng.integers(0, 80, n) * 1e-3
    end[rng.random(n) < 0.2] = np.nan
    sent[rng.random(n) < 0.1] = np.nan
    for window in (0.0, 1e-3, 2e-3):
        assert completion_tied_share(sent, end, window) == pytest.approx(
            _tied_share_brute(sent, end, window), abs=1e-12)
    arrival = np.round(rng.integers(0, 40, n) * 0.5, 6)
    arrival[0] = np.nan
    finite = arrival[np.isfinite(arrival)]
    brute = np.mean([np.sum(finite == a) > 1 for a in finite])
    assert identical_arrival_share(arrival) == pytest.approx(brute)
    assert identical_arrival_share([1.0]) == 0.0 and identical_arrival_share([]) == 0.0
    assert identical_arrival_share([1.0, 1.0 + 4e-7]) == 1.0          # same microsecond
    assert identical_arrival_share([1.0, 1.0 + 2e-6]) == 0.0


def test_arrival_fingerprint_properties():
    from evalkit.runlog.design import arrival_fingerprint

    a = np.array([0.5, 1.25, 3.0, 7.125])
    fp = arrival_fingerprint(a)
    assert len(fp) == 32 and int(fp, 16) >= 0
    assert arrival_fingerprint(a[::-1]) == fp                     # order does not matter
    assert arrival_fingerprint(np.append(a, np.nan)) == fp        # nor unfinished NaN rows
    assert arrival_fingerprint(a + 4e-7) == fp                    # below the microsecond
    assert arrival_fingerprint(a + np.array([0, 0, 0, 2e-6])) != fp
    assert arrival_fingerprint(a[:3]) != fp
    assert arrival_fingerprint(np.append(a, a[-1])) != fp         # a repeated arrival counts


def test_design_facts_of_a_run():
    from evalkit.runlog.design import design_facts

    meta = {"role": "policy", "horizon_s": 300.0, "merge_duration_s": 8.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 200.0}, "training_start_s": 0.0}
    req = {"arrival_s": np.array([1.0, 2.0]), "sent_s": np.array([1.0, 2.0]),
           "end_s": np.array([1.5, 2.5])}
    merges = {"start_s": np.array([64.0, 150.0, 230.0]), "end_s": np.array([72.0, 160.0, 236.0])}
    steps = {"start_s": np.array([0.0, 2.0, 5.0]), "end_s": np.array([2.0, 5.0, 9.0])}
    facts = design_facts(meta, req, merges, steps)
    assert facts["merge_duration_median_s"] == 8.0
    assert facts["inner_step_median_s"] == 3.0
    assert facts["corridor_violations"] == 0 and facts["corridor_note"] == ""
    assert facts["completion_tied_share"] == 0.0 and facts["identical_arrival_share"] == 0.0
    # a merge 10 s after training start breaks min_gap; no steps -> no step slack
    early = {"start_s": np.array([10.0, 150.0]), "end_s": np.array([18.0, 158.0])}
    facts = design_facts(meta, req, early, None)
    assert facts["corridor_violations"] == 1 and "< min_gap" in facts["corridor_note"]
    assert np.isnan(facts["inner_step_median_s"])
    # a no-sync run is never held to the corridor; without merges no window length
    none = {"start_s": np.array([]), "end_s": np.array([])}
    facts = design_facts({**meta, "role": "no_sync"}, req, none, None)
    assert facts["corridor_violations"] == 0 and np.isnan(facts["merge_duration_median_s"])
    assert design_facts(meta, req, none, None)["corridor_violations"] == 1   # max_gap forces one


@pytest.mark.parametrize("corridor", [None, {}, {"min_gap_s": 20.0}, {"max_gap_s": 200.0}])
def test_corridor_check_without_both_gaps_says_so(corridor):
    from evalkit.runlog.design import run_corridor_violations

    meta = {"horizon_s": 300.0, "merge_duration_s": 8.0, "corridor": corridor}
    out = run_corridor_violations(meta, [64.0], [72.0])
    assert out == ["run.json has no corridor (min_gap_s/max_gap_s): F_K cannot be checked"]
