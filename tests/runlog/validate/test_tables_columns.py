"""Every column rule of the run tables, pinned by the exact (file, column) pairs it flags.

One change to a valid run at a time: a column missing, of the wrong type, null where it is
required, or a time that is NaN, infinite or negative. The problems reported must be exactly
the expected ones, so a rule that stops firing or blames the wrong column fails here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog.schema import TABLES
from evalkit.runlog.validate import validate_run

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "runs" / "fixture-s0-fixed_h"
PRESENT = ("requests", "merges", "steps")


def _copy(tmp_path) -> Path:
    run = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, run)
    return run


def _rewrite(run: Path, table: str, fn) -> None:
    path = run / f"{table}.parquet"
    pq.write_table(fn(pq.read_table(path)), path)


def flagged(run: Path) -> set[tuple[str, str | None]]:
    return {(Path(p.file).name, p.column) for p in validate_run(run) if p.severity == "error"}


def test_the_fixture_run_is_valid():
    assert flagged(FIXTURE) == set()


COLUMNS = [(t, c) for t in PRESENT for c in TABLES[t]]


@pytest.mark.parametrize("table, col", COLUMNS, ids=[f"{t}.{c.name}" for t, c in COLUMNS])
def test_missing_column_is_named(tmp_path, table, col):
    run = _copy(tmp_path)
    _rewrite(run, table, lambda t: t.drop_columns([col.name]) if col.name in t.column_names
             else t)
    assert flagged(run) == {(f"{table}.parquet", col.name)}


_WRONG = {"int": pa.array(["x"]), "float": pa.array(["x"]), "bool": pa.array([1]),
          "string": pa.array([1])}


@pytest.mark.parametrize("table, col", COLUMNS, ids=[f"{t}.{c.name}" for t, c in COLUMNS])
def test_wrong_type_is_named(tmp_path, table, col):
    run = _copy(tmp_path)

    def retype(t):
        n = t.num_rows
        value = _WRONG[col.kind][0].as_py()
        arr = pa.array([value] * n)
        if col.name in t.column_names:
            return t.set_column(t.column_names.index(col.name), col.name, arr)
        return t.append_column(col.name, arr)

    _rewrite(run, table, retype)
    assert flagged(run) == {(f"{table}.parquet", col.name)}


REQUIRED = [(t, c) for t, c in COLUMNS if not c.nullable]


@pytest.mark.parametrize("table, col", REQUIRED, ids=[f"{t}.{c.name}" for t, c in REQUIRED])
def test_null_in_a_required_column_is_named(tmp_path, table, col):
    run = _copy(tmp_path)

    def blank_first(t):
        i = t.column_names.index(col.name)
        values = t.column(i).to_pylist()
        values[0] = None
        return t.set_column(i, col.name, pa.array(values, type=t.schema.field(i).type))

    _rewrite(run, table, blank_first)
    assert flagged(run) == {(f"{table}.parquet", col.name)}


TIMES = [("requests", "arrival_s"), ("requests", "sent_s"), ("requests", "first_token_s"),
         ("requests", "end_s"), ("merges", "start_s"), ("merges", "end_s"),
         ("steps", "start_s"), ("steps", "end_s")]


@pytest.mark.parametrize("table, name", TIMES)
@pytest.mark.parametrize("value", [np.inf, -1.0])
def test_infinite_or_negative_time_is_named(tmp_path, table, name, value):
    run = _copy(tmp_path)
    # the last row, shifted so that only this cell is wrong: an order check may also fire,
    # but always on a time column of this table, and this column is among them
    def damage(t):
        i = t.column_names.index(name)
        values = t.column(i).to_pylist()
        values[-1] = value
        return t.set_column(i, name, pa.array(values, type=pa.float64()))

    _rewrite(run, table, damage)
    problems = [p for p in validate_run(run) if p.severity == "error"]
    mine = [p for p in problems if p.column == name and Path(p.file).name == f"{table}.parquet"]
    word = "infinite time" if value == np.inf else "negative time"
    assert any(p.message.startswith(word) for p in mine), [p.format() for p in problems]
    assert {Path(p.file).name for p in problems} == {f"{table}.parquet"}


@pytest.mark.parametrize("table, name, required", [
    ("requests", "arrival_s", True), ("requests", "sent_s", True),
    ("requests", "first_token_s", False), ("merges", "start_s", True),
    ("merges", "end_s", True), ("steps", "start_s", True)])
def test_nan_time_only_where_the_column_is_required(tmp_path, table, name, required):
    run = _copy(tmp_path)

    def damage(t):
        i = t.column_names.index(name)
        values = t.column(i).to_pylist()
        values[-1] = float("nan")
        return t.set_column(i, name, pa.array(values, type=pa.float64()))

    _rewrite(run, table, damage)
    nan = [p for p in validate_run(run) if p.message.startswith("NaN time")]
    assert [(Path(p.file).name, p.column) for p in nan] == (
        [(f"{table}.parquet", name)] if required else [])
