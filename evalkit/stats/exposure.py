"""Exposure next to every V, and a regression of V on exposure across runs.

Protocol pitfall 2: when runs differ in how many windows they observed, V tracks exposure
(the share of requests inside windows), not placement.  ``exposure_regression`` says when
exposure alone explains V (R^2 >= 0.8).  The per-run numbers come from
:mod:`evalkit.runlog.metrics`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.runlog import metrics
from evalkit.stats._result import ResultMixin, as_finite_1d

EXPLAINS_V_R2 = 0.8


@dataclass(frozen=True)
class Exposure(ResultMixin):
    """Exposure of one run: windows observed inside the observed span (K), the share of
    requests in flight during any window (request-weighted) and the share of the span
    covered by windows (time-weighted)."""

    run_id: str
    windows_total: int
    windows_observed: int
    exposure_requests: float
    exposure_time: float
    span_start: float
    span_end: float
    n_requests: int


def _column(df, name, run_id):
    if name not in df.columns:
        raise InputError("run table lacks a column", file=run_id, column=name,
                         fix="the run does not follow run-log format v1; rewrite it")
    return df[name].to_numpy()


def exposure(run) -> Exposure:
    """Exposure of a run (an :class:`evalkit.runlog.Run` or a run directory path)."""
    if isinstance(run, (str, os.PathLike)):
        from evalkit.runlog.io import read_run
        run = read_run(run)
    meta, req, merges = run.meta, run.requests, run.merges
    run_id = str(meta.get("run_id", getattr(run, "path", "run")))
    for key in ("horizon_s", "merge_duration_s"):
        if meta.get(key) is None:
            raise InputError("run.json lacks a key", file=run_id, column=key,
                             fix="rewrite the run with run-log format v1")
    horizon, dur = float(meta["horizon_s"]), float(meta["merge_duration_s"])
    arrival = _column(req, "arrival_s", run_id)
    end = _column(req, "end_s", run_id)
    span = metrics.observed_span(arrival, end, horizon, dur)
    ms, me = _column(merges, "start_s", run_id), _column(merges, "end_s", run_id)
    return Exposure(
        run_id=run_id, windows_total=int(len(merges)),
        windows_observed=metrics.windows_observed(ms, me, span),
        exposure_requests=metrics.request_exposure(arrival, _column(req, "sent_s", run_id), end,
                                                   _column(req, "ok", run_id), ms, me, horizon),
        exposure_time=metrics.time_exposure(ms, me, span),
        span_start=span.start_s, span_end=span.end_s, n_requests=int(len(req)))


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
