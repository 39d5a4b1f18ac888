"""psi-predicted gain (leave-one-seed-out) and the unexplained part, against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from evalkit.errors import InputError, NotEstimable
from evalkit.stats.explained import explained_gain


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
    lo, hi = res.unexplained_ci
    assert res.predicts_gain
    # equivalence: the CI must lie inside the band (here 8 seeds at 0.4 pp noise: too wide)
    assert res.within_tolerance == (-res.tolerance_abs <= lo and hi <= res.tolerance_abs)
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
