"""A regression of V on exposure across runs.

Protocol pitfall 2: when runs differ in how many windows they observed, V tracks exposure
(the share of requests inside windows), not placement.  ``exposure_regression`` says when
exposure alone explains V (R^2 >= 0.8).  The per-run exposures come from
:mod:`evalkit.runlog.summary`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_finite_1d

__all__ = ["EXPLAINS_V_R2", "ExposureRegression", "exposure_regression"]

EXPLAINS_V_R2 = 0.8


@dataclass(frozen=True)
class ExposureRegression(ResultMixin):
    """OLS ``V = intercept + slope * exposure`` across runs (statsmodels).

    ``explains_v``: R^2 >= ``threshold`` — V is explained by exposure (budget, window count),
    so differences in V cannot be credited to placement.  ``estimable`` False (with
    ``reason``) when exposure or V is constant."""

    r_squared: float
    slope: float
    slope_ci_low: float
    slope_ci_high: float
    intercept: float
    p_value: float
    n: int
    explains_v: bool
    threshold: float
    estimable: bool
    reason: str
    method: str = "OLS of V on exposure with intercept (statsmodels)"


def exposure_regression(v, exposure, threshold: float = EXPLAINS_V_R2) -> ExposureRegression:
    """Regress (n,) V on (n,) exposure (n >= 3 runs)."""
    v = as_finite_1d(v, "v", min_size=3, what="runs")
    x = as_finite_1d(exposure, "exposure", min_size=3, what="runs")
    if v.size != x.size:
        raise InputError(f"{v.size} V values but {x.size} exposures", column="exposure",
                         fix="pass one V and one exposure per run")
    nan = math.nan
    if np.ptp(x) == 0 or np.ptp(v) == 0:
        which = "exposure" if np.ptp(x) == 0 else "V"
        return ExposureRegression(nan, nan, nan, nan, nan, nan, int(v.size), False,
                                  float(threshold), False,
                                  f"{which} is constant across runs: regression undefined")
    # statsmodels pulls in scipy.stats (~1 s): imported on first use, not with evalkit.stats
    from statsmodels.regression.linear_model import OLS
    from statsmodels.tools.tools import add_constant

    fit = OLS(v, add_constant(x)).fit()
    lo, hi = fit.conf_int()[1]
    r2 = float(fit.rsquared)
    return ExposureRegression(r2, float(fit.params[1]), float(lo), float(hi),
                              float(fit.params[0]), float(fit.pvalues[1]), int(v.size),
                              r2 >= threshold, float(threshold), True, "")
