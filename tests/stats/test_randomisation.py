"""The one randomisation engine: sign-flip is the within-seed permutation test with one draw,
one result type, one ``min_attainable_p`` and one ``seeds_needed`` for both designs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import evalkit.stats as stats
from evalkit.errors import InputError
from evalkit.stats import randomisation as R
from evalkit.stats.bootstrap import bootstrap_ci

ALTS = ("greater", "two-sided", "less")
FIELDS = ("p_value", "p_greater", "p_less", "p_two_sided", "ci_low", "ci_high", "statistic",
          "min_p", "design_min_p", "wins", "null_size", "n_positive", "n_negative", "n_zero")


def _designs(count: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(2, 14))
        yield rng.uniform(0, 0.5, n), rng.uniform(0, 0.5, n)


@pytest.mark.parametrize("statistic", ["studentized", "mean"])
def test_sign_flip_is_the_permutation_test_with_one_draw(statistic):
    worst = 0.0
    for pol, dr in _designs(40):
        for alt in ALTS:
            a = R.sign_flip_test(dr - pol, alternative=alt)
            b = R.within_seed_permutation_test(pol, [[x] for x in dr], alternative=alt,
                                               statistic=statistic)
            assert a.exact and b.exact and a.m == b.m == (1,) * len(pol)
            for f in FIELDS:
                x, y = float(getattr(a, f)), float(getattr(b, f))
                if math.isfinite(x) or math.isfinite(y):
                    worst = max(worst, abs(x - y))
    assert worst <= 1e-12


def test_identity_holds_with_ties_and_zero_differences():
    pol = np.array([0.1, 0.2, 0.3, 0.2, 0.05, 0.4])
    dr = pol + np.array([0.0, 0.1, 0.1, -0.1, 0.0, 0.3])     # two zero, two tied |d|
    for alt in ALTS:
        a = R.sign_flip_test(dr - pol, alternative=alt)
        b = R.within_seed_permutation_test(pol, [[x] for x in dr], alternative=alt)
        for f in FIELDS:
            x, y = float(getattr(a, f)), float(getattr(b, f))
            assert (x == y) or abs(x - y) <= 1e-12 or (math.isinf(x) and x == y), f


def test_one_result_type_names_its_test():
    a = R.sign_flip_test([0.1, 0.3, -0.05, 0.2])
    b = R.within_seed_permutation_test([0.1, 0.2, 0.3], [[0.2, 0.3], [0.25], [0.4, 0.1]])
    c = R.within_seed_permutation_test([0.1, 0.2, 0.3], [[0.2, 0.3], [0.25], [0.4, 0.1]],
                                       statistic="mean")
    assert R.SignFlipResult is R.PermutationResult is R.RandomisationResult
    assert stats.SignFlipResult is stats.PermutationResult is stats.RandomisationResult
    assert all(isinstance(r, R.RandomisationResult) for r in (a, b, c))
    assert (a.test, b.test, c.test) == ("sign-flip", "studentized within-seed permutation",
                                        "within-seed permutation")
    assert a.null_statistic == "mean" and a.null_observed == a.statistic
    assert a.null_hypothesis == R.NULL_TESTED["sign-flip"] and a.ci_model != b.ci_model
    assert a.t_statistic == pytest.approx(np.mean(a.differences)
                                          / (np.std(a.differences, ddof=1) / 2.0))
    assert set(b.to_dict()) == set(a.to_dict())             # every field both had, in both


def test_sign_flip_null_distribution_is_the_permutation_null_with_one_draw():
    d = np.array([0.3, -0.1, 0.2, 0.05, 0.4])
    a = R.sign_flip_test(d)
    b = R.within_seed_permutation_test(np.zeros(5), [[x] for x in d], statistic="mean")
    assert np.array_equal(a.null_distribution(), b.null_distribution())
    assert a.null_distribution().size == 32


def _brute_seeds_needed(alpha, alternative, m):
    factor = 2.0 if alternative == "two-sided" else 1.0
    return next(n for n in range(1, 200) if factor * (m + 1.0) ** -n <= alpha)


@pytest.mark.parametrize("m", [1, 2, 3, 7])
@pytest.mark.parametrize("alternative", ALTS)
def test_seeds_needed_is_the_smallest_reachable_n(m, alternative):
    for alpha in (0.05, 0.01, 0.2, 0.5 ** 4, 0.5 ** 4 * 1.0001, 0.5 ** 4 * 0.9999, 1 / 9,
                  2 / 27, 1e-6):
        assert R.seeds_needed(alpha, alternative, m=m) == _brute_seeds_needed(alpha,
                                                                             alternative, m)


def test_one_seeds_needed_and_one_min_p_behind_every_name():
    # the public names and the ones the audit imports are the same functions
    assert stats.seeds_needed is R.seeds_needed and stats.min_attainable_p is R.min_attainable_p
    assert R.seeds_needed(0.05, "greater") == 5 and R.seeds_needed(0.05) == 6
    assert R.seeds_needed(0.05, "two-sided", m=2) == 4              # 2 * 3^-4 = 0.0247
    # an int n is n seeds of one draw: 2^-n; a sequence is draws per seed
    for n in range(2, 12):
        for alt in ALTS:
            assert R.min_attainable_p(n, alt) == pytest.approx(
                R.min_attainable_p([1] * n, alt), rel=1e-12)
    assert R.min_attainable_p(4, "greater") == 2.0 ** -4
    assert R.min_attainable_p([2, 2], "greater") == pytest.approx(1 / 9)
    with pytest.raises(InputError, match="alpha must lie in"):
        R.seeds_needed(2, "two-sided")                    # the old (m, alpha) order fails loudly
    with pytest.raises(InputError, match="m = 0 draws"):
        R.seeds_needed(0.05, m=0)


@pytest.mark.parametrize("alpha, ok", [(0.0, False), (1e-12, True), (0.05, True),
                                       (1 - 1e-12, True), (1.0, False), (-0.1, False)])
def test_check_alpha_at_and_around_its_bounds(alpha, ok):
    from evalkit.audit.protocol import load_protocol

    proto = load_protocol()
    calls = (lambda: R.seeds_needed(alpha), lambda: proto.with_alpha(alpha))
    for call in calls:
        if ok:
            call()
        else:
            with pytest.raises(InputError, match=r"alpha must lie in \(0, 1\), got "):
                call()


@pytest.mark.parametrize("level, ok", [(0.0, False), (1e-9, True), (0.95, True),
                                       (1 - 1e-9, True), (1.0, False), (1.5, False)])
def test_check_level_at_and_around_its_bounds(level, ok):
    d = [0.1, 0.3, -0.05, 0.2, 0.15]
    calls = (lambda: R.sign_flip_test(d, confidence_level=level),
             lambda: R.within_seed_permutation_test([0.0] * 3, [[0.1], [0.2, 0.3], [0.1]],
                                                    confidence_level=level),
             lambda: bootstrap_ci(d, n_resamples=200, confidence_level=level))
    for call in calls:
        if ok:
            call()
        else:
            with pytest.raises(InputError,
                               match=rf"confidence_level must lie in \(0, 1\), got {level}"):
                call()


@pytest.mark.parametrize("alpha, ok", [("0.0", False), ("0.999", True), ("1.0", False)])
def test_protocol_file_alpha_goes_through_check_alpha_and_names_its_line(alpha, ok):
    from importlib import resources

    from evalkit.audit.protocol import BUILTIN_PACKAGE, parse_protocol

    text = resources.files(BUILTIN_PACKAGE).joinpath("diloco-slo.toml").read_text()
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("alpha"))
    lines = text.splitlines()
    lines[line - 1] = f"alpha = {alpha}"
    bad = "\n".join(lines) + "\n"
    if ok:
        assert parse_protocol(bad, source="p", file="p.toml").alpha == float(alpha)
        return
    with pytest.raises(InputError) as err:
        parse_protocol(bad, source="p", file="p.toml")
    assert err.value.message == f"alpha must lie in (0, 1), got {float(alpha)} (line {line})"
    assert err.value.column == "protocol.alpha" and err.value.fix == "e.g. alpha = 0.05"


def test_exact_enumerable_refuses_an_unknown_statistic_by_name():
    from evalkit.errors import InputError
    from evalkit.stats.randomisation import exact_enumerable

    for m in ([1, 1, 1], [3, 3]):
        with pytest.raises(InputError, match="unknown permutation statistic 'median'") as err:
            exact_enumerable(m, statistic="median")
        assert err.value.column == "statistic"
