"""Boundaries of the run-log layer: writing and listing runs (io, schema), the summary row
(summary), the cluster-robust V interval (vinterval) and the summary on edge runs.

Each test pins one rule at its edge against an independent reference (plain loops, scipy's
beta / t quantiles, closed forms), so that a wrong boundary, constant, dropped step or
inverted condition in these modules fails a test.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

import evalkit.runlog.io as io
import evalkit.runlog.summary as summary_mod
from evalkit import __version__
from evalkit.errors import InputError
from evalkit.limits import MAX_RUN_ID_BYTES
from evalkit.runlog import metrics
from evalkit.runlog.design import DESIGN_COLUMNS
from evalkit.runlog.schema import SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS
from evalkit.runlog.summary import SUMMARY_COLUMNS, request_numbers, summarize_runs
from evalkit.runlog.validate import Problem, ValidationReport
from evalkit.runlog.vinterval import (BLOCKS, BURSTS, block_length, cluster_counts,
                                      robust_v_ci, robust_v_fit, uses_bursts,
                                      v_interval)


# ------------------------------------------------------------------------------ helpers

def _meta(run_id: str, **changes) -> dict:
    meta = {"run_id": run_id, "policy": "wa", "role": "policy", "seed": 0, "draw": None,
            "matched_to": None, "regime": "r", "trace": {"name": "t", "sha256": "abc"},
            "backend": "sim", "slo": {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": 2.0, "horizon_s": 100.0,
            "corridor": {"min_gap_s": 1.0, "max_gap_s": 50.0}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {}}
    meta.update(changes)
    return meta


def _requests(arrival, latency, *, sent_lag=0.0, ok=None, tokens=5) -> pd.DataFrame:
    arrival = np.asarray(arrival, dtype=float)
    n = arrival.size
    ok = np.ones(n, dtype=bool) if ok is None else np.asarray(ok, dtype=bool)
    end = arrival + np.asarray(latency, dtype=float)
    return pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64), "arrival_s": arrival,
        "sent_s": arrival + sent_lag, "first_token_s": np.minimum(arrival + sent_lag + 0.1, end),
        "end_s": end, "prompt_tokens": np.full(n, 7, dtype=np.int64),
        "output_tokens": np.full(n, tokens, dtype=np.int64), "ok": ok,
        "error": [None if o else "timeout" for o in ok]})


def _merges(windows) -> pd.DataFrame:
    w = np.asarray(windows, dtype=float).reshape(-1, 2)
    return pd.DataFrame({"merge_idx": np.arange(len(w), dtype=np.int64), "start_s": w[:, 0],
                         "end_s": w[:, 1]})


def _write(root, run_id, arrival=(1.0, 2.0, 3.0), latency=(0.5, 0.5, 0.5), windows=(),
           **meta):
    return io.write_run(root, _meta(run_id, **meta), _requests(arrival, latency),
                        _merges(windows))


def _set_meta(run_dir: Path, **changes) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


# ================================================================================ io.py

def test_json_of_numpy_scalars_and_paths_keeps_their_types(tmp_path):
    path = tmp_path / "x.json"
    io.dump_json({"i": np.int64(3), "f": np.float64(2.5), "b": np.bool_(True),
                  "p": Path("a") / "b", "z": np.bool_(False)}, path)
    back = json.loads(path.read_text())
    assert back == {"i": 3, "f": 2.5, "b": True, "p": str(Path("a") / "b"), "z": False}
    assert type(back["i"]) is int and type(back["f"]) is float and type(back["b"]) is bool
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        io.dump_json({"o": object()}, path)


def test_json_file_is_sorted_two_space_indented_with_a_final_newline(tmp_path):
    path = tmp_path / "x.json"
    obj = {"b": [1, 2], "a": {"y": 1, "x": None}}
    io.dump_json(obj, path)
    assert path.read_text() == json.dumps(obj, indent=2, sort_keys=True) + "\n"
    assert path.read_text().startswith('{\n  "a": {\n    "x": null')


@pytest.mark.parametrize("bad", ["", "a/b", "a\\b", ".hidden", "a\0b", "/abs"])
def test_run_id_that_is_not_a_plain_directory_name_is_rejected(bad):
    with pytest.raises(InputError, match="invalid run_id") as err:
        io.check_run_id(bad)
    assert err.value.column == "run_id"


def test_run_id_length_limit_is_in_bytes_and_inclusive():
    assert io.check_run_id("a.b-c_d") == "a.b-c_d"
    assert io.check_run_id("a" * MAX_RUN_ID_BYTES) == "a" * MAX_RUN_ID_BYTES
    assert io.check_run_id("é" * (MAX_RUN_ID_BYTES // 2)) == "é" * (MAX_RUN_ID_BYTES // 2)
    with pytest.raises(InputError, match=f"run_id is {MAX_RUN_ID_BYTES + 1} bytes long"):
        io.check_run_id("a" * (MAX_RUN_ID_BYTES + 1))
    with pytest.raises(InputError, match=f"run_id is {MAX_RUN_ID_BYTES + 2} bytes long"):
        io.check_run_id("é" * (MAX_RUN_ID_BYTES // 2 + 1))


def test_write_run_fills_the_writer_keys_and_keeps_given_ones(tmp_path):
    path = _write(tmp_path / "new" / "store", "r1")            # parents are created
    meta = json.loads((path / "run.json").read_text())
    assert meta["schema_version"] == SCHEMA_VERSION == 1 and SUPPORTED_SCHEMA_VERSIONS == (1,)
    assert meta["evalkit_version"] == __version__ and meta["complete"] is True
    assert set(meta["host"]) == {"hostname", "platform", "python"}
    created = pd.Timestamp(meta["created_at"])
    assert created.tzinfo is not None and created.utcoffset().total_seconds() == 0
    assert created.microsecond == 0 and "." not in meta["created_at"]
    given = io.write_run(tmp_path, _meta("r2", created_at="2020-01-01T00:00:00+00:00",
                                         host={"hostname": "h"}, evalkit_version="0.0.1"),
                         _requests([1.0], [0.5]), _merges([]), complete=0)
    meta = json.loads((given / "run.json").read_text())
    assert meta["created_at"] == "2020-01-01T00:00:00+00:00" and meta["host"] == {"hostname": "h"}
    assert meta["evalkit_version"] == "0.0.1" and meta["complete"] is False
    assert given == tmp_path / "r2" and path == tmp_path / "new" / "store" / "r1"


def test_rewrite_replaces_the_run_and_leaves_nothing_hidden(tmp_path):
    _write(tmp_path, "r", arrival=[1.0, 2.0, 3.0], latency=[0.5, 0.5, 0.5])
    path = _write(tmp_path, "r", arrival=[5.0, 6.0], latency=[0.1, 0.1], regime="second")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    back = io.read_run(path)
    assert back.meta["regime"] == "second" and back.requests.arrival_s.tolist() == [5.0, 6.0]


def test_publish_syncs_the_tree_before_and_the_parent_after_the_rename(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(io, "fsync_tree", lambda p: calls.append(("tree", Path(p), Path(p).exists())))
    monkeypatch.setattr(io, "fsync_dir", lambda p: calls.append(
        ("dir", Path(p), (Path(p) / "r" / "run.json").exists())))
    _write(tmp_path, "r")
    assert [c[0] for c in calls] == ["tree", "dir"]
    assert calls[0][1].name.startswith(".r.tmp-") and calls[0][2]
    assert calls[1][1] == tmp_path and calls[1][2]          # parent synced once published
    calls.clear()
    _write(tmp_path, "r")                                    # replacing an older run
    assert [c[0] for c in calls] == ["tree", "dir"] and calls[1][1] == tmp_path and calls[1][2]


def test_missing_nullable_columns_are_written_as_nulls_and_extras_kept(tmp_path):
    req = _requests([1.0, 2.0], [0.5, 0.5]).drop(columns=["error", "first_token_s"])
    req["tenant"] = ["a", "b"]
    mer = _merges([[10.0, 12.0]])
    path = io.write_run(tmp_path, _meta("r"), req, mer)
    table = pq.read_table(path / "requests.parquet")
    assert table.column_names == ["request_id", "arrival_s", "sent_s", "first_token_s",
                                  "end_s", "prompt_tokens", "output_tokens", "ok", "error",
                                  "tenant"]
    assert table.schema.field("error").type == pa.string()
    assert table.schema.field("first_token_s").type == pa.float64()
    assert table.column("error").null_count == 2 and table.column("tenant").to_pylist() == ["a", "b"]
    merges = pq.read_table(path / "merges.parquet")
    assert merges.column_names == ["merge_idx", "start_s", "end_s", "inner_step", "bytes"]
    assert merges.schema.field("bytes").type == pa.int64() and merges.column("bytes").null_count == 1


def test_string_column_of_nulls_is_typed_string(tmp_path):
    req = _requests([1.0, 2.0], [0.5, 0.5])
    req["error"] = pd.Series([np.nan, np.nan])            # float NaN: no error text
    path = io.write_run(tmp_path, _meta("r"), req, _merges([]))
    table = pq.read_table(path / "requests.parquet")
    assert table.schema.field("error").type == pa.string()
    assert table.column("error").to_pylist() == [None, None]
    req["error"] = pd.Series(["x", None], dtype="string")
    path = io.write_run(tmp_path, _meta("r2"), req, _merges([]))
    assert pq.read_table(path / "requests.parquet").column("error").to_pylist() == ["x", None]


@pytest.mark.parametrize("name,frame,column", [
    ("requests", _requests([1.0], [0.5]).drop(columns=["sent_s"]), "sent_s"),
    ("merges", _merges([[1.0, 2.0]]).drop(columns=["end_s"]), "end_s"),
    ("signals", pd.DataFrame({"queue": [1.0]}), "t_s"),
    ("decisions", pd.DataFrame({"t_s": [1.0], "step": [1]}), "action"),
])
def test_missing_required_column_is_named(tmp_path, name, frame, column):
    tables = {"requests": _requests([1.0], [0.5]), "merges": _merges([])}
    kwargs = {}
    if name in tables:
        tables[name] = frame
    else:
        kwargs[name] = frame
    with pytest.raises(InputError, match=f"table '{name}' lacks required column") as err:
        io.write_run(tmp_path, _meta("r"), tables["requests"], tables["merges"], **kwargs)
    assert err.value.column == column
    assert list(tmp_path.iterdir()) == []                   # nothing published, no temp left


def test_optional_tables_round_trip_and_absent_ones_read_as_none(tmp_path):
    steps = pd.DataFrame({"step": [0, 1], "start_s": [0.0, 1.0], "end_s": [0.9, 1.9]})
    signals = pd.DataFrame({"t_s": [0.5], "queue": [3.0]})
    decisions = pd.DataFrame({"t_s": [0.5], "step": [1], "action": ["defer"]})
    path = io.write_run(tmp_path, _meta("full"), _requests([1.0, 2.0], [0.5, 0.5]), _merges([]),
                        steps=steps, signals=signals, decisions=decisions)
    assert sorted(p.name for p in path.iterdir()) == [
        "decisions.parquet", "merges.parquet", "requests.parquet", "run.json", "signals.parquet",
        "steps.parquet"]
    run = io.read_run(path)
    assert run.steps.end_s.tolist() == [0.9, 1.9] and run.signals.queue.tolist() == [3.0]
    assert run.decisions.action.tolist() == ["defer"]
    bare = io.read_run(_write(tmp_path, "bare"))
    assert bare.steps is None and bare.signals is None and bare.decisions is None
    assert len(bare.requests) == 3 and len(bare.merges) == 0 and bare.run_id == "bare"


def test_run_json_size_limit_is_inclusive(tmp_path, monkeypatch):
    path = _write(tmp_path, "r")
    size = (path / "run.json").stat().st_size
    monkeypatch.setattr(io, "MAX_RUN_JSON_BYTES", size)
    assert io.read_meta(path)["run_id"] == "r"
    monkeypatch.setattr(io, "MAX_RUN_JSON_BYTES", size - 1)
    with pytest.raises(InputError, match=f"run.json is {size:,} bytes") as err:
        io.read_meta(path)
    assert err.value.file == str(path / "run.json")


def test_run_json_that_is_not_an_object_is_rejected(tmp_path):
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="must hold a JSON object"):
        io.read_meta(tmp_path)
    (tmp_path / "run.json").write_text('{"run_id": "x"}')
    assert io.read_meta(tmp_path) == {"run_id": "x"}


@pytest.mark.parametrize("name,expected", [
    (".r1.tmp-abc", ("r1", "tmp")), (".r.old-12345678", ("r", "old")),
    (".a.b.damaged-1", ("a.b", "damaged")),
    ("r1.tmp-abc", None), (".tmp-abc", None), ("..tmp-abc", None), ("..old-1", None),
    (".hidden", None), (".", None),
])
def test_leftover_kind(name, expected):
    assert io.leftover_kind(name) == expected


def test_runs_root_missing_or_a_file(tmp_path):
    with pytest.raises(InputError, match="runs directory does not exist"):
        io.list_runs(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="expected a directory of runs") as err:
        io.list_runs(tmp_path / "file")
    assert err.value.file == str(tmp_path / "file")


def test_a_run_directory_given_as_root_is_its_own_listing(tmp_path):
    path = _write(tmp_path, "r")
    listing = io.list_runs(path)
    assert listing.run_dirs == [path] and listing.orphans == [] and listing.leftovers == []
    assert io.iter_run_dirs(path) == [path]


class _Entries:
    def __init__(self, entries):
        self.entries = entries

    def __enter__(self):
        return iter(self.entries)

    def __exit__(self, *exc):
        return False


def _scandir_in_order(monkeypatch, order, blocked=()):
    """os.scandir that lists names in ``order`` (then the rest) and refuses ``blocked``."""
    real = os.scandir
    rank = {name: i for i, name in enumerate(order)}

    def scandir(path):
        if Path(path) in blocked:
            raise PermissionError(13, "Permission denied", str(path))
        with real(path) as it:
            entries = list(it)
        return _Entries(sorted(entries, key=lambda e: (rank.get(e.name, len(rank)), e.name)))

    monkeypatch.setattr(io.os, "scandir", scandir)


def test_listing_finds_nested_runs_orphans_and_leftovers_sorted(tmp_path, monkeypatch):
    names = ["r2", "r5", "r0", "r4", "r1", "r3"]
    for name in names:
        _write(tmp_path, name)
    _write(tmp_path / "group", "g1")                         # a run two levels down
    for name in ("o2", "o1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "requests.parquet").write_bytes(b"x")
    (tmp_path / "notes").mkdir()                             # no parquet: not an orphan
    (tmp_path / "notes" / "a.txt").write_text("x")
    (tmp_path / "mixed").mkdir()                             # one parquet among other files
    (tmp_path / "mixed" / "a.txt").write_text("x")
    (tmp_path / "mixed" / "b.parquet").write_bytes(b"x")
    for name in (".r9.tmp-2", ".r8.old-1", ".hidden"):
        (tmp_path / name).mkdir()
    _write(tmp_path / ".hidden", "secret")                   # hidden trees are not walked
    (tmp_path / "stray.parquet").write_bytes(b"x")           # files are never walked
    _scandir_in_order(monkeypatch, names + ["o1", "o2", ".r9.tmp-2", ".r8.old-1"])
    listing = io.list_runs(tmp_path)
    assert listing.run_dirs == [tmp_path / "group" / "g1"] + [tmp_path / n for n in sorted(names)]
    assert listing.orphans == [tmp_path, tmp_path / "mixed", tmp_path / "o1", tmp_path / "o2"]
    assert listing.leftovers == [tmp_path / ".r8.old-1", tmp_path / ".r9.tmp-2"]
    assert listing.unreadable == []
    assert io.iter_run_dirs(tmp_path) == listing.run_dirs


def test_unlistable_directories_are_reported_sorted_never_dropped(tmp_path, monkeypatch):
    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
    searchable = _write(tmp_path, "run")                     # listable by path, not by scan
    _write(tmp_path, "ok")
    blocked = {tmp_path / "b", tmp_path / "a", searchable}
    _scandir_in_order(monkeypatch, ["a", "b", "run", "ok", "c"], blocked)
    listing = io.list_runs(tmp_path)
    assert listing.run_dirs == [tmp_path / "ok", searchable]
    assert listing.unreadable == [(tmp_path / "a", "cannot list directory: Permission denied"),
                                  (tmp_path / "b", "cannot list directory: Permission denied")]
    with pytest.raises(io.UnreadableRun) as err:
        io.iter_run_dirs(tmp_path)
    assert err.value.file == str(tmp_path / "a")
    assert str(err.value).count("Permission denied (+1 more)") == 1


def test_one_unlistable_directory_is_named_without_a_count(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    _write(tmp_path, "ok")
    _scandir_in_order(monkeypatch, [], {tmp_path / "a"})
    with pytest.raises(io.UnreadableRun) as err:
        io.iter_run_dirs(tmp_path)
    assert err.value.file == str(tmp_path / "a") and "more" not in str(err.value)


def test_unlistable_root_is_an_error(tmp_path, monkeypatch):
    _write(tmp_path, "ok")
    _scandir_in_order(monkeypatch, [], {tmp_path})
    with pytest.raises(InputError, match="cannot list the runs directory: Permission denied"):
        io.list_runs(tmp_path)


# ============================================================================ vinterval.py

def _cp(k, n, confidence=0.95):
    """Clopper–Pearson from scipy's beta quantiles (real-valued n allowed)."""
    a = 1 - confidence
    low = 0.0 if k <= 0 else stats.beta.ppf(a / 2, k, n - k + 1)
    high = 1.0 if k >= n else stats.beta.ppf(1 - a / 2, k + 1, n - k)
    return float(low), float(high)


def _robust_reference(n_b, v_b, kind, confidence=0.95):
    """Korn–Graubard effective-n Clopper–Pearson written out with scipy.stats and loops:
    bursts with the CR1 between-cluster variance; time blocks with the flat-top long-run
    variance at the autocorrelation bandwidth (smallest m after which 5 autocorrelations lie
    inside sqrt(log10 B / B)), clusters C = B / (1 + 2m)."""
    n_b, v_b = np.asarray(n_b, float), np.asarray(v_b, float)
    total, k, b = n_b.sum(), v_b.sum(), len(n_b)
    v = k / total
    a = 1 - confidence
    if k == 0 or k == total:
        n_eff = float(b) if kind == BURSTS else min(total, min(b, max(10, (b * 5.0) // 30)))
    elif b < 2:
        n_eff = total
    else:
        r = [vb - v * nb for nb, vb in zip(n_b, v_b)]
        gamma = [sum(r[t] * r[t + h] for t in range(b - h)) / b for h in range(b)]
        m = 0
        if kind == BLOCKS and gamma[0] > 0:
            band = math.sqrt(math.log10(max(b, 10)) / b)
            m = max(1, b // 4)
            for cand in range(max(1, b // 4)):
                lags = range(cand + 1, min(b, cand + 6))
                if all(abs(gamma[h] / gamma[0]) < band for h in lags):
                    m = cand
                    break
        lrv = gamma[0] + 2 * sum((1.0 if h <= m else 2 * (1 - h / (2 * m))) * gamma[h]
                                 for h in range(1, min(2 * m, b - 1) + 1))
        lrv = max(lrv, gamma[0])
        c = max(2.0, b / (1 + 2 * m))
        var = c / (c - 1) * b * lrv / total ** 2
        n_eff = total if var == 0 else min(total, v * (1 - v) / var)
        t_ratio = stats.t.ppf(1 - a / 2, total - 1) / stats.t.ppf(1 - a / 2, c - 1)
        n_eff = min(total, n_eff * t_ratio ** 2)
    low, high = _cp(v * n_eff, n_eff, confidence)
    return low, high, n_eff


def test_block_length_is_a_sixtieth_of_the_span_up_to_five_seconds():
    assert block_length(0.0, 1000.0) == 5.0
    assert block_length(0.0, 300.0) == 5.0
    assert block_length(0.0, 299.0) == pytest.approx(299.0 / 60)
    assert block_length(100.0, 150.0) == pytest.approx(50.0 / 60)
    assert block_length(3.0, 3.5) == pytest.approx(0.5 / 60)
    assert block_length(5.0, 5.0) == 0.0 and block_length(9.0, 2.0) == 0.0


@pytest.mark.parametrize("n,times,expected", [(10, 5, True), (10, 6, False), (11, 5, True),
                                              (9, 5, False), (2, 1, True), (1, 1, False)])
def test_bursts_when_at_most_half_as_many_arrival_times_as_requests(n, times, expected):
    assert uses_bursts(n, times) is expected


def test_cluster_counts_of_bursts():
    n_b, v_b, kind = cluster_counts([5.0, 1.0, 1.0, 5.0, 1.0, 7.0, 7.0, 7.0],
                                    [1, 0, 1, 1, 0, 0, 0, 0])
    assert kind == BURSTS
    assert n_b.tolist() == [3.0, 2.0, 3.0] and v_b.tolist() == [1.0, 2.0, 0.0]


def test_cluster_counts_of_time_blocks_start_at_the_first_arrival():
    """Arrivals 3, 3.5, ..., 303 (span 300 -> blocks of 5 s from t = 3); 33..42 left empty."""
    t = 3.0 + np.arange(601.0) / 2
    keep = (t < 33) | (t > 42)
    t = t[keep]
    viol = (t % 2 == 0)
    n_b, v_b, kind = cluster_counts(t, viol)
    assert kind == BLOCKS
    blocks = np.floor((t - 3.0) / 5.0)
    ref_n = [np.sum(blocks == b) for b in np.unique(blocks)]
    ref_v = [np.sum(viol[blocks == b]) for b in np.unique(blocks)]
    assert n_b.tolist() == ref_n == [10] * 6 + [1] + [10] * 52 + [1]
    assert v_b.tolist() == ref_v


def test_cluster_counts_of_a_short_run_use_short_blocks():
    t = np.linspace(0.0, 5.0, 121)         # span 5 s -> blocks of 5/60 s, two arrivals each
    n_b, _, kind = cluster_counts(t, np.zeros(121, dtype=bool))
    assert kind == BLOCKS and n_b.size == 61 and n_b.sum() == 121


def test_cluster_counts_of_one_and_no_request():
    n_b, v_b, kind = cluster_counts([4.0], [True])
    assert (n_b.tolist(), v_b.tolist(), kind) == ([1.0], [1.0], BLOCKS)
    n_b, v_b, kind = cluster_counts([], [])
    assert n_b.shape == (0,) and v_b.shape == (0,) and kind == BLOCKS


def test_robust_interval_without_requests_is_nan():
    for n_b, v_b in (([], []), ([0.0], [0.0])):
        assert all(math.isnan(x) for x in robust_v_ci(n_b, v_b))


def test_robust_interval_of_a_single_request_is_clopper_pearson_of_one():
    assert robust_v_ci([1.0], [1.0]) == pytest.approx((0.025, 1.0, 1.0))
    assert robust_v_ci([1.0], [0.0]) == pytest.approx((0.0, 0.975, 1.0))


def test_one_cluster_is_clopper_pearson_over_its_requests():
    for k in (1, 30, 99):
        low, high, n_eff = robust_v_ci([100.0], [float(k)], BLOCKS)
        assert n_eff == 100.0
        assert (low, high) == pytest.approx(_cp(k, 100), rel=1e-9)
        assert low < k / 100 < high


@pytest.mark.parametrize("kind,blocks,block_s,n_eff", [
    (BURSTS, 8, 5.0, 8.0),        # bursts count once each
    (BLOCKS, 8, 5.0, 8.0),        # 40 s: 10 clusters at least, but never more than 8 blocks
    (BLOCKS, 40, 5.0, 10.0),      # 200 s: 6 pieces of 30 s -> the floor of 10
    (BLOCKS, 120, 5.0, 20.0),     # 600 s: 20 pieces of 30 s
    (BLOCKS, 120, 2.5, 10.0),     # 300 s: 10 pieces
])
def test_no_or_all_violations_rest_on_clusters_not_requests(kind, blocks, block_s, n_eff):
    n_b = np.full(blocks, 20.0)
    low, high, got = robust_v_ci(n_b, np.zeros(blocks), kind, block_s=block_s)
    assert got == n_eff and low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / n_eff))
    low, high, got = robust_v_ci(n_b, n_b, kind, block_s=block_s)
    assert got == n_eff and high == 1.0 and low == pytest.approx(0.025 ** (1 / n_eff))


@pytest.mark.parametrize("n_b,v_b", [
    ([20, 20, 20, 20, 20, 20, 20, 20], [0, 0, 20, 0, 18, 1, 0, 0]),     # strongly clustered
    ([30, 12, 25, 40, 8, 19, 33], [3, 1, 9, 2, 0, 4, 6]),                 # mild, unequal sizes
    ([10, 10], [2, 8]),                                                   # two clusters
    ([50, 50, 50], [1, 0, 0]),                                            # a single violation
    ([10, 10, 10, 10], [5, 5, 5, 5]),                                     # zero variance
])
@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_robust_interval_matches_the_written_out_formula(n_b, v_b, confidence):
    got = robust_v_ci(np.asarray(n_b, float), np.asarray(v_b, float), BLOCKS, confidence)
    ref = _robust_reference(n_b, v_b, BLOCKS, confidence)
    assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)
    total = float(np.sum(n_b))
    assert 0 < got[2] <= total and got[0] < sum(v_b) / total < got[1]


def test_clustered_violations_shrink_the_effective_sample():
    n_b, v_b = np.full(8, 20.0), np.array([0, 0, 20, 0, 18, 1, 0, 0], float)
    low, high, n_eff = robust_v_ci(n_b, v_b)
    assert n_eff < 16                      # 160 requests, about 8 clusters of information
    cp_low, cp_high = _cp(39, 160)
    assert low < cp_low and high > cp_high


def test_default_confidence_is_95_percent():
    n_b, v_b = [30.0, 12.0, 25.0, 40.0], [3.0, 1.0, 9.0, 2.0]
    assert robust_v_ci(n_b, v_b) == robust_v_ci(n_b, v_b, BLOCKS, 0.95)
    t = np.arange(200.0)
    viol = (t % 7) == 0
    assert v_interval(t, viol) == v_interval(t, viol, 0.95)
    n_b, v_b, kind = cluster_counts(t, viol)
    low, high, _ = robust_v_ci(n_b, v_b, kind, 0.95)
    clusters = robust_v_fit(n_b, v_b, kind, 0.95, block_length(0.0, 199.0))[3]
    assert v_interval(t, viol) == (low, high, clusters, kind)
    assert clusters < n_b.size                 # effective clusters, not the blocks counted
    narrow = v_interval(t, viol, 0.8)
    assert low < narrow[0] < narrow[1] < high


# ============================================================================== summary.py

def _quantile(values, q):
    """Linear interpolation between order statistics; towards an inf is inf."""
    x = sorted(values)
    h = (len(x) - 1) * q
    lo = int(math.floor(h))
    frac = h - lo
    if frac == 0:
        return x[lo]
    if math.isinf(x[lo + 1]) or math.isinf(x[lo]):
        return math.inf
    return x[lo] + frac * (x[lo + 1] - x[lo])


def _brute(req: pd.DataFrame, windows, slo: dict, horizon: float) -> dict:
    lat, ttft, lag = [], [], []
    viol = ttft_viol = tpot_viol = good = exposed = failed = 0
    for r in req.itertuples():
        done = r.ok and math.isfinite(r.end_s)
        failed += not done
        e2e = r.end_s - r.arrival_s if done else math.inf
        t1 = r.first_token_s - r.arrival_s if r.ok and math.isfinite(r.first_token_s) else math.inf
        if done and math.isfinite(r.first_token_s):
            t2 = (r.end_s - r.first_token_s) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        else:
            t2 = math.inf
        lat.append(e2e)
        ttft.append(t1)
        lag.append(r.sent_s - r.arrival_s)
        bad = not done or e2e > slo["e2e_s"]
        viol += e2e > slo["e2e_s"]
        if slo.get("ttft_s") is not None:
            ttft_viol += t1 > slo["ttft_s"]
            bad = bad or t1 > slo["ttft_s"]
        if slo.get("tpot_s") is not None:
            tpot_viol += t2 > slo["tpot_s"]
            bad = bad or t2 > slo["tpot_s"]
        good += not bad
        if done:
            lo, hi = r.arrival_s, r.end_s
        else:
            lo, hi = r.sent_s, (r.end_s if math.isfinite(r.end_s) else max(horizon, r.sent_s))
        exposed += any(s < hi and e > lo for s, e in windows)
    n = len(req)
    bad_n = n - good          # V: failed or any configured SLO missed (vLLM goodput)
    return {"n_requests": n, "n_failed": failed, "violation_rate": bad_n / n,
            "e2e_violation_rate": viol / n,
            "ttft_violation_rate": ttft_viol / n if slo.get("ttft_s") is not None else math.nan,
            "tpot_violation_rate": tpot_viol / n if slo.get("tpot_s") is not None else math.nan,
            "goodput_rate": good / n, "exposure_requests": exposed / n,
            "p50_s": _quantile(lat, 0.5), "p95_s": _quantile(lat, 0.95),
            "p99_s": _quantile(lat, 0.99), "ttft_p95_s": _quantile(ttft, 0.95),
            "send_lag_p99_s": _quantile(lag, 0.99),
            "prompt_tokens_total": int(req.prompt_tokens.sum()),
            "output_tokens_total": int(req.output_tokens[req.ok].sum()),
            "k_total": len(windows), "v_cp": _cp(bad_n, n)}


def _request_frame(rng, n=400, horizon=100.0):
    """Random requests with a few exact ties at the SLOs and one timeout without an end."""
    arrival = np.sort(rng.uniform(0.0, 80.0, n)).round(3)
    sent = arrival + rng.exponential(0.05, n).round(3)
    ttft = rng.gamma(2.0, 0.15, n).round(3)
    tokens = rng.integers(1, 40, n)
    end = sent + ttft + tokens * rng.uniform(0.01, 0.06, n).round(3)
    ok = np.ones(n, dtype=bool)
    end[:6] = arrival[:6] + 2.0            # latency exactly at the e2e SLO: not a violation
    ttft[6:10] = 0.5                        # TTFT exactly at its SLO
    first = np.minimum(sent + ttft, end)
    first[6:10] = arrival[6:10] + 0.5
    end[6:10] = np.maximum(end[6:10], first[6:10])
    ok[20], end[20] = False, np.nan         # timeout: in flight until the horizon
    ok[21] = False                          # error reply with an end
    tokens[22] = 1                          # one token: TPOT 0
    first[23] = np.nan                      # no first token recorded
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival, "sent_s": sent,
                         "first_token_s": first, "end_s": end,
                         "prompt_tokens": rng.integers(5, 50, n), "output_tokens": tokens,
                         "ok": ok, "error": [None if o else "x" for o in ok]})


def _arrays(req: pd.DataFrame) -> dict:
    return {c: req[c].to_numpy(dtype=bool if c == "ok" else float)
            for c in summary_mod.REQUEST_COLUMNS}


@pytest.mark.parametrize("slo", [{"e2e_s": 2.0, "ttft_s": 0.5, "tpot_s": 0.04},
                                 {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None}])
@pytest.mark.parametrize("n_windows", [3, 40])
def test_request_numbers_match_a_brute_force_loop(slo, n_windows):
    """Few windows (tested one by one) and many (searchsorted): same definitions."""
    rng = np.random.default_rng(n_windows)
    req = _request_frame(rng)
    req.loc[24, ["ok", "end_s", "sent_s"]] = [False, np.nan, 85.0]   # sent after every window
    starts = np.sort(rng.choice(np.arange(0.0, 84.0, 2.0), n_windows, replace=False))
    windows = [(s, s + 1.0) for s in starts]
    windows[-1] = (90.0, 91.0)              # reached only by the timeout lifetimes
    got = request_numbers(_arrays(req), {"start_s": np.array([w[0] for w in windows]),
                                         "end_s": np.array([w[1] for w in windows])},
                          None, slo, 2.0, 100.0)
    ref = _brute(req, windows, slo, 100.0)
    for key, value in ref.items():
        if key == "v_cp":
            assert (got["v_cp_low"], got["v_cp_high"]) == pytest.approx(value, rel=1e-9)
        elif isinstance(value, float) and math.isnan(value):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12), key
    assert ref["n_failed"] == 3 and 0 < ref["exposure_requests"] < 1
    assert math.isfinite(ref["p99_s"]) and ref["p99_s"] > ref["p95_s"] > ref["p50_s"]
    violated = ~metrics.slo_flags(req.arrival_s, req.first_token_s, req.end_s,
                                  req.output_tokens, req.ok, slo).good
    assert (got["v_ci_low"], got["v_ci_high"], got["v_ci_clusters"]) == \
        v_interval(req.arrival_s.to_numpy(), violated)[:3]
    assert got["k_total"] == n_windows and got["slo_e2e_s"] == 2.0
    assert (got["merge_duration_s"], got["horizon_s"]) == (2.0, 100.0)


def test_timeout_lifetime_runs_to_the_horizon_in_both_window_paths():
    """A request sent at 50 without an end is in flight over [50, 100]: a window at 60 hits it."""
    req = _requests([10.0, 50.0], [0.5, 0.5], ok=[True, False])
    req.loc[1, "end_s"] = np.nan
    for windows in ([(60.0, 61.0)], [(60.0 + 0.5 * i, 60.2 + 0.5 * i) for i in range(40)]):
        merges = {"start_s": np.array([w[0] for w in windows]),
                  "end_s": np.array([w[1] for w in windows])}
        got = request_numbers(_arrays(req), merges, None, {"e2e_s": 2.0}, 2.0, 100.0)
        assert got["exposure_requests"] == 0.5


def test_touching_a_window_is_not_exposure():
    """Arriving when a window ends, or ending when one starts: zero overlap."""
    req = _requests([20.0, 5.0, 30.0], [1.0, 5.0, 1.0])   # [20, 21], [5, 10], [30, 31]
    for windows in ([(10.0, 20.0)], [(10.0, 20.0)] + [(40.0 + i, 40.5 + i) for i in range(40)]):
        merges = {"start_s": np.array([w[0] for w in windows]),
                  "end_s": np.array([w[1] for w in windows])}
        got = request_numbers(_arrays(req), merges, None, {"e2e_s": 2.0}, 2.0, 100.0)
        assert got["exposure_requests"] == 0.0
    merges = {"start_s": np.array([30.5]), "end_s": np.array([40.0])}
    got = request_numbers(_arrays(req), merges, None, {"e2e_s": 2.0}, 2.0, 100.0)
    assert got["exposure_requests"] == pytest.approx(1 / 3)
    got = request_numbers(_arrays(req), {"start_s": np.zeros(0), "end_s": np.zeros(0)}, None,
                          {"e2e_s": 2.0}, 2.0, 100.0)
    assert got["exposure_requests"] == 0.0 and got["k_total"] == 0


def test_request_numbers_of_one_and_of_no_request():
    one = request_numbers(_arrays(_requests([3.0], [2.0])), {"start_s": [], "end_s": []}, None,
                          {"e2e_s": 2.0}, 2.0, 100.0)
    assert one["n_requests"] == 1 and one["violation_rate"] == 0.0 and one["p50_s"] == 2.0
    assert math.isnan(one["arrival_rate_scheduled"]) and one["goodput_rate"] == 1.0
    with pytest.raises(InputError, match="run has no requests") as err:
        request_numbers(_arrays(_requests([], [])), {"start_s": [], "end_s": []}, None,
                        {"e2e_s": 2.0}, 2.0, 100.0, run="r")
    assert err.value.column == "arrival_s" and err.value.file == "r"


def test_rate_is_gaps_over_their_length():
    rate = summary_mod._rate
    assert rate(np.array([3.0, 7.0])) == 0.25
    assert rate(np.array([4.0, 0.0, 2.0])) == 0.5
    assert rate(np.array([1.0, 1.5])) == 2.0
    assert math.isnan(rate(np.array([2.0]))) and math.isnan(rate(np.zeros(0)))
    assert math.isnan(rate(np.array([5.0, 5.0, 5.0])))


def test_sum_where_counts_nan_as_zero_and_skips_masked_rows():
    mask = np.array([True, False, True, True])
    assert summary_mod._sum_where(np.array([3, 100, 4, 5]), mask) == 12
    assert summary_mod._sum_where(np.array([3.0, 100.0, np.nan, 5.0]), mask) == 8
    assert summary_mod._sum_where(np.array([3.0, 100.0, 4.0, 5.0]), ~mask) == 100


def test_step_rate_of_the_summary():
    merges = {"start_s": np.array([2.0]), "end_s": np.array([4.0])}
    steps = {"start_s": np.array([1.0, 0.0, 5.0]), "end_s": np.array([1.5, 0.5, 10.0])}
    assert summary_mod._step_rate(steps, merges) == pytest.approx(3 / 8)
    one = {"start_s": np.array([0.0]), "end_s": np.array([6.0])}
    assert summary_mod._step_rate(one, merges) == pytest.approx(1 / 4)
    assert math.isnan(summary_mod._step_rate(None, merges))
    assert math.isnan(summary_mod._step_rate({"start_s": np.zeros(0), "end_s": np.zeros(0)},
                                             merges))


def test_summary_row_meta_fields_and_design_columns():
    req = _arrays(_requests([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]))
    merges = {"start_s": np.zeros(0), "end_s": np.zeros(0)}
    meta = _meta("r", complete=True, trace_realisation="real-1")
    row = summary_mod.summarize_arrays(meta, req, merges)
    assert list(row) == list(SUMMARY_COLUMNS)
    assert (row["trace_name"], row["trace_sha256"], row["trace_realisation"]) == ("t", "abc", "real-1")
    assert row["complete"] is True and row["oracle"] is False
    meta = _meta("r", complete=True)
    row = summary_mod.summarize_arrays(meta, req, merges, design=True)
    assert row["trace_realisation"] == "abc"
    assert list(row) == list(SUMMARY_COLUMNS) + list(DESIGN_COLUMNS)
    row = summary_mod.summarize_arrays({**meta, "trace": None}, req, merges)
    assert row["trace_name"] is None and row["trace_realisation"] is None


def test_from_arrow_keeps_integers_exact_and_nulls_as_nan():
    table = pa.table({"a": pa.array([1, 2], pa.int64()), "b": pa.array([1, None], pa.int64()),
                      "c": pa.array([None, None], pa.null()), "d": pa.array([1.5, 2.5], pa.float32()),
                      "ok": pa.array([True, False]), "e": pa.array([1, 2], pa.int32())})
    out = summary_mod._from_arrow(table, ["a", "b", "c", "d", "ok", "e"])
    assert out["a"].dtype == np.int64 and out["a"].tolist() == [1, 2]
    assert out["e"].dtype == np.int64
    assert out["b"].dtype == float and out["b"][0] == 1.0 and math.isnan(out["b"][1])
    assert out["c"].dtype == float and np.isnan(out["c"]).all() and out["c"].size == 2
    assert out["d"].dtype == float and out["d"].tolist() == [1.5, 2.5]
    assert out["ok"].dtype == bool and out["ok"].tolist() == [True, False]
    assert summary_mod._from_arrow(None, ["a"]) is None
    assert summary_mod._from_frame(None, ["a"]) is None


def test_summarize_run_of_a_loaded_run_and_of_a_path_agree(tmp_path):
    path = _write(tmp_path, "r", arrival=[1.0, 2.0, 3.0, 4.0], latency=[0.5, 3.0, 0.5, 0.5],
                  windows=[(2.5, 3.5)])
    by_path = summary_mod.summarize_run(path)
    by_run = summary_mod.summarize_run(io.read_run(path))
    assert pd.Series(by_path).equals(pd.Series(by_run)) and by_path["violation_rate"] == 0.25
    assert by_path["exposure_requests"] == 0.5 and by_path["k_total"] == 1


def test_summarize_runs_names_the_first_invalid_run_and_counts_the_rest(tmp_path):
    for name in ("a", "b", "c"):
        _write(tmp_path, name)
    _set_meta(_write(tmp_path, "d"), complete=False)
    _set_meta(tmp_path / "a", backend="nope")
    with pytest.raises(InputError, match=r"^.*run a: .*backend") as err:
        summarize_runs(tmp_path)
    assert "more" not in str(err.value)
    _set_meta(tmp_path / "c", backend="nope")
    with pytest.raises(InputError, match=r"run a: .*\(\+1 more; run `evalkit validate "):
        summarize_runs(tmp_path)
    _set_meta(tmp_path / "a", backend="sim")
    _set_meta(tmp_path / "c", backend="sim")
    df = summarize_runs(tmp_path)
    assert df.run_id.tolist() == ["a", "b", "c"] and df.attrs["excluded"] == ["d"]


def _fake_report(tmp_path, problems):
    return ValidationReport(runs_dir=tmp_path, run_dirs=[], problems=problems)


def _unreadable(run, path):
    return Problem(run, str(path), None, "cannot read: Permission denied", "chmod",
                   kind="unreadable")


def test_only_unreadable_runs_say_so(tmp_path, monkeypatch):
    report = _fake_report(tmp_path, [_unreadable("b", tmp_path / "b"),
                                     _unreadable("a", tmp_path / "a")])
    monkeypatch.setattr(summary_mod, "validate_runs", lambda *a, **k: report)
    with pytest.raises(InputError, match="no readable runs: cannot read") as err:
        summarize_runs(tmp_path)
    assert err.value.file == str(tmp_path / "b")
    report.problems.append(Problem("c", None, None, "incomplete", "rerun", kind="incomplete"))
    with pytest.raises(InputError, match=r"no complete runs to summarise \(1 incomplete"):
        summarize_runs(tmp_path)


def test_unreadable_runs_listed_once_each_by_run_id(tmp_path):
    report = _fake_report(tmp_path, [
        _unreadable("b", tmp_path / "b" / "run.json"), _unreadable("a", tmp_path / "a"),
        Problem("b", str(tmp_path / "b" / "merges.parquet"), None, "second", "x",
                kind="unreadable")])
    rows = summary_mod.unreadable_runs(report)
    assert [r["run_id"] for r in rows] == ["a", "b"]
    assert rows[1] == {"run_id": "b", "path": str(tmp_path / "b" / "run.json"),
                       "reason": f"unreadable: cannot read: Permission denied "
                                 f"({tmp_path / 'b' / 'run.json'})"}


# ============================================================================ summary edges

@pytest.fixture(scope="module")
def edge_store(tmp_path_factory):
    """Runs at the edges of the scan: one request, one merge, none, identical arrivals, a
    0.5 s arrival window, a horizon before the last end, many windows, TTFT/TPOT SLOs."""
    root = tmp_path_factory.mktemp("edges")
    rng = np.random.default_rng(5)
    slo = {"e2e_s": 2.0, "ttft_s": 0.5, "tpot_s": 0.04}
    req = _request_frame(rng)
    many = [(2.0 * i + 0.5, 2.0 * i + 1.2) for i in range(45)]
    steps = pd.DataFrame({"step": np.arange(30), "start_s": np.arange(30) * 3.0,
                          "end_s": np.arange(30) * 3.0 + 2.5})
    io.write_run(root, _meta("many", slo=slo), req, _merges(many), steps=steps)
    io.write_run(root, _meta("one-merge", slo=slo), _request_frame(rng, n=60),
                 _merges([(30.0, 32.0)]))
    io.write_run(root, _meta("no-merge", role="no_sync", policy="no_sync"),
                 _requests(np.arange(0.0, 20.0), np.full(20, 0.5)), _merges([]))
    io.write_run(root, _meta("single"), _requests([4.0], [3.0]), _merges([(1.0, 2.0)]))
    io.write_run(root, _meta("burst"), _requests(np.full(6, 7.0), [0.5, 3, 3, 0.5, 0.5, 1]),
                 _merges([(7.2, 7.4)]))
    io.write_run(root, _meta("narrow"), _requests([10.0, 10.25, 10.5], [0.5, 0.5, 2.5]),
                 _merges([]))
    late = _requests(np.arange(1.0, 40.0), np.full(39, 1.0))
    late.loc[38, "end_s"] = 45.0
    io.write_run(root, _meta("late", horizon_s=42.0, trace_realisation="tr-9"), late,
                 _merges([(10.0, 12.0), (41.0, 43.0)]))
    return root


def test_summarize_on_edge_runs(edge_store):
    ref = summarize_runs(edge_store, design=False)
    assert list(ref.columns) == list(SUMMARY_COLUMNS)
    assert ref.set_index("run_id").loc["late", "trace_realisation"] == "tr-9"
    by_id = ref.set_index("run_id")
    assert by_id.loc["one-merge", "k_total"] == 1 and by_id.loc["no-merge", "k_total"] == 0
    assert by_id.loc["no-merge", "k_observed"] == 0 and by_id.loc["no-merge", "exposure_time"] == 0
    assert math.isnan(by_id.loc["burst", "arrival_rate_scheduled"])
    assert by_id.loc["narrow", "arrival_rate_scheduled"] == 4.0
    assert by_id.loc["late", "span_end_s"] == 42.0 and by_id.loc["single", "n_requests"] == 1
    assert by_id.loc["many", "k_total"] == 45 and by_id.loc["many", "step_rate"] > 0
    assert math.isfinite(by_id.loc["many", "tpot_violation_rate"])
