"""Exposure regression against statsmodels."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm

from evalkit.errors import InputError
from evalkit.stats import exposure_regression


def test_exposure_regression_matches_statsmodels_and_flags():
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    v = 0.02 + 0.5 * x + np.array([0.001, -0.002, 0.0, 0.002, -0.001])
    r = exposure_regression(v, x)
    ref = sm.OLS(v, sm.add_constant(x)).fit()
    assert r.r_squared == pytest.approx(ref.rsquared) and r.slope == pytest.approx(ref.params[1])
    assert r.p_value == pytest.approx(ref.pvalues[1]) and r.explains_v
    noisy = exposure_regression([0.3, 0.1, 0.25, 0.05, 0.2], x)
    assert not noisy.explains_v
    flat = exposure_regression(v, [0.2] * 5)
    assert not flat.estimable and "constant" in flat.reason
    with pytest.raises(InputError):
        exposure_regression([0.1, 0.2], [0.1, 0.2])
