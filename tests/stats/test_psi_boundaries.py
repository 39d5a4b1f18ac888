"""Boundaries of psi: tied points pooled, two points, input checks, leave one seed out against
sklearn."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from evalkit.errors import InputError, NotEstimable
from evalkit.stats.psi import fit_psi


# ------------------------------------------------------------------------- psi


def test_psi_pools_ties_and_reports_residuals():
    res = fit_psi([1.0, 1.0, 2.0, 3.0], [0.0, 2.0, 3.0, 2.0])
    # pooled means (1, 3, 2) with weights (2, 1, 1); PAVA pools the last two
    assert res.x.tolist() == [1.0, 2.0, 3.0] and res.y.tolist() == [1.0, 2.5, 2.5]
    assert res.residuals.tolist() == [-1.0, 1.0, 0.5, -0.5]
    assert res.eps_cal == 1.0 and res.mean_abs_residual == 0.75
    assert res.n_points == 4 and res.n_groups == 0 and res.loso_reason == "no groups (seeds) given"
    assert math.isnan(res.eps_cal_loso)


def test_psi_two_points_and_input_checks():
    res = fit_psi([0.0, 1.0], [0.0, 0.5])
    assert res.predict([0.5, -1.0, 2.0]).tolist() == [0.25, 0.0, 0.5]
    with pytest.raises(InputError, match="phi has 2 values but vex has 3"):
        fit_psi([0.0, 1.0], [0.0, 0.5, 1.0])
    with pytest.raises(NotEstimable, match=r"Phi is constant \(2.0\)"):
        fit_psi([2.0, 2.0], [0.0, 1.0])
    with pytest.raises(InputError, match="groups has shape"):
        fit_psi([0.0, 1.0], [0.0, 0.5], groups=[1, 2, 3])
    one = fit_psi([0.0, 1.0], [0.0, 0.5], groups=[4, 4])
    assert one.n_groups == 1 and "only 1 group" in one.loso_reason and math.isnan(one.eps_cal_loso)


def _loso_reference(phi, vex, groups):
    out = {}
    for g in np.unique(groups):
        keep = groups != g
        iso = IsotonicRegression(out_of_bounds="clip").fit(phi[keep], vex[keep])
        out[int(g)] = float(np.max(np.abs(vex[~keep] - iso.predict(phi[~keep]))))
    return out


@pytest.mark.parametrize("n_groups", [2, 3])
def test_psi_leave_one_seed_out_against_sklearn(n_groups):
    """Phi spans exactly [0, 1] after any group is held out; errors are well below 1."""
    rng = np.random.default_rng(n_groups)
    groups = np.repeat(np.arange(n_groups), 4)
    phi = np.tile([0.0, 0.3, 0.7, 1.0], n_groups) + 0.0
    phi[4:8] = [0.0, 0.2, 0.5, 1.0]
    vex = 0.1 * phi + rng.normal(0, 0.02, phi.size)
    res = fit_psi(phi, vex, groups=groups)
    want = _loso_reference(phi, vex, groups)
    assert res.loso_per_group == pytest.approx(want, rel=1e-9)
    assert res.eps_cal_loso == pytest.approx(max(want.values()), rel=1e-9)
    assert res.eps_cal_loso < 0.2 and len(set(want.values())) == n_groups
    assert res.n_groups == n_groups and res.loso_reason == ""


def test_psi_group_whose_removal_leaves_a_constant_phi():
    phi = np.array([1.0, 2.0, 5.0, 5.0, 5.0, 5.0])
    groups = np.array([0, 0, 1, 1, 2, 2])
    res = fit_psi(phi, [0.0, 0.1, 0.3, 0.2, 0.4, 0.3], groups=groups)
    assert math.isnan(res.eps_cal_loso)
    assert "groups [0] leave a constant Phi when held out" in res.loso_reason
    assert set(res.loso_per_group) == {1, 2}
