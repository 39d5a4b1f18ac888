"""The report's null-distribution figure shows the statistic the decision's p-value used."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from evalkit.audit.figure_data import null_histogram
from evalkit.jsonio import canonical_json
from evalkit.report import figures as figs
from evalkit.stats.randomisation import within_seed_permutation_test

POLICY = [0.10, 0.20, 0.15, 0.12]
DRAWS = [[0.30, 0.25], [0.22, 0.19, 0.31], [0.40, 0.18], [0.16, 0.21]]


def _brute_t():
    """t = mean/se of every label set, by itertools (independent of the engine)."""
    runs = [[p] + d for p, d in zip(POLICY, DRAWS)]
    out = []
    for lab in itertools.product(*[range(len(r)) for r in runs]):
        d = np.array([np.mean([x for k, x in enumerate(r) if k != j]) - r[j]
                      for r, j in zip(runs, lab)])
        out.append(d.mean() / (d.std(ddof=1) / np.sqrt(d.size)))
    return np.sort(out)


def test_studentized_null_is_the_t_of_every_label_set_and_gives_the_p():
    res = within_seed_permutation_test(POLICY, DRAWS, confidence_level=None)
    assert res.null_statistic == "studentized" and res.null_observed == res.t_statistic
    null = res.null_distribution()
    ref = _brute_t()
    np.testing.assert_allclose(null, ref, rtol=1e-12)
    # the plotted distribution is the one the decision used: its tail share is the p
    assert res.exact and np.mean(null >= res.t_statistic - 1e-12) == pytest.approx(res.p_value)
    rnd = res.null_distribution(max_points=20, seed=2)
    assert rnd.size == 20 and np.all(np.isin(np.round(rnd, 10), np.round(ref, 10)))


def test_raw_mean_and_one_draw_per_seed_plot_g():
    raw = within_seed_permutation_test(POLICY, DRAWS, confidence_level=None, statistic="mean")
    assert raw.null_statistic == "mean" and raw.null_observed == raw.statistic
    one = within_seed_permutation_test(POLICY, [d[:1] for d in DRAWS], confidence_level=None)
    assert one.null_statistic == "mean"          # mean/se orders sign flips as the mean does


def _hist(null, observed, p_value, alternative, test="sign-flip", statistic="mean"):
    """The document's figure_data.null of these values, through JSON (as the report reads
    it)."""
    out = null_histogram(null)
    out.update(observed=observed, p_value=p_value, alternative=alternative, test=test,
               statistic=statistic,
               observed_nonfinite=None if np.isfinite(observed) else str(observed))
    return json.loads(canonical_json(out))


def test_figure_labels_the_studentized_statistic():
    res = within_seed_permutation_test(POLICY, DRAWS, confidence_level=None)
    fig = figs.null_distribution(_hist(res.null_distribution(), res.null_observed, res.p_value,
                                       res.alternative, res.test, res.null_statistic))
    assert fig.title.startswith("Null distribution of t = G / se(G)")
    assert "t = G / se(G)" in fig.alt and "percentage points" not in fig.alt
    raw = figs.null_distribution(_hist(np.array([-0.01, 0.0, 0.02]), 0.02, 0.3, "greater"))
    assert raw.title.startswith("Null distribution of G (") and "percentage points" in raw.alt
    inf = figs.null_distribution(_hist(np.array([-np.inf, -1.0, 0.5, np.inf]), np.inf, 0.25,
                                       "greater", statistic="studentized"))
    assert "2 label sets with se = 0" in inf.alt and "t = +inf" in inf.alt
    assert "over 4 label sets" in inf.alt


def test_null_histogram_counts_the_finite_values_in_10_to_60_bins():
    rng = np.random.default_rng(0)
    for n in (3, 100, 400, 20_000):
        null = rng.normal(size=n)
        got = null_histogram(null)
        ref_counts, ref_edges = np.histogram(null, bins=min(60, max(10, int(np.sqrt(n)))))
        assert got["size"] == n and got["counts"].sum() == n
        np.testing.assert_array_equal(got["counts"], ref_counts)
        np.testing.assert_array_equal(got["edges"], ref_edges)
    with_inf = null_histogram(np.array([np.inf, 0.0, 1.0, -np.inf]))
    assert with_inf["size"] == 4 and with_inf["counts"].sum() == 2
