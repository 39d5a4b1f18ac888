"""evalkit/jsonio.py: the one JSON normaliser and its one NaN policy, and the writers that use
it (run.json, fit.json, summarize --out json, trace metadata, audit.json)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalkit import jsonio
from evalkit.jsonio import FLOAT_DIGITS, canonical_json, dumps, to_jsonable


def _strict_loads(text: str):
    """json.loads that refuses NaN / Infinity (what strict JSON readers do)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@dataclasses.dataclass
class _Pair:
    a: int
    b: float


def test_nan_and_infinities_are_null_by_default():
    assert to_jsonable([math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf")]) \
        == [None] * 5
    assert to_jsonable({"x": np.array([1.0, np.nan, np.inf])}) == {"x": [1.0, None, None]}


def test_infinity_option_keeps_infinities_and_still_nulls_nan():
    assert to_jsonable([math.inf, -math.inf, math.nan], infinity=True) == \
        [math.inf, -math.inf, None]
    text = dumps([1.5, math.inf, -math.inf, math.nan], infinity=True)
    assert "Infinity" in text and "-Infinity" in text and "NaN" not in text
    with pytest.raises(ValueError, match="not JSON"):
        _strict_loads(dumps([math.inf], infinity=True))
    _strict_loads(dumps([math.inf, math.nan]))        # the default is strict JSON


def test_digits_round_to_significant_digits_and_zero_is_unsigned():
    assert to_jsonable(1 / 3, FLOAT_DIGITS) == 0.3333333333
    assert to_jsonable(123456.7890123, FLOAT_DIGITS) == 123456.789
    assert to_jsonable(2 / 3, 3) == 0.667
    zero = to_jsonable(-0.0, FLOAT_DIGITS)
    assert zero == 0.0 and math.copysign(1.0, zero) == 1.0
    assert to_jsonable(1 / 3) == 1 / 3                 # no digits: unrounded
    assert math.copysign(1.0, to_jsonable(-0.0)) == -1.0
    assert to_jsonable(math.inf, 3, infinity=True) == math.inf


def test_types_become_plain_python():
    got = to_jsonable({1: (np.int64(7), np.bool_(False), np.float32(0.5), Path("a") / "b",
                           pd.NA, pd.NaT, None, "s", _Pair(1, math.nan), complex(1, 2))})
    assert got == {"1": [7, False, 0.5, str(Path("a") / "b"), None, None, None, "s",
                         {"a": 1, "b": None}, "(1+2j)"]}
    assert type(got["1"][0]) is int and type(got["1"][1]) is bool
    assert to_jsonable(_Pair) == str(_Pair)            # a dataclass type is not a value
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        to_jsonable({"o": object()}, strict=True)


def test_canonical_json_is_the_audit_layout():
    obj = {"b": [1, True, 1 / 3], "a": "é", "n": math.nan}
    assert canonical_json(obj) == json.dumps(
        {"a": "é", "b": [1, True, 0.3333333333], "n": None}, sort_keys=True, indent=2,
        ensure_ascii=False) + "\n"


def test_dump_json_writes_the_text(tmp_path):
    path = tmp_path / "x.json"
    jsonio.dump_json({"b": 1, "a": math.inf}, path, ensure_ascii=True)
    assert path.read_text() == '{\n  "a": null,\n  "b": 1\n}\n'


def test_run_json_with_a_nan_is_strict_json_and_reads_back_as_null(tmp_path):
    """run.json used to hold a bare NaN (not JSON); now null, which read_meta returns as
    None, and the rest of the layout (sorted, ASCII, two-space indent) is unchanged."""
    from evalkit.runlog import io

    meta = {"settings": {"ewma_alpha": math.nan, "name": "wä"}, "k": np.int64(3)}
    path = tmp_path / "run.json"
    io.dump_json(meta, path)
    text = path.read_text()
    assert _strict_loads(text) == {"k": 3, "settings": {"ewma_alpha": None, "name": "wä"}}
    assert text == json.dumps({"k": 3, "settings": {"ewma_alpha": None, "name": "wä"}},
                              indent=2, sort_keys=True) + "\n"
    assert io.read_meta(tmp_path)["settings"]["ewma_alpha"] is None


def test_summarize_json_keeps_infinite_latencies_and_nulls_missing_values():
    from evalkit.cli.runs import _to_json

    df = pd.DataFrame({"run_id": ["b", "a"], "p95_s": [math.inf, 1.25],
                       "v": [math.nan, 0.5], "n": pd.array([1, None], dtype="Int64")})
    text = _to_json(df)
    assert json.loads(text) == [{"run_id": "b", "p95_s": math.inf, "v": None, "n": 1},
                                {"run_id": "a", "p95_s": 1.25, "v": 0.5, "n": None}]
    assert "Infinity" in text and "NaN" not in text
    assert text.index('"run_id"') < text.index('"p95_s"')     # column order, not sorted


def test_trace_metadata_is_strict_json(tmp_path):
    from evalkit.replay.traces.model import META_KEY, Trace
    import pyarrow.parquet as pq

    trace = Trace.from_arrays(np.array([0.0, 1.0]), np.array([3, 4]), np.array([5, 6]),
                              name="t", meta={"rate": np.float64(math.nan),
                                              "n": np.int64(2), "p": Path("x")})
    trace.write(tmp_path / "t.parquet")
    raw = pq.read_schema(tmp_path / "t.parquet").metadata[META_KEY]
    assert _strict_loads(raw.decode())["meta"] == {"rate": None, "n": 2, "p": "x"}
