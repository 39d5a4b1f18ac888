"""The portable exponential: within one ulp of the C library's, the same bits everywhere."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from evalkit.replay.portable_math import OVERFLOW_ABOVE, UNDERFLOW_BELOW, exp

# Bits this implementation gives on every IEEE 754 CPU (only exactly rounded operations);
# a change here moves every recorded step time.
RECORDED_BITS = {1.0: "0x1.5bf0a8b14576ap+1", -0.0002: "0x1.ffe5c9c8de6c4p-1",
                 0.02: "0x1.052bea3ec0132p+0", -3.5: "0x1.eec1018e4ff66p-6",
                 100.0: "0x1.3494a9b171bf5p+144"}


@pytest.mark.parametrize("x, bits", sorted(RECORDED_BITS.items()))
def test_exp_gives_the_recorded_bits(x, bits):
    assert exp(x).hex() == bits
    assert exp(np.array([x]))[0].hex() == bits


@pytest.mark.parametrize("scale", [0.02, 1.0, 30.0, 200.0])
def test_exp_is_within_one_ulp_of_the_c_library(scale):
    x = np.random.default_rng(3).normal(0.0, scale, 20_000)
    x = x[(x > -700) & (x < 700)]
    reference = np.array([math.exp(v) for v in x])
    assert np.max(np.abs(exp(x) - reference) / np.spacing(reference)) <= 1.0


def test_exp_at_the_ends_of_the_double_range():
    with warnings.catch_warnings():         # no overflow or invalid cast on the way
        warnings.simplefilter("error")
        got = exp(np.array([np.inf, -np.inf, np.nan, OVERFLOW_ABOVE + 1e-9, 710.0,
                            UNDERFLOW_BELOW - 1e-9, -746.0, 0.0, -0.0]))
    assert np.isinf(got[0]) and got[1] == 0.0 and np.isnan(got[2])
    assert np.isinf(got[3]) and np.isinf(got[4]) and got[5] == 0.0 and got[6] == 0.0
    assert got[7] == 1.0 and got[8] == 1.0
    assert math.isclose(exp(709.78), math.exp(709.78), rel_tol=1e-15)
    assert math.isclose(exp(-740.0), math.exp(-740.0), rel_tol=1e-3)   # subnormal


def test_exp_of_a_float_is_a_float_and_of_an_array_an_array():
    assert isinstance(exp(0.5), float)
    assert exp(np.zeros((2, 3))).shape == (2, 3)
