"""Atomic run writing and reading: an interrupted writer never leaves a run that reads as complete.

Boundaries of run-log I/O (``evalkit.runlog.io``): JSON layout, run ids, atomic publication,
table columns and nulls, size limits, listing runs, orphans and leftovers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import evalkit.runlog.io as io
from evalkit import __version__
from evalkit.errors import InputError
from evalkit.limits import MAX_RUN_ID_BYTES
from evalkit.runlog.io import iter_run_dirs, read_run, write_run
from evalkit.runlog.schema import SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS
from evalkit.runlog.summary import summarize_runs
from evalkit.runlog.validate import read_valid_run, validate_runs
from tests.support.tiny_runs import _merges, _meta, _requests, _write


RUN = "fixture-s0-fixed_h"


@pytest.fixture
def source(fixtures_dir):
    run = read_run(fixtures_dir / "runs" / RUN)
    meta = {k: v for k, v in run.meta.items()
            if k not in ("schema_version", "evalkit_version", "created_at", "complete", "host")}
    return meta, run


def test_round_trip(tmp_path, source):
    meta, run = source
    path = write_run(tmp_path, meta, run.requests, run.merges, steps=run.steps)
    back = read_run(path)
    pd.testing.assert_frame_equal(back.requests, run.requests)
    pd.testing.assert_frame_equal(back.merges, run.merges)
    assert back.meta["complete"] is True and back.run_id == RUN
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


class Boom(RuntimeError):
    pass


def failing_writer(monkeypatch, fail_on: str):
    real = io.pq.write_table

    def write_table(table, where, *args, **kwargs):
        if str(where).endswith(fail_on):
            raise Boom(f"killed while writing {fail_on}")
        return real(table, where, *args, **kwargs)

    monkeypatch.setattr(io.pq, "write_table", write_table)


@pytest.mark.parametrize("fail_on", ["requests.parquet", "merges.parquet", "steps.parquet"])
def test_failed_write_leaves_no_run(tmp_path, source, monkeypatch, fail_on):
    meta, run = source
    failing_writer(monkeypatch, fail_on)
    with pytest.raises(Boom):
        write_run(tmp_path, meta, run.requests, run.merges, steps=run.steps)
    assert list(tmp_path.iterdir()) == []
    assert iter_run_dirs(tmp_path) == []
    with pytest.raises(InputError, match="no runs found"):
        summarize_runs(tmp_path)


def test_failed_rewrite_keeps_the_old_run(tmp_path, source, monkeypatch):
    meta, run = source
    write_run(tmp_path, meta, run.requests, run.merges)
    failing_writer(monkeypatch, "merges.parquet")
    with pytest.raises(Boom):
        write_run(tmp_path, {**meta, "regime": "other"}, run.requests.iloc[:10], run.merges)
    back = read_run(tmp_path / RUN)
    assert back.meta["regime"] == meta["regime"] and len(back.requests) == len(run.requests)


def test_killed_writer_leftover_is_ignored_and_reported(tmp_path, source):
    """SIGKILL skips the cleanup: the hidden temporary directory stays, and is never a run."""
    meta, run = source
    done = write_run(tmp_path / "store", meta, run.requests, run.merges)
    leftover = tmp_path / "store" / f".{RUN}-2.tmp-deadbeef"
    shutil.copytree(done, leftover)
    meta_path = leftover / "run.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "run_id": f"{RUN}-2"}))
    assert iter_run_dirs(tmp_path / "store") == [done]
    report = validate_runs(tmp_path / "store")
    assert report.ok and len(report.run_dirs) == 1
    assert [p.kind for p in report.warnings] == ["layout"] and "interrupted write" in report.warnings[0].message
    assert summarize_runs(tmp_path / "store").run_id.tolist() == [RUN]


def test_incomplete_write_never_reads_as_complete(tmp_path, source):
    meta, run = source
    path = write_run(tmp_path, {**meta, "error": "trainer crashed"}, run.requests, run.merges,
                     complete=False)
    assert json.loads((path / "run.json").read_text())["complete"] is False
    with pytest.raises(InputError, match="incomplete"):
        read_valid_run(path)
    assert read_run(path).meta["complete"] is False      # reading alone does not check
    with pytest.raises(TypeError, match="read_valid_run"):
        read_run(path, validate=True)


def test_empty_frames_follow_the_schema(tmp_path):
    from evalkit.runlog.io import empty_frame
    from evalkit.runlog.schema import TABLES

    kinds = {"int": "int64", "float": "float64", "bool": "bool", "string": "object"}
    for name, cols in TABLES.items():
        frame = empty_frame(name)
        assert list(frame.columns) == [c.name for c in cols] and len(frame) == 0
        assert [str(frame[c.name].dtype) for c in cols] == [kinds[c.kind] for c in cols]
    path = write_run(tmp_path, {"run_id": "empty"}, empty_frame("requests"),
                     empty_frame("merges"), complete=False)
    back = read_run(path)
    assert len(back.requests) == 0 and list(back.merges.columns) == [c.name for c in
                                                                       TABLES["merges"]]


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


def test_two_links_to_one_run_count_the_first_in_link_name_order(tmp_path):
    # the links' own paths decide, not their folders': runs/a/b/l sorts before runs/a/zz
    # although its folder runs/a/b sorts after runs/a
    runs = tmp_path / "runs"
    store = runs / ".store" / "run1"      # a hidden folder is not walked: only the links lead in
    store.mkdir(parents=True)
    (store / "run.json").write_text("{}")
    (runs / "a" / "b").mkdir(parents=True)
    (runs / "a" / "zz").symlink_to(store, target_is_directory=True)
    (runs / "a" / "b" / "l").symlink_to(store, target_is_directory=True)
    got = io.list_runs(runs)
    assert got.run_dirs == [runs / "a" / "b" / "l"]
    assert [link for link, _ in got.refused] == [runs / "a" / "zz"]
    assert "a second path to" in got.refused[0][1]


def test_a_link_to_a_folder_above_it_is_refused_as_a_loop(tmp_path):
    runs = tmp_path / "runs"
    (runs / "a" / "b").mkdir(parents=True)
    (runs / "r").mkdir()
    (runs / "r" / "run.json").write_text("{}")
    (runs / "a" / "b" / "up").symlink_to(runs / "a", target_is_directory=True)
    got = io.list_runs(runs)
    assert got.run_dirs == [runs / "r"]
    assert got.refused == [(runs / "a" / "b" / "up", "symbolic link loops back to a directory "
                            f"above it (-> {os.path.realpath(runs / 'a')})")]


def test_a_directory_reached_again_through_a_second_link_is_refused_by_name(tmp_path):
    # a hidden folder is not walked; one link leads to a run inside it, a second to the
    # folder itself, whose walk meets the same run again
    run = tmp_path / ".store" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "a").symlink_to(Path(".store") / "r1")
    (tmp_path / "b").symlink_to(".store")
    listing = io.list_runs(tmp_path)
    assert listing.run_dirs == [tmp_path / "a"]
    assert listing.refused == [(tmp_path / "b" / "r1",
                                f"a second path to {tmp_path / 'a'}; a run is listed once")]


def test_an_os_error_is_the_environment_by_its_errno_and_a_missing_file_is_not():
    import errno

    got = io.environment_failure(OSError(errno.EMFILE, "no descriptor left"), "r/run.json")
    assert got is not None and "too many open files" in got.message
    assert io.environment_failure(FileNotFoundError(errno.ENOENT, "gone"), "r/run.json") is None
