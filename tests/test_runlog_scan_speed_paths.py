"""The scan's fast paths give the same numbers and problems as the plain computations.

Each shortcut of the one scan behind ``evalkit summarize`` and the audit (segmentation by
levels, clusters from runs of time-ordered arrivals, one merged sort for the last
completion, two reductions before the validation rules) is compared here with the plain
computation it replaces, on data built to hit its edges: ties, zeros, NaN, unsorted input.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.heap import keep_freed_memory
from evalkit.runlog import write_run
from evalkit.runlog.design import (arrival_fingerprint, arrival_ticks, completion_tied_share,
                                   identical_arrival_share)
from evalkit.runlog.validate import validate_run
from evalkit.runlog.vinterval import (BLOCKS, BURSTS, SEGMENT_PENALTY, _binomial_ll,
                                      block_length, cluster_counts, segments, uses_bursts)


def loop_segments(n_b, v_b):
    """Binary segmentation range by range, as first written."""
    n_b, v_b = np.asarray(n_b, float), np.asarray(v_b, float)
    threshold = SEGMENT_PENALTY * math.log(max(n_b.size, 2))
    out, todo = [], [(0, n_b.size)]
    while todo:
        a, z = todo.pop()
        if z - a >= 2:
            cn, cv = np.cumsum(n_b[a:z]), np.cumsum(v_b[a:z])
            lr = 2.0 * (_binomial_ll(cv[:-1], cn[:-1])
                        + _binomial_ll(cv[-1] - cv[:-1], cn[-1] - cn[:-1])
                        - float(_binomial_ll(np.array(cv[-1]), np.array(cn[-1]))))
            best = int(np.argmax(lr))
            if lr[best] > threshold:
                todo += [(a, a + best + 1), (a + best + 1, z)]
                continue
        out.append((a, z))
    return sorted(out)


def unique_cluster_counts(arrival, violated):
    """Clusters through ``np.unique`` and ``bincount``."""
    arrival = np.asarray(arrival, float)
    times, inverse = np.unique(arrival, return_inverse=True)
    if uses_bursts(arrival.size, times.size):
        key, kind = inverse, BURSTS
    else:
        length = block_length(times[0], times[-1])
        key = np.floor((arrival - times[0]) / length).astype(np.int64) if length > 0 \
            else np.zeros(arrival.size, dtype=np.int64)
        key, kind = np.unique(key, return_inverse=True)[1], BLOCKS
    return (np.bincount(key).astype(float),
            np.bincount(key, weights=np.asarray(violated, float)), kind)


def searched_tied_share(sent, end, window=1e-3):
    sent, end = np.asarray(sent, float), np.asarray(end, float)
    end = np.sort(end[np.isfinite(end)])
    s = sent[np.isfinite(sent)]
    if s.size == 0 or end.size == 0:
        return 0.0
    i = np.searchsorted(end, s, side="right") - 1
    prev = np.where(i >= 0, end[np.maximum(i, 0)], -np.inf)
    return float(np.count_nonzero(s - prev <= window) / s.size)


@pytest.mark.parametrize("seed", range(40))
def test_segmentation_by_levels_cuts_where_the_range_loop_cuts(seed):
    rng = np.random.default_rng(seed)
    blocks = int(rng.integers(0, 250))
    n_b = rng.integers(0, 400, blocks).astype(float)
    episode = (np.arange(blocks) % int(rng.integers(4, 50))) < int(rng.integers(1, 12))
    v_b = rng.binomial(n_b.astype(int), np.where(episode, 0.4, 0.03)).astype(float)
    assert segments(n_b, v_b) == loop_segments(n_b, v_b)


def test_segmentation_of_fractional_counts_keeps_the_range_loop():
    n_b = np.array([100.0, 100.0, 100.0])
    v_b = np.array([10.0, 30.5, 10.25])
    assert segments(n_b, v_b) == loop_segments(n_b, v_b)


@pytest.mark.parametrize("seed", range(30))
def test_clusters_of_time_ordered_arrivals_are_those_of_np_unique(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 4000))
    t = np.sort(rng.uniform(0, rng.uniform(0.5, 900), n))
    if seed % 3 == 0:
        t = np.round(t, seed % 4)                  # bursts of identical arrivals
    violated = rng.random(n) < rng.random()
    got, want = cluster_counts(t, violated), unique_cluster_counts(t, violated)
    assert got[2] == want[2]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_clusters_of_unsorted_or_nan_arrivals_take_the_general_path():
    t = np.array([5.0, 1.0, 1.0, 5.0, 1.0, 7.0, 7.0, 7.0])
    v = np.array([1, 0, 1, 0, 0, 1, 1, 0], dtype=bool)
    got, want = cluster_counts(t, v), unique_cluster_counts(t, v)
    assert got[2] == want[2] and np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])
    n_b, v_b, _ = cluster_counts(np.array([1.0, 2.0, np.nan]), np.array([1, 0, 1], bool))
    assert n_b.sum() == 3 and v_b.sum() == 2


@pytest.mark.parametrize("seed", range(30))
def test_last_completion_by_merged_sort_gives_the_searched_share(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 3000))
    sent = np.sort(rng.uniform(0, 300, n)) + rng.exponential(0.002, n)
    end = sent + rng.gamma(2.0, 0.2, n)
    if seed % 2:
        sent, end = np.round(sent, 2), np.round(end, 2)     # sends tied to completions
    end[rng.random(n) < 0.05] = np.nan
    sent[rng.random(n) < 0.02] = np.nan
    for window in (1e-3, 0.05, 0.0):
        assert completion_tied_share(sent, end, window) == \
            searched_tied_share(sent, end, window)


@pytest.mark.parametrize("sent, end", [
    ([0.0, -0.0, 1.0, 1.0], [-0.0, 0.0, 1.0, 0.9995]),     # signed zeros, exact ties
    ([-1.0, 0.5, 2.0], [0.4995, 1.0, 2.0]),                 # a negative time: plain search
    ([3.0, 4.0], [np.nan, np.nan]),                          # no completion at all
    ([np.nan], [1.0]),
])
def test_tied_share_edges(sent, end):
    assert completion_tied_share(sent, end) == searched_tied_share(sent, end)


@pytest.mark.parametrize("arrival", [
    np.array([3.0, 1.0, 1.0, 2.0]), np.array([1.0, 1.0000001, 2.0, np.nan, 2.0]),
    np.arange(10.0), np.array([4.0]),
])
def test_arrival_ticks_serve_fingerprint_and_identical_share(arrival):
    ticks = arrival_ticks(arrival)
    assert arrival_fingerprint(arrival) == arrival_fingerprint(None, ticks)
    assert identical_arrival_share(arrival) == identical_arrival_share(None, ticks)
    a = arrival[np.isfinite(arrival)]
    if a.size >= 2:
        us = np.round(a / 1e-6).astype(np.int64)
        _, inverse, counts = np.unique(us, return_inverse=True, return_counts=True)
        assert identical_arrival_share(arrival) == np.count_nonzero(counts[inverse] > 1) / a.size


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


def test_keeping_freed_memory_is_set_once():
    first = keep_freed_memory()
    assert isinstance(first, bool) and keep_freed_memory() is first
