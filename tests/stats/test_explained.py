"""psi-predicted gain (leave-one-seed-out) and the unexplained part, against brute force.

Boundaries of the explained gain: zero prediction and tolerance, unexplained CIs at and
beyond the tolerance, defaults and input checks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from evalkit.errors import InputError, NotEstimable
from evalkit.stats.explained import explained_gain, unexplained_within_share


def _campaign(rng, n_seeds=8, draws=3, policy="low_phi", slope=0.002, noise=0.004):
    """Per seed: one policy run and `draws` draws; Vex = slope * Phi + noise.  policy:
    "low_phi" (merges where few requests are in flight) or "lucky" (Phi like the draws, but
    a smaller Vex at the same Phi: it suffers less per overlapping request)."""
    phi, vex, groups, seeds = [], [], [], []
    for s in range(n_seeds):
        rows = []
        for kind in ["policy"] + ["draw"] * draws:
            p = rng.uniform(5, 25) if (kind == "draw" or policy == "lucky") else rng.uniform(2, 6)
            v = slope * p + rng.normal(0, noise)
            if kind == "policy" and policy == "lucky":
                v -= 0.02
            rows.append(len(phi))
            phi.append(p)
            vex.append(v)
            groups.append(s)
        seeds.append((s, rows[0], rows[1:]))
    return np.array(phi), np.array(vex), np.array(groups), seeds


def test_matches_a_brute_force_leave_one_seed_out_fit():
    phi, vex, groups, seeds = _campaign(np.random.default_rng(0))
    res = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=1)
    policy_rows = [pol for _, pol, _ in seeds]
    for row, (s, pol, draws) in zip(res.per_seed, seeds):
        # psi never sees a policy run of the claim: the other seeds' draws only
        keep = (groups != s) & ~np.isin(np.arange(phi.size), policy_rows)
        iso = IsotonicRegression(out_of_bounds="clip").fit(phi[keep], vex[keep])
        want = float(np.mean(iso.predict(phi[draws])) - iso.predict(phi[[pol]])[0])
        assert row.g_pred == pytest.approx(want, abs=1e-12)
        assert row.d == pytest.approx(np.mean(vex[draws]) - vex[pol])
    assert res.gain == pytest.approx(np.mean([r.d for r in res.per_seed]))
    assert res.unexplained == pytest.approx(res.gain - res.g_pred)
    assert res.predicts_gain
    # equivalence: both one-sided tests on the per-seed combinations reject at alpha
    d = np.array([r.d for r in res.per_seed])
    g = np.array([r.g_pred for r in res.per_seed])
    assert res.p_equivalence == max(unexplained_within_share(d, g, 0.25))
    assert res.within_tolerance == (res.p_equivalence <= 0.05)
    quiet = explained_gain(*_campaign(np.random.default_rng(0), noise=0.001), n_boot=500, rng=1)
    assert quiet.predicts_gain and quiet.within_tolerance and quiet.explained


def test_lucky_policy_with_the_draws_overlap_is_not_explained():
    """Same Phi distribution as the draws, less harm per overlapping request: a real gain
    (G > 0) that overlap does not predict."""
    phi, vex, groups, seeds = _campaign(np.random.default_rng(1), policy="lucky")
    res = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=1)
    assert res.gain_ci[0] > 0
    assert res.g_pred_ci[0] <= 0
    assert not res.predicts_gain and not res.explained
    assert res.unexplained_ci[0] > res.tolerance_abs          # and far beyond the tolerance


def test_deterministic_and_bad_input():
    phi, vex, groups, seeds = _campaign(np.random.default_rng(2))
    a = explained_gain(phi, vex, groups, seeds, n_boot=300, rng=4).to_dict()
    assert a == explained_gain(phi, vex, groups, seeds, n_boot=300, rng=4).to_dict()
    with pytest.raises(NotEstimable, match="at least 2"):
        explained_gain(phi, vex, groups, seeds[:1], n_boot=300)
    flat = np.where(groups == 0, phi, 7.0)
    with pytest.raises(NotEstimable, match="constant"):
        explained_gain(flat, vex, groups, seeds, n_boot=300)
    with pytest.raises(InputError, match="tolerance"):
        explained_gain(phi, vex, groups, seeds, tolerance=-1)


# ------------------------------------------------------------------------- explained gain


def _flat_campaign(policy_shift, n_seeds=3):
    """Per seed: a policy run and a draw at Phi = 2, and another run at Phi = 6.  The draw
    and the policy share Phi, so g_pred = 0 exactly; d = -policy_shift[s]."""
    phi, vex, groups, seeds = [], [], [], []
    for s in range(n_seeds):
        base = len(phi)
        phi += [2.0, 2.0, 6.0]
        vex += [0.25 + policy_shift[s], 0.25, 0.75]
        groups += [s, s, s]
        seeds.append((s, base, [base + 1]))
    return np.array(phi), np.array(vex), np.array(groups), seeds


def test_explained_gain_at_zero_prediction_and_zero_tolerance():
    """g_pred = 0 and U = 0 exactly: the CI of G_pred is [0, 0] (no predicted gain); a band of
    zero width holds no CI (equivalence to within 0 is not a claim), so not within."""
    phi, vex, groups, seeds = _flat_campaign([0.0, 0.0, 0.0])
    res = explained_gain(phi, vex, groups, seeds[:2], n_boot=200, rng=0, tolerance=0.0)
    assert res.n_seeds == 2
    assert res.g_pred_ci == [0.0, 0.0] and res.unexplained_ci == [0.0, 0.0]
    assert res.tolerance == 0.0 and res.tolerance_abs == 0.0
    assert not res.predicts_gain and not res.within_tolerance and not res.explained


def test_explained_gain_unexplained_ci_straddling_zero_is_not_evidence():
    # G = 0, so the band +-0.25 |G| has zero width: a CI straddling 0 merely overlaps it,
    # which the equivalence test does not accept (the old rule called this "within")
    shift = [-0.1, 0.1, -0.05, 0.05, 0.02, -0.02]
    phi, vex, groups, seeds = _flat_campaign(shift, n_seeds=6)
    res = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=1)
    assert res.gain == pytest.approx(0.0, abs=1e-15)
    assert res.unexplained_ci[0] < 0 < res.unexplained_ci[1]
    assert not res.within_tolerance and not res.explained
    wide = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=1, tolerance=1e6)
    assert wide.tolerance_abs == 0.0 and not wide.within_tolerance


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_explained_gain_unexplained_ci_beyond_the_tolerance_is_not_within(sign):
    shift = [sign * v for v in (-0.1, -0.12, -0.09, -0.11, -0.1)]
    phi, vex, groups, seeds = _flat_campaign(shift, n_seeds=5)
    res = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=2)
    assert res.gain == pytest.approx(sign * 0.104)
    assert res.tolerance == 0.25 and res.tolerance_abs == pytest.approx(0.25 * 0.104)
    assert res.n_boot == 500
    if sign > 0:
        assert res.unexplained_ci[0] > res.tolerance_abs
    else:
        assert res.unexplained_ci[1] < -res.tolerance_abs
    assert not res.within_tolerance and not res.predicts_gain and not res.explained


def test_explained_gain_defaults():
    phi, vex, groups, seeds = _flat_campaign([-0.1, -0.12, -0.09])
    res = explained_gain(phi, vex, groups, seeds, rng=0)
    assert res.n_boot == 2000 and res.confidence_level == 0.95 and res.tolerance == 0.25
    assert [r.seed for r in res.per_seed] == [0, 1, 2]
    assert [r.d for r in res.per_seed] == pytest.approx([0.1, 0.12, 0.09])
    assert all(r.g_pred == 0.0 and r.phi_policy == 2.0 and r.n_draws == 1 for r in res.per_seed)


def test_explained_gain_input_checks():
    phi, vex, groups, seeds = _flat_campaign([0.0, 0.0, 0.0])
    with pytest.raises(InputError, match=r"must be \(n,\) arrays"):
        explained_gain(phi, vex[:-1], groups, seeds)
    with pytest.raises(InputError, match=r"must be \(n,\) arrays"):
        explained_gain(phi, vex, groups[:-1], seeds)
    with pytest.raises(InputError, match=r"must be \(n,\) arrays"):
        explained_gain(phi[None, :], vex[None, :], groups[None, :], seeds)
    for which in ("phi", "vex"):
        bad = {"phi": phi.copy(), "vex": vex.copy()}
        bad[which][4] = np.nan
        with pytest.raises(InputError, match="phi or vex holds NaN/inf"):
            explained_gain(bad["phi"], bad["vex"], groups, seeds)
    for tol in (-0.01, float("nan")):
        with pytest.raises(InputError, match="tolerance"):
            explained_gain(phi, vex, groups, seeds, tolerance=tol)
    without_draws = [seeds[0], (1, seeds[1][1], [])]
    with pytest.raises(NotEstimable, match=r"1 seed\(s\) with a policy run and draws"):
        explained_gain(phi, vex, groups, without_draws)
    one_phi = np.where(groups == 2, 2.0, phi)            # seed 0 held out: seeds 1, 2 left
    one_phi[groups == 1] = 2.0
    with pytest.raises(NotEstimable, match="holding out seed 0 leaves a constant"):
        explained_gain(one_phi, vex, groups, seeds)


@pytest.mark.parametrize("level", [0.5, 1.0, 1.5, float("nan")])
def test_explained_gain_refuses_a_confidence_level_outside_one_half_to_one(level):
    phi, vex, groups, seeds = _flat_campaign([-0.1, -0.12, -0.09])
    with pytest.raises(InputError, match=f"confidence_level = {level}"):
        explained_gain(phi, vex, groups, seeds, confidence_level=level)
