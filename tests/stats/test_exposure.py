"""Exposure regression against statsmodels.

The exposure regression against statsmodels at the threshold, and its boundaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.regression.linear_model import OLS
from statsmodels.tools.tools import add_constant

from evalkit.errors import InputError
from evalkit.stats.exposure import EXPLAINS_V_R2, exposure_regression


def test_exposure_regression_matches_statsmodels_and_flags():
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    v = 0.02 + 0.5 * x + np.array([0.001, -0.002, 0.0, 0.002, -0.001])
    r = exposure_regression(v, x)
    ref = OLS(v, add_constant(x)).fit()
    assert r.r_squared == pytest.approx(ref.rsquared) and r.slope == pytest.approx(ref.params[1])
    assert r.p_value == pytest.approx(ref.pvalues[1]) and r.explains_v
    noisy = exposure_regression([0.3, 0.1, 0.25, 0.05, 0.2], x)
    assert not noisy.explains_v
    flat = exposure_regression(v, [0.2] * 5)
    assert not flat.estimable and "constant" in flat.reason
    with pytest.raises(InputError):
        exposure_regression([0.1, 0.2], [0.1, 0.2])


# ------------------------------------------------------------------ exposure


def test_exposure_regression_against_statsmodels_at_the_threshold():
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    v = np.array([0.05, 0.13, 0.12, 0.24, 0.22])
    ref = OLS(v, add_constant(x)).fit()
    got = exposure_regression(v, x)
    assert got.estimable and got.reason == "" and got.n == 5
    assert got.r_squared == pytest.approx(ref.rsquared, rel=1e-12)
    assert got.intercept == pytest.approx(ref.params[0], rel=1e-12)
    assert got.slope == pytest.approx(ref.params[1], rel=1e-12)
    assert got.p_value == pytest.approx(ref.pvalues[1], rel=1e-12)
    lo, hi = ref.conf_int()[1]
    assert (got.slope_ci_low, got.slope_ci_high) == (pytest.approx(lo), pytest.approx(hi))
    assert got.slope_ci_low < got.slope < got.slope_ci_high
    # default threshold 0.8; R^2 exactly at the threshold explains V
    assert got.threshold == EXPLAINS_V_R2 == 0.8
    assert 0.8 < ref.rsquared and got.explains_v
    at = exposure_regression(v, x, threshold=float(ref.rsquared))
    assert at.explains_v
    above = exposure_regression(v, x, threshold=float(ref.rsquared) + 1e-9)
    assert not above.explains_v and above.threshold == pytest.approx(ref.rsquared + 1e-9)


def test_exposure_regression_boundaries():
    three = exposure_regression([0.1, 0.3, 0.2], [0.1, 0.2, 0.3])
    assert three.estimable and three.n == 3
    with pytest.raises(InputError, match="exposure"):
        exposure_regression([0.1, 0.3, 0.2], [0.1, 0.2])
    with pytest.raises(InputError, match="4 V values but 3 exposures"):
        exposure_regression([0.1, 0.3, 0.2, 0.4], [0.1, 0.2, 0.3])
    flat_x = exposure_regression([0.1, 0.3, 0.2], [0.2] * 3)
    assert not flat_x.estimable and not flat_x.explains_v
    assert flat_x.reason == "exposure is constant across runs: regression undefined"
    assert flat_x.n == 3 and math.isnan(flat_x.slope)
    flat_v = exposure_regression([0.2] * 3, [0.1, 0.2, 0.3])
    assert flat_v.reason == "V is constant across runs: regression undefined"
    # a range of exactly 1 is not constant
    unit = exposure_regression([0.0, 1.0, 0.4], [0.0, 0.5, 1.0])
    assert unit.estimable and np.isfinite(unit.slope)
    unit_v = exposure_regression([0.0, 0.5, 1.0], [0.1, 0.5, 0.2])
    assert unit_v.estimable
