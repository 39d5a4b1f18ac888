"""Driving run-log validation: ``inspect_run`` on missing, unreadable and partial runs, the
schema-version gate, ``validate_run(s)`` and ``RunCheck``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog import validate as v
from evalkit.runlog.validate import RunCheck
from evalkit.runlog.validate.problem import Problem

from tests.support.run_tables import POLICY, copy_run


def edit_meta(run: Path, **changes) -> None:
    meta = json.loads((run / "run.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    (run / "run.json").write_text(json.dumps(meta))


# ----------------------------------------------------------------------------- drivers


def test_inspect_run_of_a_missing_directory(tmp_path):
    check = v.inspect_run(tmp_path / "nope")
    assert check.meta is None and check.run == "nope"
    assert [(p.file, p.message, p.fix) for p in check.problems] == [
        (str(tmp_path / "nope"), "run directory does not exist", "pass an existing run directory")]


def test_inspect_run_of_a_directory_it_may_not_search(monkeypatch, tmp_path):
    from evalkit.runlog.io import UnreadableRun

    target = tmp_path / "locked"
    real_is_dir = Path.is_dir

    def is_dir(self):
        if self == target:
            raise PermissionError(13, "Permission denied")
        return real_is_dir(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    check = v.inspect_run(target)
    assert [(p.run, p.file, p.message, p.fix, p.kind) for p in check.problems] == [
        ("locked", str(target), "cannot read: Permission denied", UnreadableRun.READ_FIX,
         "unreadable")]


def test_inspect_run_with_an_unreadable_run_json(monkeypatch, tmp_path):
    from evalkit.runlog.io import UnreadableRun

    run = copy_run(tmp_path)

    def denied(run_dir):
        raise UnreadableRun.from_os_error(PermissionError(13, "Permission denied"),
                                          Path(run_dir) / "run.json")

    monkeypatch.setattr(v, "read_meta", denied)
    check = v.inspect_run(run)
    assert [(p.file, p.message, p.fix, p.kind) for p in check.problems] == [
        (str(run / "run.json"), "cannot read: Permission denied", UnreadableRun.READ_FIX,
         "unreadable")]
    assert check.meta is None


def test_inspect_run_with_run_json_that_is_not_json(tmp_path):
    run = copy_run(tmp_path)
    (run / "run.json").write_text("{not json")
    check = v.inspect_run(run)
    (p,) = check.problems
    assert p.file == str(run / "run.json") and p.column is None and p.kind == "format"
    assert p.message.startswith("run.json is not valid JSON")
    assert p.fix == "rewrite the run or repair the JSON"
    assert check.meta is None and check.tables == {}


def test_inspect_run_names_the_run_by_its_run_id(tmp_path):
    run = copy_run(tmp_path, dest="renamed")
    check = v.inspect_run(run)
    assert check.run == POLICY
    assert [(p.run, p.column) for p in check.problems] == [(POLICY, "run_id")]
    edit_meta(run, run_id="")
    check = v.inspect_run(run)
    assert check.run == "renamed" and [p.column for p in check.problems] == ["run_id"]


def test_inspect_run_reads_every_present_table(tmp_path):
    check = v.inspect_run(copy_run(tmp_path))
    assert check.problems == [] and not check.incomplete and check.errors == []
    assert sorted(check.tables) == ["merges", "requests", "steps"]
    assert check.meta["run_id"] == POLICY


@pytest.mark.parametrize("version, unknown", [(1, False), (2, True), (0, True), ("1", True)])
def test_schema_version_gate(tmp_path, version, unknown):
    run = copy_run(tmp_path)
    edit_meta(run, schema_version=version, policy="")
    check = v.inspect_run(run)
    if unknown:
        (p,) = check.problems
        assert p.column == "schema_version" and check.tables == {}
        assert p.message == f"unknown schema_version {version!r}; this evalkit reads 1"
    else:
        assert [p.column for p in check.problems] == ["policy"]
        assert sorted(check.tables) == ["merges", "requests", "steps"]


def test_missing_schema_version_is_a_missing_key_not_an_unknown_version(tmp_path):
    run = copy_run(tmp_path)
    edit_meta(run, schema_version=None)
    check = v.inspect_run(run)
    assert [(p.column, p.message) for p in check.problems] == [
        ("schema_version", "required key is missing")]
    assert sorted(check.tables) == ["merges", "requests", "steps"]


def test_incomplete_run_is_excluded_unless_asked(tmp_path):
    run = copy_run(tmp_path)
    edit_meta(run, complete=False, error="x" * 600)
    (pq.read_table(run / "requests.parquet"))
    check = v.inspect_run(run)
    (p,) = check.problems
    assert check.incomplete and p.kind == "incomplete" and p.column == "complete"
    assert p.message == (f"incomplete run (complete: false) ({'x' * 500}): excluded, never "
                         "audited")
    assert check.tables == {}
    check = v.inspect_run(run, include_incomplete=True)
    assert check.problems == [] and not check.incomplete
    assert sorted(check.tables) == ["merges", "requests", "steps"]
    edit_meta(run, error=None)
    (p,) = v.inspect_run(run).problems
    assert p.message == "incomplete run (complete: false): excluded, never audited"


def test_inspect_run_checks_steps(tmp_path):
    run = copy_run(tmp_path)
    path = run / "steps.parquet"
    steps = pq.read_table(path).to_pandas()
    steps.loc[1, "end_s"] = steps.loc[1, "start_s"] - 1.0
    pq.write_table(pa.Table.from_pandas(steps, preserve_index=False), path)
    problems = v.validate_run(run)
    assert [(Path(p.file).name, p.column) for p in problems] == [("steps.parquet", "end_s")]
    assert problems[0].message == "step end_s before start_s: 1 row(s), e.g. row 1"


def test_validate_run_lists_errors_before_warnings(tmp_path):
    run = copy_run(tmp_path)
    path = run / "requests.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[0, "sent_s"] = df.loc[0, "arrival_s"] - 0.5         # warning, found first
    df.loc[3, "prompt_tokens"] = -1                            # error, found later
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    problems = v.validate_run(run)
    assert [(p.severity, p.column) for p in problems] == [
        ("error", "prompt_tokens"), ("warning", "sent_s")]
    check = v.inspect_run(run)
    assert [p.severity for p in check.problems] == ["warning", "error"]
    report = v.validate_runs(tmp_path)
    assert [p.severity for p in report.problems] == ["error", "warning"]
    assert report.ok is False and len(report.warnings) == 1 and len(report.errors) == 1


def test_validate_runs_calls_on_run_with_tables_then_drops_them(tmp_path):
    copy_run(tmp_path)
    copy_run(tmp_path, "fixture-s0-no_sync")
    seen = []

    def on_run(check):
        seen.append((check.run, sorted(check.tables)))

    for threads in (1, 2):
        seen.clear()
        report = v.validate_runs(tmp_path, on_run=on_run, threads=threads)
        assert sorted(seen) == [("fixture-s0-fixed_h", ["merges", "requests", "steps"]),
                                ("fixture-s0-no_sync", ["merges", "requests", "steps"])]
        assert report.runs == ["fixture-s0-fixed_h", "fixture-s0-no_sync"]
        assert report.ok and report.problems == []


def test_validate_runs_reports_a_duplicate_run_id(tmp_path):
    copy_run(tmp_path)
    copy_run(tmp_path, dest="copy")
    report = v.validate_runs(tmp_path)
    dup = [p for p in report.problems if p.message == "run_id used by 2 directories"]
    assert len(dup) == 1 and dup[0].run == POLICY and dup[0].column == "run_id"
    assert dup[0].file == f"{tmp_path / 'copy'}, {tmp_path / POLICY}"


def test_run_check_properties():
    problems = [Problem("r", None, None, "m", "f", severity="warning"),
                Problem("r", None, None, "m", "f", kind="incomplete")]
    check = RunCheck(Path("r"), "r", None, problems)
    assert check.incomplete and check.errors == [problems[1]]
    check = RunCheck(Path("r"), "r", None, problems[:1])
    assert not check.incomplete and check.errors == []
