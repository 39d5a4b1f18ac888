"""Pairing A with B: by seed, else trace, else repetition index; unpaired only when no key
can pair them, and said so."""

from __future__ import annotations

import pandas as pd
import pytest

from evalkit.compare.pairing import pair_units
from evalkit.compare.sources import Unit, repetition_of
from evalkit.errors import InputError


def _unit(label, seed=None, rep=None, trace=""):
    return Unit(label=label, path=label, harness="test", requests=pd.DataFrame(), slo=None,
                seed=seed, repetition=rep, trace=trace)


def test_pairs_by_seed_first():
    a = [_unit("a1", seed=2, rep=0), _unit("a2", seed=1, rep=1)]
    b = [_unit("b1", seed=1, rep=0), _unit("b2", seed=2, rep=1)]
    got = pair_units(a, b)
    assert got.key == "seed"
    assert [(x.label, y.label) for x, y in got.pairs] == [("a2", "b1"), ("a1", "b2")]


def test_repeated_seed_falls_to_trace_then_repetition():
    a = [_unit("a1", seed=1, rep=0, trace="t0"), _unit("a2", seed=1, rep=1, trace="t1")]
    b = [_unit("b1", seed=1, rep=0, trace="t0"), _unit("b2", seed=1, rep=1, trace="t1")]
    assert pair_units(a, b).key == "trace"
    for u in a + b:
        u.trace = "same"
    got = pair_units(a, b)
    assert got.key == "repetition"
    assert [(x.label, y.label) for x, y in got.pairs] == [("a1", "b1"), ("a2", "b2")]


def test_unpaired_when_no_key_pairs_and_the_reason_names_each_key():
    a = [_unit("a1"), _unit("a2")]
    b = [_unit("b1"), _unit("b2"), _unit("b3")]
    got = pair_units(a, b)
    assert not got.paired and got.pairs == []
    assert "seed:" in got.reason and "repetition:" in got.reason


def test_seeds_missing_on_one_side_are_an_error_naming_them():
    a = [_unit("a1", seed=1), _unit("a2", seed=2), _unit("a3", seed=3)]
    b = [_unit("b1", seed=1), _unit("b2", seed=2)]
    with pytest.raises(InputError) as err:
        pair_units(a, b)
    assert err.value.column == "--pair-by" and "A only: 3" in err.value.message


def test_a_named_key_that_cannot_pair_is_an_error_and_none_is_unpaired():
    a = [_unit("a1", seed=1), _unit("a2", seed=1)]
    b = [_unit("b1", seed=1), _unit("b2", seed=2)]
    with pytest.raises(InputError, match="cannot pair by seed"):
        pair_units(a, b, pair_by="seed")
    assert not pair_units(a, b, pair_by="none").paired


@pytest.mark.parametrize("name, expected", [("run-3.json", 3), ("rep_12", 12),
                                            ("bench.json", None), ("a1b22.json", 22)])
def test_repetition_index_is_the_last_integer_of_the_name(name, expected):
    assert repetition_of(name) == expected
