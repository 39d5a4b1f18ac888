"""Decisions of the design checks (matched draws, K, pairing, complete policy runs, corridor,
merge durations, open-loop sending) on a stub context, at and on both sides of each
threshold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.checks import design as C

from tests.support.decision_stubs import ctx, pair, spec


# ------------------------------------------------------------------------ matched budget

@pytest.mark.parametrize("n_draws, need, passed", [(1, 1, True), (2, 2, True), (1, 2, False),
                                                   (0, 1, False), (3, 2, True)])
def test_matched_random_present_min_draws(n_draws, need, passed):
    pairs = [pair(0, ks=(3,) * 2), pair(1, ks=(3,) * n_draws)]
    out = C.matched_random_present(ctx(pairs), spec(min_draws=need))
    assert out.passed is passed
    if not passed:
        assert "seed 1" in out.found and "seed 0" not in out.found


@pytest.mark.parametrize("k_draw, tol, passed", [(3, 0, True), (4, 0, False), (2, 0, False),
                                                 (4, 1, True), (2, 1, True), (5, 1, False)])
def test_k_match_tolerance_edges(k_draw, tol, passed):
    out = C.k_match(ctx([pair(0, 3.0, ks=(3, k_draw)), pair(1)]), spec(max_abs_diff=tol))
    assert out.passed is passed
    if passed:
        assert out.found == "K matches for all 3 draws"


def test_k_match_unknown_k_is_vouched_not_passed():
    out = C.k_match(ctx([pair(0, np.nan), pair(1, ks=(np.nan,))]), spec(max_abs_diff=0))
    assert out.evaluable is False
    out = C.k_match(ctx([pair(0, np.nan), pair(1)]), spec(max_abs_diff=0))
    assert out.passed is True and "1 draws without K" in out.found
    out = C.k_match(ctx([pair(0, np.nan), pair(1, ks=(4,))]), spec(max_abs_diff=0))
    assert out.passed is False


def test_pairing_real():
    fp = {r: ("abc", 10) for r in ("s0-pol", "s0-d0", "s0-ns", "s1-pol", "s1-d0", "s1-ns")}
    ok = C.pairing_real(ctx(fingerprints=fp), spec())
    assert ok.passed is True and ok.found == "real pairing for all 4 baseline runs"
    for run, value in (("s1-d0", ("abd", 10)), ("s1-ns", ("abc", 11))):
        out = C.pairing_real(ctx(fingerprints={**fp, run: value}), spec())
        assert out.passed is False and "nominal pairing" in out.found and run in out.found
    out = C.pairing_real(ctx(fingerprints={k: v for k, v in fp.items() if k != "s0-ns"}),
                         spec())
    assert out.evaluable is False and "s0-ns" in out.found
    # a mismatch wins over an unknown fingerprint
    partial = {k: v for k, v in fp.items() if k != "s0-ns"}
    out = C.pairing_real(ctx(fingerprints={**partial, "s1-d0": ("x", 10)}), spec())
    assert out.passed is False


def _complete_ctx(policy_seeds, regime_seeds, excluded=()):
    pairs = [pair(s) for s in policy_seeds]
    return ctx(pairs, regime_runs=pd.DataFrame({"seed": regime_seeds}),
               runset=SimpleNamespace(excluded=list(excluded)))


def test_policy_runs_complete_survivorship():
    assert C.policy_runs_complete(_complete_ctx([0, 1], [0, 0, 1]), spec()).passed is True
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1, 2]), spec())
    assert out.passed is False and "seed 2" in out.found
    ex = {"run_id": "x", "reason": "crashed", "regime": "r", "seed": 3, "role": "policy",
          "policy": "ewma"}
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [ex]), spec())
    assert out.passed is False and "seed 3" in out.found
    # an excluded policy run replaced by a complete rerun of the same seed is fine
    assert C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [{**ex, "seed": 1}]),
                                  spec()).passed is True
    # other regimes are not this claim's business
    assert C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [{**ex, "regime": "q"}]),
                                  spec()).passed is True
    # an excluded draw counts unless its draw number was rerun
    exd = {**ex, "seed": 1, "role": "matched_random", "matched_to": "ewma", "draw": 0}
    assert C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [exd]), spec()).passed is True
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [{**exd, "draw": 5}]), spec())
    assert out.passed is False and "excluded (crashed)" in out.found
    exn = {**ex, "seed": 1, "role": "no_sync"}
    assert C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [exn]), spec()).passed is True
    unknown = {"run_id": "y", "reason": "unreadable"}
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [unknown]), spec())
    assert out.passed is False and "unknown regime/seed" in out.found


def _design_ctx(rows, pairs=None, has_logs=False, violations=None):
    runs = pd.DataFrame(rows)
    return ctx(pairs or [pair(0)], runset=SimpleNamespace(runs=runs, has_logs=has_logs),
               corridor_violations=violations,
               declared_design=lambda run_id: (20.0, 80.0, 8.0, 200.0))   # one design


def test_schedules_in_corridor_from_table():
    ids = ["s0-pol", "s0-d0"]
    ok = _design_ctx({"run_id": ids, "corridor_violations": [0, 0],
                      "corridor_note": ["", ""]})
    assert C.schedules_in_corridor(ok, spec(tolerance_s=0.05)).passed is True
    bad = _design_ctx({"run_id": ids, "corridor_violations": [0, 1],
                       "corridor_note": ["", "first merge too early"]})
    out = C.schedules_in_corridor(bad, spec(tolerance_s=0.05))
    assert out.passed is False and "first merge too early" in out.found
    unknown = _design_ctx({"run_id": ids, "corridor_violations": [0, np.nan],
                           "corridor_note": ["", ""]})
    assert C.schedules_in_corridor(unknown, spec(tolerance_s=0.05)).evaluable is False


def test_schedules_in_corridor_from_logs_passes_tolerance():
    seen = []

    def viol(run_id, tol):
        seen.append(tol)
        return ["gap too short"] if run_id == "s0-d0" else []
    out = C.schedules_in_corridor(_design_ctx({"run_id": []}, has_logs=True, violations=viol),
                                  spec(tolerance_s=0.125))
    assert out.passed is False and "s0-d0" in out.found and seen == [0.125, 0.125]


def _durations(pol, draw, d=8.0, k=(3, 3)):
    return _design_ctx({"run_id": ["s0-pol", "s0-d0"], "merge_duration_median_s": [pol, draw],
                        "merge_duration_s": [d, d], "k_observed": list(k)})


@pytest.mark.parametrize("pol, draw, passed", [
    (8.0, 8.0, True), (10.0, 8.0, True),      # exactly at rel_tol = 0.25 of D
    (10.01, 8.0, False), (6.0, 8.0, True), (5.99, 8.0, False),
    (9.9, 8.0, True), (6.1, 9.9, False),      # each within D, but policy vs draws > 25%
])
def test_merge_durations_rel_tol_edges(pol, draw, passed):
    assert C.merge_durations_match(_durations(pol, draw), spec(rel_tol=0.25)).passed is passed


def test_merge_durations_policy_vs_draws_edge():
    # D = 10: both within D; policy 8 vs draws 10 is exactly 20% of the draws' 10
    c = _design_ctx({"run_id": ["s0-pol", "s0-d0"], "merge_duration_median_s": [8.0, 10.0],
                     "merge_duration_s": [9.0, 9.0], "k_observed": [3, 3]})
    assert C.merge_durations_match(c, spec(rel_tol=0.2)).passed is True
    assert C.merge_durations_match(c, spec(rel_tol=0.19)).passed is False


def test_merge_durations_unknown():
    out = C.merge_durations_match(_durations(np.nan, np.nan), spec(rel_tol=0.25))
    assert out.evaluable is False


def _open_loop(tied, same):
    return _design_ctx({"run_id": ["s0-pol", "s0-d0", "s0-ns"],
                        "completion_tied_share": tied, "identical_arrival_share": same})


@pytest.mark.parametrize("tied, same, passed", [
    ([0.1, 0.1, 0.1], [0.05, 0.0, 0.0], True),          # exactly at both limits
    ([0.1, 0.1, 0.11], [0.0, 0.0, 0.0], False),         # the no-sync run counts too
    ([0.0, 0.0, 0.0], [0.0, 0.051, 0.0], False),
])
def test_open_loop_sending_edges(tied, same, passed):
    sp = spec(max_completion_tied_share=0.1, max_identical_arrival_share=0.05)
    assert C.open_loop_sending(_open_loop(tied, same), sp).passed is passed


def test_open_loop_unknown():
    sp = spec(max_completion_tied_share=0.1, max_identical_arrival_share=0.05)
    out = C.open_loop_sending(_open_loop([0.0, np.nan, 0.0], [0.0, 0.0, 0.0]), sp)
    assert out.evaluable is False


@pytest.mark.parametrize("n_bad, more", [(6, None), (7, "(+1 more)")])
def test_pairing_real_lists_six_then_counts_the_rest(n_bad, more):
    pairs = [pair(0, ks=(3,) * n_bad)]
    fp = {"s0-pol": ("abc", 10), "s0-ns": ("abc", 10)}
    fp.update({f"s0-d{i}": ("xyz", 10) for i in range(n_bad)})
    out = C.pairing_real(ctx(pairs, fingerprints=fp), spec())
    assert out.passed is False
    assert out.found.count("seed 0: s0-d") == 6
    assert ("more)" in out.found) is (more is not None)
    if more:
        assert out.found.endswith(more)


def test_merge_durations_unknown_draw_does_not_hide_a_bad_policy_run():
    # the draw's median is NaN (not missing): the policy run's 12 s vs D = 8 s still fails
    out = C.merge_durations_match(_durations(12.0, np.nan), spec(rel_tol=0.25))
    assert out.passed is False and "s0-pol" in out.found


@pytest.mark.parametrize("n_faults, more", [(8, False), (9, True)])
def test_policy_runs_complete_lists_eight_then_counts_the_rest(n_faults, more):
    out = C.policy_runs_complete(_complete_ctx([0], list(range(n_faults + 1))), spec())
    assert out.passed is False and out.found.count("no complete") == 8
    assert ("more)" in out.found) is more


def test_schedules_in_corridor_counts_each_run_once():
    ids = ["s0-pol", "s0-d0"]
    ok = _design_ctx({"run_id": ids, "corridor_violations": [0, 0], "corridor_note": ["", ""]})
    out = C.schedules_in_corridor(ok, spec(tolerance_s=0.05))
    assert out.passed is True and out.found == "all 2 schedules in F_K"


def test_policy_runs_complete_seed_known_only_from_an_excluded_run():
    # seed 5 has only an excluded no-sync run: the seed exists, so its policy run is missing
    ex = {"run_id": "x", "reason": "crashed", "regime": "r", "seed": 5, "role": "no_sync",
          "policy": "no_sync"}
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [ex]), spec())
    assert out.passed is False and "seed 5: no complete ewma policy run" in out.found


def test_merge_durations_checked_against_a_sub_second_d():
    out = C.merge_durations_match(_durations(2.0, 2.0, d=0.8), spec(rel_tol=0.25))
    assert out.passed is False and "D = 0.8 s" in out.found
    assert C.merge_durations_match(_durations(0.9, 0.9, d=0.8), spec(rel_tol=0.25)).passed


def test_policy_runs_complete_names_only_this_policys_excluded_runs():
    mine = {"run_id": "ewma-s3", "reason": "crashed", "regime": "r", "seed": 3,
            "role": "policy", "policy": "ewma"}
    other = {**mine, "run_id": "wa-s3", "policy": "wa"}
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [mine]), spec())
    assert "seed 3: no complete ewma policy run" in out.found
    assert "seed 3: ewma-s3 (policy) excluded (crashed)" in out.found
    # another policy's crashed run still shows the seed exists, but is not listed as ours
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [other]), spec())
    assert out.passed is False and "seed 3: no complete ewma policy run" in out.found
    assert "wa-s3" not in out.found


@pytest.mark.parametrize("n_bad, more", [(6, None), (7, "(+1 more)"), (9, "(+3 more)")])
def test_design_checks_list_six_runs_then_count_the_rest(n_bad, more):
    ks = (3,) * (n_bad - 1)
    p = pair(0, ks=ks)
    ids = [p.policy_run] + p.draws.run_id.tolist()
    out = C.schedules_in_corridor(_design_ctx(
        {"run_id": ids, "corridor_violations": [1] * n_bad,
         "corridor_note": [f"bad {i}" for i in range(n_bad)]}, [p]), spec(tolerance_s=0.05))
    assert out.passed is False and out.found.count("(policy)") + out.found.count(
        "(matched_random)") == min(n_bad, 6)
    assert (more is None and "more)" not in out.found) or out.found.endswith(more)


def test_corridor_tolerance_widens_by_the_seeds_smallest_inner_step():
    from evalkit.audit.context import ClaimContext

    meta = {"horizon_s": 300.0, "merge_duration_s": 8.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 200.0}}
    merges = {"start_s": np.array([17.5, 120.0]), "end_s": np.array([25.5, 128.0])}

    def context(*steps, run_meta=meta):
        c = ClaimContext.__new__(ClaimContext)
        c.runset = SimpleNamespace(
            columns=lambda run_id, table, cols: merges,
            _cache={("meta", "r"): run_meta, "plan": None}, row=lambda run_id: {"seed": 0})
        c.regime_evidence = SimpleNamespace(runs=pd.DataFrame(
            {"seed": [0] * len(steps) + [1], "inner_step_median_s": [*steps, 0.1]}))
        return c

    # 2.5 s early: beyond the base 0.05 s, within 0.05 + 1.5 x 2 s of a trainer's step
    assert context(2.0).corridor_violations("r", 0.05) == []
    assert context(2.0, 2.5).corridor_violations("r", 0.05) == []
    # the seed's smallest step: one run's long "steps" cannot widen its own tolerance
    for steps in ((float("nan"),), (None,), (1.0,), (6.0, 1.0)):
        out = context(*steps).corridor_violations("r", 0.05)
        assert len(out) == 1 and "< min_gap" in out[0]
    # a training start the run declares itself does not move the corridor's edge
    early = {**meta, "training_start_s": -5.0}     # would put the first merge 22.5 s in
    out = context(1.0, run_meta=early).corridor_violations("r", 0.05)
    assert len(out) == 1 and "17.5 s after training start < min_gap" in out[0]


@pytest.mark.parametrize("known", [{"seed": 1}, {"regime": "r"}, {}])
def test_an_exclusion_without_regime_or_seed_is_unattributed(known):
    ex = {"run_id": "z", "reason": "crashed", "role": "policy", "policy": "ewma", **known}
    out = C.policy_runs_complete(_complete_ctx([0, 1], [0, 1], [ex]), spec())
    assert out.passed is False
    assert "excluded run(s) of unknown regime/seed: z (crashed)" in out.found


def test_merge_durations_list_six_seeds_and_count_the_rest():
    seeds = range(8)
    rows = {"run_id": [r for s in seeds for r in (f"s{s}-pol", f"s{s}-d0")],
            "merge_duration_median_s": [v for _ in seeds for v in (12.0, 8.0)],
            "merge_duration_s": [8.0] * 16, "k_observed": [3] * 16}
    out = C.merge_durations_match(_design_ctx(rows, pairs=[pair(s) for s in seeds]),
                                  spec(rel_tol=0.25))
    assert out.passed is False
    # two findings a seed (the policy's windows against D and against its draws): 16 in all
    shown, more = out.found.rsplit(" (+", 1)
    assert len(shown.split("; ")) == 6 and more == "10 more)"
    assert shown.startswith("seed 0 s0-pol: windows last 12 s, D = 8 s; "
                            "seed 0: policy windows 12 s vs draws 8 s")
