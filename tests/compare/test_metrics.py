"""Per-run metrics against direct computations on the requests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalkit.compare.metrics import METRICS, metric_value
from evalkit.errors import InputError

SLO = {"e2e_s": 1.0, "ttft_s": 0.2, "tpot_s": None}


def _requests(n=50, fail=()):
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, 10, n))
    ttft = rng.uniform(0.05, 0.3, n)
    e2e = ttft + rng.uniform(0.2, 1.2, n)
    ok = np.ones(n, bool)
    ok[list(fail)] = False
    return pd.DataFrame({"arrival_s": arrival, "sent_s": arrival,
                         "first_token_s": np.where(ok, arrival + ttft, np.nan),
                         "end_s": np.where(ok, arrival + e2e, np.nan),
                         "output_tokens": np.full(n, 11), "ok": ok}), ttft, e2e, ok


def test_values_match_direct_computation():
    req, ttft, e2e, ok = _requests(fail=(3,))
    bad = ~ok | (e2e > 1.0) | (ttft > 0.2)
    assert metric_value("violation_rate", req, SLO, where="r") == pytest.approx(bad.mean())
    span = np.nanmax(req["end_s"]) - req["arrival_s"].min()
    assert metric_value("goodput", req, SLO, where="r") == pytest.approx((~bad).sum() / span)
    req2, ttft2, e2e2, _ = _requests()
    assert metric_value("ttft_p90", req2, None, where="r") == pytest.approx(np.quantile(ttft2, 0.9))
    assert metric_value("e2e_p50", req2, None, where="r") == pytest.approx(np.quantile(e2e2, 0.5))
    tpot = (e2e2 - ttft2) / 10
    assert metric_value("tpot_p99", req2, None, where="r") == pytest.approx(np.quantile(tpot, 0.99))


def test_every_catalogued_metric_has_a_direction():
    assert {m.better for m in METRICS.values()} == {"lower", "higher"}
    assert METRICS["goodput"].better == "higher" and METRICS["e2e_p99"].better == "lower"


def test_a_percentile_among_failed_requests_is_an_error_naming_the_run_and_metric():
    req, *_ = _requests(n=20, fail=(0, 1, 2))
    with pytest.raises(InputError) as err:
        metric_value("e2e_p99", req, None, where="runs/A/run-1.json")
    assert err.value.file == "runs/A/run-1.json" and err.value.column == "e2e_p99"
    assert "violation_rate" in err.value.fix


def test_a_metric_that_needs_an_slo_names_the_option():
    req, *_ = _requests()
    with pytest.raises(InputError) as err:
        metric_value("violation_rate", req, None, where="x.json")
    assert err.value.column == "--slo-e2e"
