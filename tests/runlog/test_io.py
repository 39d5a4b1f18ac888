"""Atomic run writing and reading: an interrupted writer never leaves a run that reads as complete."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

import evalkit.runlog.io as io
from evalkit.errors import InputError
from evalkit.runlog.io import iter_run_dirs, read_run, write_run
from evalkit.runlog.summary import summarize_runs
from evalkit.runlog.validate import read_valid_run, validate_runs

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
