"""Every audit check's decision on a small stub context, at and on both sides of its threshold.

End-to-end audits pass or fail their claims by wide margins; here each rule is pinned where
it flips, so a changed comparison, a dropped condition or the wrong p-value fails a test.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import checks as C
from evalkit.audit.campaign import SeedPair
from evalkit.audit.claims import _tier_walk
from evalkit.audit.protocol import CheckSpec, TierSpec
from evalkit.errors import NotEstimable


def spec(name="check", on_not_evaluable="block", **params):
    return CheckSpec(name, f"{name} description", on_not_evaluable, params)


def draws(seed, ks=(3,), vs=None, durations=None):
    n = len(ks)
    vs = [0.2] * n if vs is None else vs
    return pd.DataFrame({"run_id": [f"s{seed}-d{i}" for i in range(n)], "draw": range(n),
                         "k_observed": [float(k) for k in ks], "violation_rate": vs,
                         "seed": [seed] * n})


def pair(seed, k_policy=3.0, ks=(3,), vs=None, no_sync=True, v_policy=0.1):
    ns = pd.Series({"run_id": f"s{seed}-ns", "violation_rate": 0.05}) if no_sync else None
    return SeedPair(seed=seed, policy_run=f"s{seed}-pol", v_policy=v_policy, k_policy=k_policy,
                    realisation=None, draws=draws(seed, ks, vs), no_sync=ns)


def claim(pairs, policy="ewma", regime="r", oracle=False, backends=None):
    seeds = [p.seed for p in pairs]
    backends = backends or ["torch"] * len(pairs)
    return SimpleNamespace(
        regime=regime, policy=policy, pairs=pairs, seeds=seeds,
        paired=[p for p in pairs if len(p.draws)], oracle=oracle,
        policy_runs=pd.DataFrame({"run_id": [p.policy_run for p in pairs], "seed": seeds,
                                  "backend": backends}))


def ctx(pairs=None, **kw):
    pairs = [pair(0), pair(1)] if pairs is None else pairs
    base = dict(claim=claim(pairs), protocol=SimpleNamespace(accept_vouched=False,
                                                             multiplicity="holm"),
                alpha=0.05, alternative="two-sided")
    base.update(kw)
    return SimpleNamespace(**base)


# ------------------------------------------------------------------------- run_check / vouch

def test_run_check_vouch_only_when_accepted_and_not_evaluable():
    C.CHECKS["_stub_ne"] = lambda c, s: C.not_evaluable("e", "f", "do x")
    C.CHECKS["_stub_fail"] = lambda c, s: C.Outcome(False, "e", "f")
    C.CHECKS["_stub_raise"] = lambda c, s: 1 / 0
    C.CHECKS["_stub_nest"] = lambda c, s: (_ for _ in ()).throw(NotEstimable("why", fix="fx"))
    try:
        vouch, block = spec(on_not_evaluable="vouch"), spec()
        no, yes = ctx(), ctx(protocol=SimpleNamespace(accept_vouched=True))
        c = C.run_check("_stub_ne", "t", no, vouch)
        assert c.blocking and not c.vouched and "--accept-vouched" in c.recommendation
        c = C.run_check("_stub_ne", "t", yes, vouch)
        assert not c.blocking and c.vouched and c.passed is None
        c = C.run_check("_stub_ne", "t", yes, block)          # vouching needs "vouch"
        assert c.blocking and not c.vouched
        c = C.run_check("_stub_fail", "t", yes, vouch)        # a failure is never vouched
        assert c.blocking and not c.vouched and c.passed is False
        c = C.run_check("_stub_raise", "t", yes, vouch)       # a broken check fails
        assert c.passed is False and c.blocking and "ZeroDivisionError" in c.found
        c = C.run_check("_stub_nest", "t", no, block)
        assert c.passed is None and not c.evaluable and "why" in c.found
        assert c.recommendation == "fx"
    finally:
        for k in ("_stub_ne", "_stub_fail", "_stub_raise", "_stub_nest"):
            C.CHECKS.pop(k)


# ------------------------------------------------------------------------------- harness

def test_harness_baselines():
    sp = spec(harness_backends=["sim"], policies=["fixed_h"])
    runs = pd.DataFrame({"backend": ["sim", "sim", "torch"], "policy": ["fixed_h"] * 2 + ["x"],
                         "seed": [0, 1, 2]})
    assert C.fixed_cadence_baseline(ctx(regime_runs=runs), sp).passed is True
    out = C.fixed_cadence_baseline(ctx(regime_runs=runs.iloc[[0, 2]]), sp)
    assert out.passed is False and "seeds 1" in out.found
    # a fixed_h run on a real backend is not a harness baseline
    out = C.deferral_baseline(ctx(regime_runs=runs.assign(backend="torch")), sp)
    assert out.evaluable is False
    # a harness run of another policy does not count
    other = runs.assign(policy="ewma")
    assert C.fixed_cadence_baseline(ctx(regime_runs=other), sp).passed is False


# ---------------------------------------------------------------------- sidecar transfer

def _transfer_res(transferred=True, measured=True, drains=True, band=0.0, few=False):
    side = {"n_runs": 2, "n_seeds": 2, "n_active": 40, "drains": drains}
    return {"too_few_seeds": few, "verdict": "cannot be estimated: too few seeds (2 < 5)",
            "rho_real_ci": (1.1, 1.5), "gm_ratio_real_ci": (1.0, 1.2),
            "transfer_fraction_ci": (0.2, 0.9), "rho_real": 1.3, "gm_ratio_real": 1.1,
            "rho_harness": 1.6, "transfer_fraction": 0.5, "method": "paired",
            "transferred": transferred, "guard_band_s": {"real": band, "harness": band},
            "guard_band_measured": measured, "harness": side, "real": side, "notes": []}


def test_transfer_checks():
    sp = spec(mechanism="sync")
    assert C.transfer_ci_excludes_one(ctx(transfer=lambda s: _transfer_res()), sp).passed
    out = C.transfer_ci_excludes_one(ctx(transfer=lambda s: _transfer_res(False)), sp)
    assert out.passed is False and "did not transfer" in out.found
    # too few seeds for a CI: said by the estimate's flag, not by its verdict's words
    out = C.transfer_ci_excludes_one(ctx(transfer=lambda s: _transfer_res(False, few=True)), sp)
    assert out.passed is False and out.found.endswith(": cannot be estimated: too few seeds "
                                                      "(2 < 5)")
    assert out.recommendation == "replay the real and harness campaigns with >= 5 seeds"
    out = C.transfer_ci_excludes_one(ctx(transfer=lambda s: _transfer_res(False)), sp)
    assert out.found.endswith("the harness effect did not transfer")
    out = C.transfer_ci_excludes_one(ctx(transfer=lambda s: "no real runs"), sp)
    assert out.evaluable is False and out.found == "no real runs"
    assert C.transfer_paired(ctx(transfer=lambda s: _transfer_res()), sp).passed is True
    out = C.transfer_paired(ctx(transfer=lambda s: _transfer_res(measured=False)), sp)
    assert out.evaluable is False and "weaker evidence" in out.found
    out = C.transfer_paired(ctx(transfer=lambda s: _transfer_res(drains=False, band=20)), sp)
    assert out.passed is True and "still above 1 at 20 s" in out.found
    out = C.transfer_paired(ctx(transfer=lambda s: _transfer_res(band=15)), sp)
    assert "returns to 1 after 15 s" in out.found
    assert "at 1 from lag 0" in C.transfer_paired(
        ctx(transfer=lambda s: _transfer_res()), sp).found


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
               campaign=SimpleNamespace(excluded=list(excluded)))


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
    return ctx(pairs or [pair(0)], campaign=SimpleNamespace(runs=runs, has_logs=has_logs),
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


def _seeds_ctx(n, needed, dup=(), tied=0):
    # the test reaches alpha = 0.05 (two-sided) from `needed` seeds on
    return ctx(effective_n=n + tied, informative_n=n, seeds_needed=needed,
               pseudo_replicates=list(dup), test_name="sign-flip test",
               design_min_p=0.01 if n >= needed else 0.5)


@pytest.mark.parametrize("n, min_seeds, needed, passed", [
    (5, 5, 5, True), (4, 5, 5, False), (6, 5, 6, True), (5, 5, 6, False), (6, 6, 1, True),
    (5, 6, 1, False)])
def test_enough_seeds_edges(n, min_seeds, needed, passed):
    out = C.enough_seeds(_seeds_ctx(n, needed), spec(min_seeds=min_seeds))
    if not passed:      # the message names the rule that blocks
        floor, p_rule = n < min_seeds, n < needed
        assert ("minimum of" in out.found) is floor
        assert ("the test needs >=" in out.found) is p_rule
    assert out.passed is passed
    if not passed:
        assert out.found.startswith("underpowered")
        assert f">= {max(min_seeds, needed)} seeds" in out.recommendation


def test_enough_seeds_below_two_and_pseudo_replicates():
    out = C.enough_seeds(_seeds_ctx(1, 5), spec(min_seeds=5))
    assert out.passed is False and "no paired test" in out.found
    out = C.enough_seeds(_seeds_ctx(5, 5, [(7, 3)]), spec(min_seeds=5))
    assert out.passed is True and "7 = 3" in out.found
    # seeds whose runs all tie do not count towards the seeds needed
    out = C.enough_seeds(_seeds_ctx(4, 5, tied=2), spec(min_seeds=5))
    assert out.passed is False and "2 seed(s) whose policy run and draws" in out.found


class _SF(SimpleNamespace):
    pass


def _gain_ctx(p, p_adj, stat=0.02, min_p=1 / 64, n=6, multiplicity="holm"):
    sf = _SF(statistic=stat, ci_low=0.0, ci_high=0.04, n=n, p_value=p, exact=True, min_p=min_p)
    return ctx(effective_n=n, informative_n=n, sign_flip=sf, p_adjusted=p_adj, d=np.full(n, np.sign(stat)),
               protocol=SimpleNamespace(multiplicity=multiplicity, accept_vouched=False),
               test_name="sign-flip test", seeds_needed=6)


@pytest.mark.parametrize("p, p_adj, passed", [
    (0.01, 0.05, True),          # adjusted exactly at alpha
    (0.01, 0.0501, False),       # raw p significant, adjusted not: the decision is adjusted
    (0.06, 0.03, True),          # (adjusted below raw cannot happen with Holm; rule check)
    (0.05, 0.05, True), (0.0501, 0.0501, False)])
def test_gain_significant_decides_on_adjusted_p(p, p_adj, passed):
    out = C.gain_significant(_gain_ctx(p, p_adj), spec(min_effect=0.005))
    assert out.passed is passed
    assert "Holm-adjusted" in out.expected


def test_gain_significant_direction_min_p_and_n():
    out = C.gain_significant(_gain_ctx(0.01, 0.01, stat=-0.02), spec(min_effect=0.005))
    assert out.passed is False and "WORSE" in out.found
    out = C.gain_significant(_gain_ctx(0.01, 0.01, stat=0.0), spec(min_effect=0.005))
    assert out.passed is False and "WORSE" in out.found
    out = C.gain_significant(_gain_ctx(0.5, 0.5, stat=0.02), spec(min_effect=0.005))
    assert out.passed is False and "not significant" in out.found
    # min_p exactly at alpha is reachable; above alpha is underpowered
    assert C.gain_significant(_gain_ctx(0.05, 0.05, min_p=0.05), spec(min_effect=0.005)).passed is True
    out = C.gain_significant(_gain_ctx(0.01, 0.01, min_p=0.0625), spec(min_effect=0.005))
    assert out.passed is False and out.found.startswith("underpowered")
    out = C.gain_significant(_gain_ctx(0.01, 0.01, n=1), spec(min_effect=0.005))
    assert out.evaluable is False
    assert C.gain_significant(_gain_ctx(0.01, 0.01, n=2, min_p=0.01), spec(min_effect=0.005)).passed is True
    out = C.gain_significant(_gain_ctx(0.01, 0.01, multiplicity="none"), spec(min_effect=0.005))
    assert "Holm" not in out.expected and "adjusted" not in out.found


# ------------------------------------------------------------------------ placement gain

def test_no_sync_present():
    assert C.no_sync_present(ctx(), spec()).passed is True
    out = C.no_sync_present(ctx([pair(0), pair(1, no_sync=False)]), spec())
    assert out.passed is False and "no_sync for seed 1" in out.found and "seed 0" not in out.found


def _lm_table(passed=(True, True), status=("passed", "passed")):
    return pd.DataFrame({"seed": [0, 0], "run_id": ["s0-pol", "s0-d0"],
                         "check": ["n_requests", "step_rate"], "expected": [10.0, 1.0],
                         "found": [10.0, 1.0], "passed": list(passed), "status": list(status),
                         "reason": ["", "missing"]})


def test_load_match_check():
    sp = spec(tolerances={"step_rate": 0.05})
    assert C.load_match(ctx(load_match_table=lambda s: _lm_table()), sp).passed is True
    out = C.load_match(ctx(load_match_table=lambda s: _lm_table((True, False),
                                                                ("passed", "failed"))), sp)
    assert out.passed is False and "step_rate" in out.found
    out = C.load_match(ctx(load_match_table=lambda s: _lm_table(
        (True, False), ("passed", "not evaluable"))), sp)
    assert out.evaluable is False and "missing" in out.found
    out = C.load_match(ctx(load_match_table=lambda s: "not evaluable: no seed"), sp)
    assert out.evaluable is False


# ---------------------------------------------------------------------------- calibrated

def _psi_ctx(n_runs, psi=True):
    fit = SimpleNamespace(eps_cal=0.01, eps_cal_loso=0.02) if psi else None
    ev = SimpleNamespace(psi=fit, phi_table=pd.DataFrame({"phi": range(n_runs)}),
                         psi_reason="no no-sync runs")
    return ctx(regime_evidence=ev)


@pytest.mark.parametrize("n_runs, passed", [(6, True), (5, False), (7, True)])
def test_psi_fit_min_runs(n_runs, passed):
    assert C.psi_fit(_psi_ctx(n_runs), spec(min_runs=6)).passed is passed


def test_psi_fit_without_psi():
    assert C.psi_fit(_psi_ctx(10, psi=False), spec(min_runs=6)).evaluable is False


def _explained_ctx(res, reason=""):
    ev = SimpleNamespace(psi=SimpleNamespace(eps_cal=0.01, eps_cal_loso=0.02),
                         explained_gain=lambda *a: (res, reason), psi_reason="")
    return ctx(regime_evidence=ev, seed=0, rng=lambda *stream: np.random.default_rng(stream),
               protocol=SimpleNamespace(bootstrap_resamples=200, accept_vouched=False))


def test_gain_explained_by_overlap_outcomes():
    from evalkit.stats.explained import ExplainedGain

    def res(predicts, within, u_ci=None):
        g_ci = [0.001, 0.03] if predicts else [-0.001, 0.03]
        u_ci = list(u_ci) if u_ci is not None else (
            [-0.004, 0.004] if within else [-0.01, 0.02])   # the CI the flag comes from
        return ExplainedGain(4, 0.02, [0.01, 0.03], 0.015, g_ci, 0.005, u_ci,
                             0.25, 0.005, 0.95, predicts, within, predicts and within, [], 200,
                             "m", equivalence_level=0.9)
    sp = spec(unexplained_tolerance=0.25)
    assert C.gain_explained_by_overlap(_explained_ctx(res(True, True)), sp).passed is True
    out = C.gain_explained_by_overlap(_explained_ctx(res(False, True)), sp)
    assert out.passed is False and "does not predict" in out.found
    # the CI reaches beyond the band on one side: not shown small (overlapping is not enough)
    out = C.gain_explained_by_overlap(_explained_ctx(res(True, False)), sp)
    assert out.passed is False and "not shown to be within" in out.found
    assert "90% CI" in out.found
    # the whole CI beyond the band: the gain differs from the prediction
    out = C.gain_explained_by_overlap(_explained_ctx(res(True, False, (0.0051, 0.02))), sp)
    assert out.passed is False and "exceeds what overlap predicts" in out.found
    out = C.gain_explained_by_overlap(_explained_ctx(res(True, False, (-0.02, -0.0051))), sp)
    assert out.passed is False and "falls short of what overlap predicts" in out.found
    out = C.gain_explained_by_overlap(_explained_ctx(res(True, False, (0.0049, 0.02))), sp)
    assert "not shown to be within" in out.found
    out = C.gain_explained_by_overlap(_explained_ctx(None, "not evaluable: 1 seed"), sp)
    assert out.evaluable is False
    assert "95% CI" in C.gain_explained_by_overlap(_explained_ctx(res(True, True)), sp).expected


# ---------------------------------------------------------------------------- deployable

def _run_ctx(pairs, metas=None, backends=None, has_logs=True, oracle=False):
    """A claim context whose campaign knows each run's backend and run.json."""
    ids = [r for p in pairs for r in [p.policy_run, *p.draws.run_id, p.no_sync.run_id]]
    backends = backends or {}
    runs = pd.DataFrame({"run_id": ids, "backend": [backends.get(r, "torch") for r in ids]})
    metas = metas or {}
    c = ctx(claim=claim(pairs, oracle=oracle),
            campaign=SimpleNamespace(has_logs=has_logs, runs=runs))
    c._meta = lambda r: metas.get(r, {"policy": "ewma", "oracle": False})
    return c


def test_not_oracle_reads_the_registry_not_run_json():
    two = [pair(0), pair(1)]
    assert C.not_oracle(_run_ctx(two), spec()).passed is True
    seer = {"policy": "smart", "oracle": False,
            "settings": {"effective": {"policy": {"name": "calibrated_offline"}}}}
    out = C.not_oracle(_run_ctx(two, metas={"s1-pol": seer}), spec())
    assert out.passed is False and "s1-pol" in out.found and "registry" in out.found
    said = {"policy": "ewma", "oracle": True}            # the run's own word counts against it
    assert C.not_oracle(_run_ctx(two, metas={"s0-pol": said}), spec()).passed is False
    unknown = {"policy": "home_made", "oracle": False}
    out = C.not_oracle(_run_ctx(two, metas={"s0-pol": unknown}), spec())
    assert out.evaluable is False and "not a registered class" in out.found
    # a summary table: its oracle column can fail the check, never pass it
    assert C.not_oracle(_run_ctx(two, has_logs=False, oracle=True), spec()).passed is False
    assert C.not_oracle(_run_ctx(two, has_logs=False), spec()).evaluable is False


def test_real_sidecar_looks_at_every_run_of_the_seed():
    sp = spec(real_backends=["torch", "vllm"])
    two = [pair(0), pair(1)]
    assert C.real_sidecar(_run_ctx(two, backends={"s1-pol": "vllm"}), sp).passed is True
    for run in ("s1-pol", "s0-d0", "s1-ns"):          # policy, draw or no-sync on the harness
        out = C.real_sidecar(_run_ctx(two, backends={run: "sim"}), sp)
        assert out.passed is False and f"{run} (sim)" in out.found
    out = C.real_sidecar(_run_ctx(two, backends={"s0-d0": None}), sp)
    assert out.passed is False and "unknown" in out.found
    none = {r: None for r in ("s0-pol", "s0-d0", "s0-ns", "s1-pol", "s1-d0", "s1-ns")}
    assert C.real_sidecar(_run_ctx(two, backends=none), sp).evaluable is False
    sims = {r: "sim" for r in none}
    assert C.real_sidecar(_run_ctx(two, backends=sims), spec(real_backends=["sim"])).passed


def test_every_registered_check_has_a_decision_test():
    tested = {"fixed_cadence_baseline", "deferral_baseline", "transfer_ci_excludes_one",
              "transfer_paired", "matched_random_present", "k_match", "pairing_real",
              "policy_runs_complete", "schedules_in_corridor", "merge_durations_match",
              "open_loop_sending", "enough_seeds", "gain_significant", "no_sync_present",
              "load_match", "psi_fit", "gain_explained_by_overlap", "not_oracle",
              "real_sidecar",
              "execution_drift"}           # its decisions: tests/audit/test_drift.py
    # like for like and the plan checks: tests/audit/test_package_soundness_ii.py, tests/audit/test_plan_checks.py
    tested |= {"like_for_like", "plan_complete", "draws_as_planned", "plan_rules",
               "draws_phi_uniform", "pre_registered"}
    assert set(C.CHECKS) == tested


# ------------------------------------------------------------------------------ tier walk

def _check(name, tier, passed, evaluable=True, vouched=False):
    blocking = passed is False or (not evaluable and not vouched)
    return C.Check(name, tier, passed, evaluable, "e", f"{name} found", "r", blocking, vouched)


def _protocol(skip=("a",)):
    tiers = tuple(TierSpec(n, n, n in skip, (n + "1", n + "2")) for n in ("a", "b", "c"))
    return SimpleNamespace(tiers=tiers)


def test_tier_walk_all_pass():
    cs = [_check(f"{t}{i}", t, True) for t in "abc" for i in (1, 2)]
    reached, status, reason = _tier_walk(_protocol(), cs)
    assert reached == "c" and set(status.values()) == {"passed"}
    assert reason == "every tier of the protocol is supported"


def test_tier_walk_failed_stops_and_names_first_blocker():
    cs = [_check("a1", "a", True), _check("a2", "a", True), _check("b1", "b", False),
          _check("b2", "b", False), _check("c1", "c", True), _check("c2", "c", True)]
    reached, status, reason = _tier_walk(_protocol(), cs)
    assert reached == "a" and status["b"] == "failed" and status["c"] == "passed"
    assert reason.startswith("stops before b (failed): b1: b1 found") and "(+1 more)" in reason


def test_tier_walk_not_evaluable_skipped_only_when_allowed():
    cs = [_check("a1", "a", None, False), _check("a2", "a", None, False),
          _check("b1", "b", True), _check("b2", "b", True)]
    reached, status, _ = _tier_walk(_protocol(skip=("a",)), cs + [_check("c1", "c", True)])
    assert status["a"] == "not_evaluable" and reached == "c"
    reached, status, reason = _tier_walk(_protocol(skip=()), cs + [_check("c1", "c", True)])
    assert reached is None and reason.startswith("stops before a (not evaluable): a1")


def test_tier_walk_mixed_tier_with_unevaluable_blocker_fails():
    # one check passed, one could not be evaluated (and is not vouched): the tier failed
    cs = [_check("a1", "a", True), _check("b1", "b", True), _check("b2", "b", None, False),
          _check("c1", "c", True)]
    reached, status, reason = _tier_walk(_protocol(skip=("b",)), cs)
    assert status["b"] == "failed" and reached == "a"
    assert "stops before b (failed): b2" in reason and "more" not in reason


def test_tier_walk_vouched_check_does_not_block():
    cs = [_check("a1", "a", True), _check("b1", "b", True),
          _check("b2", "b", None, False, vouched=True), _check("c1", "c", True)]
    reached, status, _ = _tier_walk(_protocol(), cs)
    assert status["b"] == "passed" and reached == "c"
    # a tier whose only checks are vouched was not evaluated at all
    cs = [_check("a1", "a", True), _check("b1", "b", None, False, vouched=True),
          _check("c1", "c", True)]
    reached, status, reason = _tier_walk(_protocol(), cs)
    assert status["b"] == "not_evaluable" and reached == "a"
    assert reason == "stops before b (not evaluable)"


def test_tier_walk_stops_at_first_gap_even_if_higher_pass():
    cs = [_check("a1", "a", False), _check("b1", "b", True), _check("c1", "c", True)]
    reached, status, reason = _tier_walk(_protocol(skip=()), cs)
    assert reached is None and status["b"] == "passed" and reason.startswith("stops before a")


# ---------------------------------------------------- explained gain: the decision's edges

def _explained_inputs():
    rng = np.random.default_rng(11)
    phi, vex, groups, seeds = [], [], [], []
    for s in range(6):
        rows = []
        for j in range(4):                     # policy first, then three draws
            p = rng.uniform(0, 10) if j else rng.uniform(0, 3)
            rows.append(len(phi))
            phi.append(p)
            vex.append(0.01 * p + rng.normal(0, 0.002) + (0.02 if j == 0 else 0.0))
            groups.append(s)
        seeds.append((s, rows[0], rows[1:]))
    return np.array(phi), np.array(vex), np.array(groups), seeds


def test_explained_gain_tolerance_edges():
    from evalkit.stats.explained import explained_gain

    phi, vex, groups, seeds = _explained_inputs()

    def run(tol):
        return explained_gain(phi, vex, groups, seeds, n_boot=400, rng=5, tolerance=tol)
    base = run(0.0)
    assert base.predicts_gain and base.g_pred_ci[0] > 0
    lo, hi = base.unexplained_ci
    # equivalence: the tolerance that just holds the whole CI inside the band decides
    need = max(abs(lo), abs(hi)) / abs(base.gain)
    assert need > 0 and not base.within_tolerance and not base.explained
    at = run(need * (1 + 1e-9))
    assert at.unexplained_ci == [lo, hi] and at.within_tolerance and at.explained
    assert at.tolerance_abs == pytest.approx(need * abs(base.gain))
    below = run(need * (1 - 1e-6))
    assert not below.within_tolerance and not below.explained


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


def test_regime_evidence_reason_without_logs(tmp_path):
    from evalkit.audit.campaign import load_campaign
    from evalkit.audit.claims import RegimeEvidence

    rows = [{"policy": p, "seed": s, "violation_rate": v} for s in range(3)
            for p, v in (("wa", 0.1), ("matched_random", 0.2), ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    campaign = load_campaign(path)
    ev = RegimeEvidence(campaign, campaign.runs.regime.iloc[0])
    assert ev.psi is None and ev.phi_table is None
    assert ev.psi_reason.startswith("not evaluable") and "request/merge logs" in ev.psi_reason


@pytest.mark.parametrize("n_faults, more", [(8, False), (9, True)])
def test_policy_runs_complete_lists_eight_then_counts_the_rest(n_faults, more):
    out = C.policy_runs_complete(_complete_ctx([0], list(range(n_faults + 1))), spec())
    assert out.passed is False and out.found.count("no complete") == 8
    assert ("more)" in out.found) is more


@pytest.mark.parametrize("effective_n, shown", [(1, False), (2, True), (5, True)])
def test_claim_result_sign_flip_from_two_effective_seeds(effective_n, shown):
    from evalkit.audit.claims import ClaimResult

    sf = object()
    fake = SimpleNamespace(ctx=SimpleNamespace(effective_n=effective_n, sign_flip=sf))
    assert (ClaimResult.sign_flip.fget(fake) is sf) is shown


def test_schedules_in_corridor_counts_each_run_once():
    ids = ["s0-pol", "s0-d0"]
    ok = _design_ctx({"run_id": ids, "corridor_violations": [0, 0], "corridor_note": ["", ""]})
    out = C.schedules_in_corridor(ok, spec(tolerance_s=0.05))
    assert out.passed is True and out.found == "all 2 schedules in F_K"


def test_load_match_of_a_summary_table_without_load_columns_is_not_evaluable(tmp_path):
    from evalkit.audit.campaign import load_campaign
    from evalkit.audit.claims import ClaimContext
    from evalkit.stats.loadmatch import DEFAULT_TOLERANCES

    rows = [{"policy": p, "seed": s, "violation_rate": v} for s in range(3)
            for p, v in (("wa", 0.1), ("matched_random", 0.2), ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    fake = SimpleNamespace(campaign=load_campaign(path))
    out = ClaimContext._compute_load_match(fake, dict(DEFAULT_TOLERANCES))
    assert isinstance(out, str) and out.startswith("not evaluable")
    assert "evalkit summarize" in out


@pytest.mark.parametrize("n_seeds, exact", [(11, True), (12, False)])
def test_claim_context_exact_permutation_limit(n_seeds, exact):
    # 3 draws per seed: 4^n label sets; the studentized statistic is not additive, so
    # exact means enumerating all of them: up to 2^22 = 4^11
    from evalkit.audit.claims import ClaimContext

    fake = SimpleNamespace(draws_per_seed=np.full(n_seeds, 3.0))
    assert ClaimContext._exact_ok.fget(fake) is exact


def test_oracle_claim_carries_the_bound_note(tmp_path):
    from evalkit.audit import audit_campaign

    rows = [{"policy": p, "seed": s, "violation_rate": v, "oracle": p == "wa"}
            for s in range(6) for p, v in (("wa", 0.1), ("matched_random", 0.2),
                                           ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    claim = audit_campaign(path).claim("wa")
    assert claim.data.oracle is True
    assert any(n.startswith("oracle policy: a bound") for n in claim.notes), claim.notes


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


@pytest.mark.parametrize("m, alternative, needed", [
    ([1, 3, 2], "two-sided", 6),        # the fewest draws decide: 2 * 2^-n <= 0.05 from n = 6
    ([3, 3, 3], "two-sided", 3),        # 2 * 4^-n <= 0.05 from n = 3
    ([3, 1], "greater", 5),             # 2^-n <= 0.05 from n = 5
    ([], "two-sided", 6),               # no draws known: one per seed
])
def test_claim_context_seeds_needed_from_the_fewest_draws(m, alternative, needed):
    from evalkit.audit.claims import ClaimContext

    fake = SimpleNamespace(draws_per_seed=np.array(m, dtype=int), alpha=0.05,
                           alternative=alternative)
    assert ClaimContext.seeds_needed.func(fake) == needed


# --------------------------------------------------------------- the claim's design facts

def _design(pairs, runs=None, source="runs"):
    from evalkit.audit.claims import ClaimContext

    c = ClaimContext.__new__(ClaimContext)
    c.claim = claim(pairs)
    c.campaign = SimpleNamespace(runs=runs if runs is not None else pd.DataFrame(
        {"run_id": [p.policy_run for p in pairs]}), source=source)
    c.alpha, c.alternative = 0.05, "two-sided"
    return c


def test_fingerprints_read_from_the_runs_table():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"],
                         "arrival_fingerprint": ["f1", "", None, "f2"],
                         "n_requests": [10, 5, 5, np.nan]})
    assert _design([pair(0)], runs).fingerprints == {"a": ("f1", 10), "d": ("f2", None)}
    assert _design([pair(0)], pd.DataFrame({"run_id": ["a"]})).fingerprints == {}


def test_units_merge_seeds_that_replayed_the_same_requests():
    pairs = [pair(s) for s in range(4)]
    runs = pd.DataFrame({"run_id": [p.policy_run for p in pairs],
                         "arrival_fingerprint": ["x", "y", "x", "x"],
                         "n_requests": [10, 10, 10, 11]})   # seed 3: same hash, other count
    c = _design(pairs, runs)
    assert [p.seed for p in c.units] == [0, 1, 3] and c.pseudo_replicates == [(2, 0)]
    assert c.effective_n == 3
    # without fingerprints every paired seed is its own unit
    assert _design(pairs).effective_n == 4 and _design(pairs).pseudo_replicates == []


def test_informative_seeds_are_those_whose_runs_differ():
    pairs = [pair(0, ks=(3, 3), vs=[0.1, 0.1], v_policy=0.1),          # all equal: no info
             pair(1, ks=(3, 3), vs=[0.1, 0.1 + 1e-9], v_policy=0.1),   # tiny but real
             pair(2, ks=(3,), vs=[0.3], v_policy=0.1),
             pair(3, ks=(3,), vs=[0.0], v_policy=0.0)]                 # zeros: no info
    c = _design(pairs)
    assert c.effective_n == 4 and c.informative_n == 2
    assert c.averaged_draws is True and list(c.draws_per_seed) == [2, 2, 1, 1]
    assert c.test_name == "studentized within-seed permutation test"
    assert c.design_min_p == pytest.approx(2 / (3 * 3 * 2 * 2))
    one = _design([pair(0), pair(1)])
    assert one.averaged_draws is False and one.test_name == "sign-flip test"
    table = _design([pair(0), pair(1)], source="summary")
    assert table.test_name.startswith("sign-flip test (one baseline row per seed")
    assert _design([]).design_min_p == 1.0 and _design([]).averaged_draws is False


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
    from evalkit.audit.claims import ClaimContext

    meta = {"horizon_s": 300.0, "merge_duration_s": 8.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 200.0}}
    merges = {"start_s": np.array([17.5, 120.0]), "end_s": np.array([25.5, 128.0])}

    def context(*steps, run_meta=meta):
        c = ClaimContext.__new__(ClaimContext)
        c.campaign = SimpleNamespace(
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
