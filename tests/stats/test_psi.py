"""Isotonic psi against a brute-force PAVA, eps_cal, leave one seed out, a constant phi.

Boundaries of psi: tied points pooled, two points, input checks, leave one seed out against
sklearn."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from sklearn.isotonic import IsotonicRegression

from evalkit.errors import InputError, NotEstimable
from evalkit.stats.psi import fit_psi


def pava(x, y):
    """Textbook pool-adjacent-violators on points sorted by x (ties pooled first)."""
    ux = np.unique(x)
    blocks = [[float(np.mean(y[x == v])), float(np.sum(x == v)), 1] for v in ux]
    merged = []
    for b in blocks:
        merged.append(b)
        while len(merged) > 1 and merged[-2][0] > merged[-1][0]:
            v2, w2, c2 = merged.pop()
            v1, w1, c1 = merged.pop()
            merged.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    fitted = np.concatenate([[v] * c for v, _, c in merged])
    return ux, fitted


@settings(max_examples=40, deadline=None)
@given(x=st.lists(st.integers(0, 6), min_size=3, max_size=12),
       seed=st.integers(0, 1000))
def test_isotonic_matches_brute_force_pava(x, seed):
    x = np.array(x, dtype=float)
    if np.ptp(x) == 0:
        x[0] += 1
    y = np.random.default_rng(seed).normal(size=x.size)
    fit = fit_psi(x, y)
    ux, fitted = pava(x, y)
    assert np.allclose(fit.x, ux) and np.allclose(fit.y, fitted, atol=1e-10)
    assert np.all(np.diff(fit.y) >= -1e-12)
    assert fit.eps_cal == pytest.approx(np.max(np.abs(y - fit.predict(x))))


def test_eps_cal_zero_on_monotone_data_and_counter_example():
    phi = np.array([1.0, 2.0, 3.0, 4.0])
    fit = fit_psi(phi, [0.0, 0.01, 0.01, 0.05])
    assert fit.eps_cal == 0 and fit.mean_abs_residual == 0
    bad = fit_psi([1.0, 2.0, 3.0], [0.0, 1.0, 0.5])       # 1 then 0.5: pooled to 0.75
    assert np.allclose(bad.y, [0.0, 0.75, 0.75])
    assert bad.eps_cal == pytest.approx(0.25)
    assert np.allclose(bad.residuals, [0.0, 0.25, -0.25])


def test_leave_one_seed_out():
    phi = np.array([1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
    vex = np.array([0.0, 0.1, 0.2, 0.0, 0.3, 0.2])
    fit = fit_psi(phi, vex, groups=[0, 0, 0, 1, 1, 1])
    # hold out seed 1: fit on seed 0 is exact (0, .1, .2) -> errors (0, .2, 0)
    # hold out seed 0: fit on seed 1 pools (.3, .2) -> (0, .25, .25) -> errors (0, .15, .05)
    assert fit.loso_per_group == {0: pytest.approx(0.15), 1: pytest.approx(0.2)}
    assert fit.eps_cal_loso == pytest.approx(0.2)
    one = fit_psi(phi, vex, groups=[0] * 6)
    assert np.isnan(one.eps_cal_loso) and "at least 2" in one.loso_reason
    assert np.isnan(fit_psi(phi, vex).eps_cal_loso)
    json.dumps(fit.to_dict(), allow_nan=False)


def test_constant_phi_not_estimable():
    with pytest.raises(NotEstimable, match="constant"):
        fit_psi([5.0, 5.0, 5.0], [0.1, 0.2, 0.3])
    with pytest.raises(InputError):
        fit_psi([1.0, 2.0], [0.1])
    with pytest.raises(InputError):
        fit_psi([1.0, np.nan], [0.1, 0.2])


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
