"""Trace data model: sha256 stability, Parquet round trip, bad-input errors."""

import hashlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.errors import InputError
from evalkit.replay.traces import Trace, read_trace


def small():
    return Trace.from_arrays([0.0, 0.5, 1.25], [10, 20, 30], [1, 2, 3], name="small",
                             meta={"source": "test"})


def test_sha256_matches_documented_encoding():
    # Independent re-implementation of the documented canonical encoding.
    t = small()
    h = hashlib.sha256(b"evalkit-trace-v1\n")
    h.update(np.int64(3).astype("<i8").tobytes())
    for col, arr, dt in (("request_id", [0, 1, 2], "<i8"),
                         ("arrival_s", [0.0, 0.5, 1.25], "<f8"),
                         ("prompt_tokens", [10, 20, 30], "<i8"),
                         ("output_tokens", [1, 2, 3], "<i8")):
        h.update(col.encode() + b"\0" + np.asarray(arr, dtype=dt).tobytes())
    assert t.sha256 == h.hexdigest()


def test_sha256_pinned_value():
    # Regression guard: changing the encoding would silently break recorded run hashes.
    assert small().sha256 == "05d5a76ac06e9d8bf2bf0c75a479e6df07fd43f780cb0a0252c8e3bfa817e403"
    assert small().sha256 != Trace.from_arrays([0.0, 0.5, 1.25], [10, 20, 31], [1, 2, 3]).sha256


def test_write_read_round_trip(tmp_path):
    t = small()
    digest = t.write(tmp_path / "t.parquet")
    back = read_trace(tmp_path / "t.parquet")
    assert digest == t.sha256 == back.sha256
    assert back.name == "small" and back.meta == {"source": "test"}
    pd.testing.assert_frame_equal(back.requests, t.requests)
    assert list(back.requests.dtypes.astype(str)) == ["int64", "float64", "int64", "int64"]


def test_sha256_independent_of_parquet_writer(tmp_path):
    t = small()
    # Same content written by other writers / settings, without evalkit metadata.
    t.requests.to_parquet(tmp_path / "a.parquet", compression="gzip", index=False)
    pq.write_table(pa.Table.from_pandas(t.requests, preserve_index=False), tmp_path / "b.parquet",
                   compression="none", row_group_size=1, data_page_version="2.0")
    assert read_trace(tmp_path / "a.parquet").sha256 == t.sha256
    assert read_trace(tmp_path / "b.parquet").sha256 == t.sha256


def test_duration_and_rate():
    t = small()
    assert t.n == 3 and t.duration_s == 1.25 and t.rate == pytest.approx(3 / 1.25)
    t.meta["window_s"] = 10.0
    assert t.duration_s == 10.0 and t.rate == pytest.approx(0.3)


def _write_raw(path, **cols):
    pd.DataFrame(cols).to_parquet(path, index=False)
    return path


def test_missing_column_names_it(tmp_path):
    p = _write_raw(tmp_path / "x.parquet", arrival_s=[0.0, 1.0], prompt_tokens=[1, 2])
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert e.value.column == "output_tokens" and "x.parquet" in str(e.value)


def test_non_monotone_reports_count_and_offers_sort(tmp_path):
    p = _write_raw(tmp_path / "x.parquet", arrival_s=[0.0, 2.0, 1.0, 3.0, 2.5],
                   prompt_tokens=[1, 2, 3, 4, 5], output_tokens=[5, 4, 3, 2, 1])
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert "2 arrival times go backwards" in str(e.value) and "--sort" in str(e.value)
    t = read_trace(p, sort=True)
    assert np.all(np.diff(t.arrival_s) >= 0)
    assert list(t.requests["prompt_tokens"]) == [1, 3, 2, 5, 4]   # rows move together
    assert t.meta["repairs"] == [{"repair": "sorted", "rows_out_of_order": 2}]


def test_negative_timestamps(tmp_path):
    p = _write_raw(tmp_path / "x.parquet", arrival_s=[-1.0, 0.0, 1.0],
                   prompt_tokens=[1, 2, 3], output_tokens=[1, 1, 1])
    with pytest.raises(InputError, match="1 are negative"):
        read_trace(p)
    t = read_trace(p, sort=True)
    assert list(t.arrival_s) == [0.0, 1.0, 2.0] and t.meta["repairs"][0]["shift_s"] == 1.0


@pytest.mark.parametrize("col", ["arrival_s", "prompt_tokens"])
def test_nan_is_an_error(tmp_path, col):
    cols = dict(arrival_s=[0.0, 1.0, 2.0], prompt_tokens=[1.0, 2.0, 3.0], output_tokens=[1, 1, 1])
    cols[col] = [0.0, np.nan, 2.0]
    with pytest.raises(InputError) as e:
        read_trace(_write_raw(tmp_path / "x.parquet", **cols))
    assert e.value.column == col and "NaN" in e.value.message


def test_empty_trace(tmp_path):
    p = _write_raw(tmp_path / "x.parquet", arrival_s=np.zeros(0), prompt_tokens=np.zeros(0, int),
                   output_tokens=np.zeros(0, int))
    with pytest.raises(InputError, match="empty"):
        read_trace(p)


def test_fractional_and_negative_tokens():
    with pytest.raises(InputError, match="whole numbers"):
        Trace.from_arrays([0.0, 1.0], [1.5, 2], [1, 1])
    with pytest.raises(InputError, match="negative"):
        Trace.from_arrays([0.0, 1.0], [1, 2], [1, -1])


def test_tampered_file_detected(tmp_path):
    p = tmp_path / "t.parquet"
    small().write(p)
    table = pq.read_table(p)
    df = table.to_pandas()
    df.loc[1, "prompt_tokens"] = 999
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False)
                   .replace_schema_metadata(table.schema.metadata), p)
    with pytest.raises(InputError, match="changed outside evalkit"):
        read_trace(p)


def test_not_parquet_and_missing_file(tmp_path):
    (tmp_path / "x.parquet").write_text("hello")
    with pytest.raises(InputError, match="Parquet"):
        read_trace(tmp_path / "x.parquet")
    with pytest.raises(InputError, match="not found"):
        read_trace(tmp_path / "nope.parquet")


def test_write_refuses_invalid_trace(tmp_path):
    df = pd.DataFrame({"request_id": [0, 1], "arrival_s": [1.0, 0.0], "prompt_tokens": [1, 1],
                       "output_tokens": [1, 1]})
    with pytest.raises(InputError, match="backwards"):
        Trace(df, name="bad").write(tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []


def test_single_request_trace_describes(tmp_path):
    import json

    from evalkit.replay.traces import describe
    d = describe(Trace.from_arrays([0.0], [5], [7]))
    json.dumps(d, allow_nan=False)            # JSON-safe: no NaN for undefined quantities
    assert d["mean_rate"] is None and d["interarrival"]["cv2"] is None
