"""Calibrated tier decided by inference on the claim, not by G > 2 eps_cal.

A real-backend campaign (``tests/support/campaign_model.py``), 8 seeds: ``wa`` merges in the quiet
gaps between bursts (lower overlap Phi than random placement); ``lucky`` merges at random,
like its draws, but suffers +1 s instead of +4 s per overlapping request.
"""

from __future__ import annotations

import pytest

from evalkit.audit import audit_campaign
from tests.support import campaign_model as cm


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrated") / "runs"
    cm.regime(out, name="h200", backend="torch", seeds=range(8),
              policies={"wa": ("good", None), "lucky": ("random", 1.0)})
    return audit_campaign(out)


def _check(claim, name):
    return next(c for c in claim.checks if c.name == name)


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


def test_gain_with_the_draws_overlap_stops_at_placement_gain(audit):
    lucky = audit.claim("lucky")
    assert lucky.tier == "placement_gain"
    check = _check(lucky, "gain_explained_by_overlap")
    assert check.passed is False
    assert check.found.endswith("overlap does not predict a gain (G_pred's CI includes 0)")
    # a significant gain overlap does not predict: placement gain is what it may claim
    assert check.recommendation.startswith("claim no more than placement gain")
    assert lucky.stop_reason.startswith("stops before calibrated")
