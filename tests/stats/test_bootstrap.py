"""The seed bootstrap against scipy, and Holm against statsmodels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from evalkit.errors import InputError
from evalkit.stats import bootstrap_ci, holm


def test_bootstrap_ci_close_to_scipy():
    x = np.random.default_rng(3).exponential(size=15)
    for method in ("BCa", "percentile"):
        mine = bootstrap_ci(x, n_resamples=40_000, method=method, rng=1)
        ref = stats.bootstrap((x,), np.mean, n_resamples=40_000, method=method,
                              rng=np.random.default_rng(2)).confidence_interval
        assert mine.ci_low == pytest.approx(ref.low, abs=0.03)
        assert mine.ci_high == pytest.approx(ref.high, abs=0.03)
    a = bootstrap_ci(x, rng=np.random.default_rng(8))
    b = bootstrap_ci(x, rng=np.random.default_rng(8))
    assert a.ci_low == b.ci_low
    assert bootstrap_ci(x, statistic=np.median, n_resamples=1000).statistic == np.median(x)
    flat = bootstrap_ci([1.0, 1.0, 1.0])
    assert flat.degenerate and flat.ci_low == flat.ci_high == 1.0
    with pytest.raises(InputError):
        bootstrap_ci([1.0])


def test_holm_matches_statsmodels():
    p = [0.01, 0.04, 0.03, 0.2]
    reject, adj = holm(p)
    ref = multipletests(p, method="holm")
    assert np.array_equal(reject, ref[0]) and np.allclose(adj, ref[1])
    assert np.allclose(adj, [0.04, 0.09, 0.09, 0.2])
    with pytest.raises(InputError):
        holm([0.1, 1.5])
