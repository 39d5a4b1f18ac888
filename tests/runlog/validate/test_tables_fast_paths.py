"""The table rules check two reductions before a pass per rule: every problem the rules
find is still reported, with the same message, and nothing is reported where none is."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog.io import write_run
from evalkit.runlog.validate import validate_run


def _write(tmp_path, requests: pd.DataFrame, run_id: str = "r"):
    meta = {"run_id": run_id, "policy": "wa", "role": "policy", "seed": 0, "draw": None,
            "matched_to": None, "regime": "t", "trace": {"name": "t", "sha256": "x"},
            "backend": "sim", "slo": {"e2e_s": 1.5, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": 8.0, "horizon_s": 600.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 150.0}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {"trace": 0, "run": 0}}
    merges = pd.DataFrame({"merge_idx": [0], "start_s": [100.0], "end_s": [108.0]})
    return write_run(tmp_path, meta, requests, merges)


def _requests(n=50):
    arrival = np.linspace(1.0, 500.0, n)
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival,
                         "sent_s": arrival + 0.001, "first_token_s": arrival + 0.1,
                         "end_s": arrival + 0.5, "prompt_tokens": np.full(n, 10),
                         "output_tokens": np.full(n, 20), "ok": np.ones(n, dtype=bool)})


def _messages(run_dir):
    return [(p.column, p.message, p.severity) for p in validate_run(run_dir)]


def test_orderings_within_the_tolerance_pass_and_beyond_it_fail(tmp_path):
    req = _requests()
    req.loc[3, "end_s"] = req.loc[3, "first_token_s"] - 1e-12       # inside the 1e-9 slack
    req.loc[4, "sent_s"] = req.loc[4, "arrival_s"] - 5e-4           # early, inside 1 ms
    assert _messages(_write(tmp_path / "a", req)) == []
    req.loc[5, "end_s"] = req.loc[5, "first_token_s"] - 1e-6
    req.loc[6, "sent_s"] = req.loc[6, "arrival_s"] - 2e-3
    got = _messages(_write(tmp_path / "b", req))
    assert ("end_s", "end_s before first_token_s: 1 row(s), e.g. 5", "error") in got
    assert ("sent_s", "sent_s earlier than the scheduled arrival_s: 1 row(s), e.g. 6",
            "warning") in got


@pytest.mark.parametrize("column, value, message", [
    ("arrival_s", np.nan, "NaN time: 1 row(s), e.g. 7"),
    ("end_s", np.inf, "infinite time: 1 row(s), e.g. 7"),
    ("sent_s", -0.5, "negative time: 1 row(s), e.g. 7"),
    ("first_token_s", 1e12, "time beyond"),
])
def test_a_single_bad_time_is_still_reported(tmp_path, column, value, message):
    req = _requests()
    run_dir = _write(tmp_path, req)
    # rewritten with numpy's values: a NaN stays a NaN value (pandas would make it null)
    values = req[column].to_numpy(dtype=float).copy()
    values[7] = value
    table = pq.read_table(run_dir / "requests.parquet")
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    pq.write_table(table, run_dir / "requests.parquet")
    got = [m for c, m, _ in _messages(run_dir) if c == column]
    assert any(m.startswith(message) for m in got), got


def test_null_times_where_allowed_raise_nothing(tmp_path):
    req = _requests()
    req.loc[[2, 9], ["first_token_s", "end_s"]] = np.nan
    req.loc[[2, 9], "ok"] = False
    assert _messages(_write(tmp_path, req)) == []


def test_token_counts_out_of_range_are_still_reported(tmp_path):
    req = _requests()
    req.loc[1, "prompt_tokens"] = -3
    got = [m for c, m, _ in _messages(_write(tmp_path, req)) if c == "prompt_tokens"]
    assert got == ["negative token count: 1 row(s), e.g. 1"]
