"""Calibrated tier decided by inference on the claim, not by G > 2 eps_cal.

A real-backend campaign (``tests/support/campaign_model.py``), 8 seeds: ``wa`` merges in the quiet
gaps between bursts (lower overlap Phi than random placement); ``lucky`` merges at random,
like its draws, but suffers +1 s instead of +4 s per overlapping request.

Decisions of the calibrated checks (``psi_fit``, ``gain_explained_by_overlap``) on a stub
context, at and on both sides of each threshold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import audit_campaign
from evalkit.audit.checks import calibrated as C
from tests.support import campaign_model as cm
from tests.support.decision_stubs import ctx, spec
from tests.support.selfreg import selfreg_protocol


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrated") / "runs"
    cm.regime(out, name="h200", backend="torch", seeds=range(8),
              policies={"wa": ("good", None), "lucky": ("random", 1.0)})
    # about the calibrated tier's machinery: the self-registered runs may pass registration
    return audit_campaign(out, protocol=selfreg_protocol())


def _check(claim, name):
    return next(c for c in claim.checks if c.name == name)


# the campaign audit is a module fixture: one worker runs the tests that read it
@pytest.mark.xdist_group("calibrated_audit")
def test_overlap_explained_gain_reaches_calibrated(audit):
    """The sup-norm eps_cal of the regime is large (the lucky runs sit far below psi), so the
    old rule G > 2 eps_cal refused this gain; psi predicts it, leave-one-seed-out."""
    wa = audit.claim("wa")
    psi = audit.to_dict()["regimes"]["h200"]["psi"]
    gain = wa.sign_flip.statistic
    assert gain < 2 * psi["eps_cal"]                       # the old rule refused it
    check = _check(wa, "gain_explained_by_overlap")
    assert check.passed is True and "G_pred" in check.found and "eps_cal" in check.found
    assert wa.tier_status["calibrated"] == "passed" and wa.tier == "calibrated"
    # deployable but for pre-registration: these runs have no campaign plan
    assert [c.name for c in wa.failed_checks] == ["pre_registered"]


@pytest.mark.xdist_group("calibrated_audit")
def test_gain_with_the_draws_overlap_stops_at_placement_gain(audit):
    lucky = audit.claim("lucky")
    assert lucky.tier == "placement_gain"
    check = _check(lucky, "gain_explained_by_overlap")
    assert check.passed is False
    assert check.found.endswith("overlap does not predict a gain (G_pred's CI includes 0)")
    # a significant gain overlap does not predict: placement gain is what it may claim
    assert check.recommendation.startswith("claim no more than placement gain")
    assert lucky.stop_reason.startswith("stops before calibrated")


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


# ---------------------------------------------------- explained gain: the decision's edges

def _explained_inputs(policy_excess=0.02):
    rng = np.random.default_rng(11)
    phi, vex, groups, seeds = [], [], [], []
    for s in range(6):
        rows = []
        for j in range(4):                     # policy first, then three draws
            p = rng.uniform(0, 10) if j else rng.uniform(0, 3)
            rows.append(len(phi))
            phi.append(p)
            vex.append(0.01 * p + rng.normal(0, 0.002) + (policy_excess if j == 0 else 0.0))
            groups.append(s)
        seeds.append((s, rows[0], rows[1:]))
    return np.array(phi), np.array(vex), np.array(groups), seeds


def test_explained_gain_tolerance_edges():
    from evalkit.stats.explained import explained_gain

    # all of the gain is overlap's: every seed gains, so a wide enough band is shown
    phi, vex, groups, seeds = _explained_inputs(policy_excess=0.0)

    def run(tol):
        return explained_gain(phi, vex, groups, seeds, n_boot=400, rng=5, tolerance=tol)
    base = run(0.0)
    assert base.predicts_gain and base.g_pred_ci[0] > 0
    assert not base.within_tolerance and not base.explained
    # equivalence: the band moves with G; the smallest tolerance whose two one-sided tests
    # both reject at alpha decides (p_equivalence falls as the tolerance grows)
    lo, hi = 0.0, 50.0
    assert run(hi).within_tolerance
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if run(mid).within_tolerance else (mid, hi)
    need = hi
    at = run(need * (1 + 1e-9))
    assert at.p_equivalence <= 0.05 and at.within_tolerance and at.explained
    assert at.tolerance_abs == pytest.approx(need * abs(base.gain))
    below = run(need * (1 - 1e-6))
    assert below.p_equivalence > 0.05
    assert not below.within_tolerance and not below.explained
