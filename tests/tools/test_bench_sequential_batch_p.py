"""The benchmark's batch within-seed permutation p (tools/bench/bench_sequential.py) against
the exact within-seed permutation test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from evalkit.stats import sign_flip_test
from evalkit.stats.randomisation import within_seed_permutation_test
from evalkit.stats.sequential import label_values_equal_m
from tests.support.scripts import load_script

BENCH = load_script(Path(__file__).resolve().parents[2] / "tools" / "bench" / "bench_sequential.py",
                    "bench_sequential")
EXACT_LABEL_SETS = BENCH.EXACT_LABEL_SETS
permutation_p_batch = BENCH.permutation_p_batch


@pytest.mark.parametrize("n, b", [(6, 100), (9, 20000)])   # 729 label sets: exact; 19,683: MC
def test_batch_permutation_p_matches_the_exact_test(n, b):
    # the audit's default test: studentized (mean/se recomputed per label set)
    rng = np.random.default_rng(1)
    v = rng.lognormal(np.log(0.06), 0.5, (3, n, 3))
    v[:, :, 0] -= 0.01
    vals = label_values_equal_m(v[..., 0], v[..., 1:])
    got = permutation_p_batch(vals, b, np.random.default_rng(2), "two-sided")
    for r in range(3):
        exact = within_seed_permutation_test(v[r, :, 0], list(v[r, :, 1:]), "two-sided",
                                             confidence_level=None)
        assert exact.exact and exact.statistic_name == "studentized"
        if 3 ** n <= EXACT_LABEL_SETS:
            assert got[r] == pytest.approx(exact.p_value, rel=1e-12)
        else:
            se = math.sqrt(exact.p_value * (1 - exact.p_value) / b) * 2 + 1 / b
            assert abs(got[r] - exact.p_value) <= 4 * se, (got[r], exact.p_value)


def test_batch_p_is_the_studentized_not_the_raw_mean_test():
    # one seed with a large label spread: raw mean and mean/se order label sets differently
    pol = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    draws = np.array([[1.0, 1.2], [0.9, 1.1], [1.1, 0.8], [1.0, 0.9], [-9.0, 12.0],
                      [0.2, 1.9]])
    vals = label_values_equal_m(pol[None], draws[None])
    for alt in ("greater", "less", "two-sided"):
        got = permutation_p_batch(vals, 100, np.random.default_rng(0), alt)[0]
        stud = within_seed_permutation_test(pol, list(draws), alt, confidence_level=None)
        raw = within_seed_permutation_test(pol, list(draws), alt, confidence_level=None,
                                           statistic="mean")
        assert got == pytest.approx(stud.p_value, rel=1e-12)
        if alt == "greater":
            assert abs(raw.p_value - stud.p_value) > 0.05     # the case tells them apart


def test_batch_p_with_ties_and_a_degenerate_se():
    # seed runs that all tie (label values 0) and campaigns whose d are all equal (se = 0)
    pol = np.array([[0.1, 0.2, 0.3, 0.4, 0.5],
                    [0.0, 0.0, 0.0, 0.0, 0.0],
                    [0.1, 0.2, 0.3, 0.3, 0.1]])
    draws = np.stack([np.column_stack([pol[0] + 0.1, pol[0] + 0.1]),
                      np.ones((5, 2)),
                      np.array([[0.2, 0.0], [0.2, 0.2], [0.5, 0.3], [0.3, 0.3], [0.4, 0.1]])])
    vals = label_values_equal_m(pol, draws)
    for alt in ("greater", "less", "two-sided"):
        got = permutation_p_batch(vals, 100, np.random.default_rng(0), alt)
        for r in range(3):
            ref = within_seed_permutation_test(pol[r], list(draws[r]), alt,
                                               confidence_level=None)
            assert got[r] == pytest.approx(ref.p_value, rel=1e-12), (alt, r)


def test_batch_p_with_one_draw_is_the_sign_flip_test():
    rng = np.random.default_rng(8)
    v = rng.lognormal(np.log(0.06), 0.5, (4, 10, 2))
    vals = label_values_equal_m(v[..., 0], v[..., 1:])
    got = permutation_p_batch(vals, 100, np.random.default_rng(0), "two-sided")
    for r in range(4):
        assert got[r] == pytest.approx(sign_flip_test(v[r, :, 1] - v[r, :, 0],
                                                      "two-sided").p_value, rel=1e-12)


def test_batch_permutation_p_never_below_the_design_minimum():
    v = np.random.default_rng(3).lognormal(np.log(0.06), 0.5, (50, 2, 6))
    v[:, :, 0] -= 0.05                       # the policy run is the best of every seed
    p = permutation_p_batch(label_values_equal_m(v[..., 0], v[..., 1:]), 400,
                            np.random.default_rng(4), "two-sided")
    assert np.all(p >= 2 / 36 - 1e-12)       # 2 seeds x 6 runs: two-sided min p = 2/36


def test_one_seed_is_never_significant():
    # t = mean/se is undefined for one seed; its smallest attainable two-sided p is
    # 2 / (m + 1), so no campaign of one seed and 3 draws can reach alpha = 0.05
    rng = np.random.default_rng(7)
    v = rng.lognormal(np.log(0.06), 0.3, (50, 1, 4))
    v[:, :, 0] -= 0.05
    p = permutation_p_batch(label_values_equal_m(v[..., 0], v[..., 1:]), 100,
                            np.random.default_rng(1), "two-sided")
    assert np.all(p >= 0.5 - 1e-12)
