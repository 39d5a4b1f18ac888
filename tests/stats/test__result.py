"""The shared result plumbing (``evalkit.stats._result``): ``json_safe``, ``ResultMixin``,
input conversion and argument checks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from evalkit.errors import InputError
from evalkit.stats._result import (ResultMixin, as_finite_1d, as_generator, check_alternative,
                                   check_n_resamples, json_safe, seed_series)

# ------------------------------------------------------------------------- _result plumbing


@dataclass
class _Plain:
    a: int
    b: float


@dataclass
class _WithDict:
    a: int

    def to_dict(self):
        return {"custom": self.a}


@dataclass(frozen=True)
class _Mixed(ResultMixin):
    kept: float
    _private: int
    bulky: list
    other: object = None
    _dict_exclude = ("bulky",)


def test_json_safe_converts_each_kind():
    assert json_safe(None) is None
    assert json_safe(3) == 3 and type(json_safe(3)) is int
    assert json_safe("x") == "x"
    assert json_safe(1.5) == 1.5 and type(json_safe(1.5)) is float
    assert json_safe(float("nan")) is None and json_safe(-math.inf) is None
    assert json_safe(np.float32(0.25)) == 0.25 and type(json_safe(np.float32(0.25))) is float
    assert json_safe(np.int64(7)) == 7 and type(json_safe(np.int64(7))) is int
    assert json_safe(np.bool_(True)) is True and json_safe(False) is False
    assert json_safe(np.array([1.0, np.nan])) == [1.0, None]
    assert json_safe((1, np.int64(2))) == [1, 2]
    assert json_safe({1: np.float64(0.5)}) == {"1": 0.5}
    assert json_safe(_Plain(1, np.inf)) == {"a": 1, "b": None}
    assert json_safe(_WithDict(4)) == {"custom": 4}
    assert json_safe(_Plain) == str(_Plain)                 # a dataclass type is not a value
    assert json_safe(complex(1, 2)) == "(1+2j)"


def test_result_mixin_leaves_out_private_and_excluded_fields():
    r = _Mixed(kept=np.float64(2.0), _private=1, bulky=[1, 2, 3], other=None)
    assert r.to_dict() == {"kept": 2.0, "other": None}


def test_as_finite_1d_boundaries():
    assert as_finite_1d([2.0], "x").tolist() == [2.0]                 # default min_size 1
    assert as_finite_1d([1, 2], "x", min_size=2).tolist() == [1.0, 2.0]
    with pytest.raises(InputError, match="x has 1 seeds; at least 2"):
        as_finite_1d([1.0], "x", min_size=2, what="seeds")
    with pytest.raises(InputError, match="x is empty"):
        as_finite_1d([], "x")
    with pytest.raises(InputError, match="must be 1-D"):
        as_finite_1d([[1.0, 2.0]], "x")
    with pytest.raises(InputError, match="must be 1-D"):
        as_finite_1d(3.0, "x")
    with pytest.raises(InputError, match="must be numeric"):
        as_finite_1d(["a"], "x")
    ten = np.r_[np.full(10, np.nan), 1.0]
    with pytest.raises(InputError, match=r"10 NaN/inf entries \(positions 0, 1, 2, 3, 4, 5, 6, "
                                         r"7, 8, 9\)"):
        as_finite_1d(ten, "x")
    eleven = np.r_[1.0, np.full(11, np.inf)]
    with pytest.raises(InputError, match=r"11 NaN/inf entries \(positions 1, .*, 10 \.\.\.\)"):
        as_finite_1d(eleven, "x")


def test_as_generator_each_input():
    g = np.random.default_rng(5)
    assert as_generator(g) is g
    assert as_generator(None).random() == np.random.default_rng(0).random()
    assert as_generator(7).random() == np.random.default_rng(7).random()
    assert as_generator(np.int64(7)).random() == np.random.default_rng(7).random()
    with pytest.raises(InputError, match="rng must be a numpy Generator"):
        as_generator(1.5)


def test_seed_series_inputs_and_checks():
    assert seed_series({0: 1, 1: np.float64(2.5)}, "v") == {0: 1.0, 1: 2.5}
    assert seed_series(pd.Series([0.5, 0.25], index=[3, 4]), "v") == {3: 0.5, 4: 0.25}
    with pytest.raises(InputError, match="must map seed -> value"):
        seed_series([(0, 1.0)], "v")                 # a list has .index but is not a map
    with pytest.raises(InputError, match="v for seed 3 is nan"):
        seed_series({1: 0.0, 3: float("nan")}, "v")


def test_alternative_and_n_resamples_checks():
    for alt in ("greater", "less", "two-sided"):
        assert check_alternative(alt) == alt
    with pytest.raises(InputError, match="unknown alternative"):
        check_alternative("bigger")
    for ok in (1, 2, 100, 1e5, np.inf):
        check_n_resamples(ok)
    for bad in (0, 0.5, 1.5, -3):
        with pytest.raises(InputError, match="positive integer or inf"):
            check_n_resamples(bad)
