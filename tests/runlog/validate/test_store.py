"""Store-level validation rules: duplicates and schema versions across runs, the layout of a
runs directory, orphans, leftovers and the report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalkit.runlog import validate as v
from evalkit.runlog.validate import store as vstore
from evalkit.runlog.validate import tables as vtables
from evalkit.runlog.validate.problem import Problem
from evalkit.runlog.validate.store import ValidationReport

from tests.support.run_tables import FIXTURES, POLICY, copy_run, err, found


# ----------------------------------------------------------------------------- across runs


def _report(root="R"):
    return ValidationReport(Path(root), [], [])


def test_cross_run_duplicates_and_schema_versions():
    report = _report()
    vstore._cross_run(report, [(Path("a"), "r1", {"schema_version": 1}),
                          (Path("b"), "r2", {"schema_version": 1}),
                          (Path("c"), "r3", None)])
    assert report.problems == []
    vstore._cross_run(report, [(Path("a"), "r1", {"schema_version": 1}),
                          (Path("b"), "r1", {})])
    assert found(report.problems) == [err("run_id", "run_id used by 2 directories")]
    assert report.problems[0].file == "a, b" and report.problems[0].run == "r1"
    report = _report()
    vstore._cross_run(report, [(Path("a"), "rb", {"schema_version": 2}),
                          (Path("b"), "ra", {"schema_version": 1}),
                          (Path("c"), "rc", {"schema_version": 1}),
                          (Path("d"), "rd", None)])
    (p,) = report.problems
    assert (p.run, p.file, p.column) == ("R", None, "schema_version")
    assert p.message == "runs mix schema versions (v1: ra, rc; v2: rb)"


def test_layout_problems_of_a_runs_dir(tmp_path):
    report = v.validate_runs(tmp_path / "missing")
    (p,) = report.problems
    assert p.message == "RUNS_DIR does not exist" and p.run == str(tmp_path / "missing")
    assert p.fix == "pass the directory that holds the run directories"
    (tmp_path / "file").write_text("x")
    (p,) = v.validate_runs(tmp_path / "file").problems
    assert p.message == "RUNS_DIR is not a directory"
    (tmp_path / "empty").mkdir()
    (p,) = v.validate_runs(tmp_path / "empty").problems
    assert p.message == "no runs found (no run.json below RUNS_DIR)"
    assert p.file == str(tmp_path / "empty") and not v.validate_runs(tmp_path / "empty").ok


def test_orphans_and_leftovers_are_reported_beside_the_runs(tmp_path):
    root = tmp_path / "runs"
    copy_run(root)
    orphan = root / "orphan"
    orphan.mkdir()
    shutil.copy(FIXTURES / POLICY / "requests.parquet", orphan / "requests.parquet")
    (root / f".{POLICY}.tmp-1").mkdir()
    (root / ".gone.old-1").mkdir()
    report = v.validate_runs(root)
    got = sorted((p.run, p.kind, p.severity) for p in report.problems)
    assert got == [(f".{POLICY}.tmp-1", "layout", "warning"), ("gone", "layout", "error"),
                   ("orphan", "layout", "error")]
    assert report.runs == [POLICY]


def test_layout_problems_of_a_listing():
    from evalkit.runlog.io import RunListing, UnreadableRun

    listing = RunListing(Path("R"), unreadable=[(Path("R/locked"), "cannot list it")],
                         orphans=[Path("R/orphan")])
    got = vstore._layout_problems(listing)
    assert [(p.run, p.file, p.message, p.kind, p.severity) for p in got] == [
        ("locked", "R/locked", "cannot list it: any run inside is not checked and would be "
         "missing", "unreadable", "error"),
        ("orphan", "R/orphan/run.json", "directory holds Parquet files but no run.json",
         "layout", "error")]
    assert got[0].fix == UnreadableRun.READ_FIX


def test_a_link_not_followed_is_a_layout_problem(tmp_path):
    from evalkit.runlog.io import LINK_FIX

    outside = tmp_path / "elsewhere"
    copy_run(outside)
    root = tmp_path / "runs"
    copy_run(root)
    (root / "borrowed").symlink_to(outside / POLICY, target_is_directory=True)
    report = v.validate_runs(root)
    (p,) = report.problems
    assert (p.run, p.kind, p.severity) == ("borrowed", "layout", "error")
    assert "not followed, so any run there is not checked" in p.message
    assert p.fix == LINK_FIX and report.runs == [POLICY]


@pytest.mark.parametrize("run_dirs, unreadable, no_runs", [
    ([], [], True), ([Path("R/a")], [], False), ([], [(Path("R/x"), "denied")], False),
    ([Path("R/a")], [(Path("R/x"), "denied")], False)])
def test_no_runs_found_only_when_nothing_is_there(monkeypatch, run_dirs, unreadable, no_runs):
    from evalkit.runlog.io import RunListing

    monkeypatch.setattr(vstore, "list_runs", lambda root: RunListing(root, run_dirs=list(run_dirs),
                                                                  unreadable=list(unreadable)))
    report, dirs = vstore._start_report("R")
    assert dirs == run_dirs and report.run_dirs == run_dirs
    messages = [p.message for p in report.problems]
    assert ("no runs found (no run.json below RUNS_DIR)" in messages) is no_runs
    assert len(messages) == len(unreadable) + no_runs


def test_unlistable_table_path_is_unreadable_not_missing(monkeypatch, tmp_path):
    real_exists = Path.exists

    def exists(self, *args, **kwargs):
        if self.name == "merges.parquet":
            raise PermissionError(13, "Permission denied")
        return real_exists(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    out: list[Problem] = []
    assert vtables._read_table("r", tmp_path, "merges", out) is None
    assert found(out) == [(None, "cannot read: Permission denied", "error", "unreadable")]


def test_leftover_of_each_kind(tmp_path):
    (tmp_path / "r1").mkdir()
    tmp = vstore._leftover_problem(tmp_path / ".r1.tmp-9")
    assert (tmp.run, tmp.severity, tmp.kind) == (".r1.tmp-9", "warning", "layout")
    assert tmp.message.startswith("left by an interrupted write of run r1")
    damaged = vstore._leftover_problem(tmp_path / ".r1.damaged-9")
    assert damaged.severity == "warning" and damaged.message.startswith("a damaged copy of run r1")
    old_landed = vstore._leftover_problem(tmp_path / ".r1.old-9")
    assert old_landed.severity == "warning" and old_landed.run == ".r1.old-9"
    assert old_landed.message.startswith("the previous copy of run r1")
    old_lost = vstore._leftover_problem(tmp_path / ".r2.old-9")
    assert (old_lost.run, old_lost.severity) == ("r2", "error")
    assert old_lost.fix.startswith("restore it: mv .r2.old-9 r2")


def test_report_properties_and_summary_line():
    problems = [
        Problem("a", "fa", None, "m", "f"),
        Problem("a", "fa2", None, "m", "f"),
        Problem("b", "fb", None, "m", "f", severity="warning"),
        Problem("c", "fc", "complete", "m", "f", kind="incomplete"),
        Problem("d", "fd", None, "m", "f", kind="unreadable"),
        Problem("d", "fd", None, "m", "f", kind="unreadable"),
        Problem("e", "fe", None, "m", "f", kind="unreadable"),
    ]
    report = ValidationReport(Path("R"), [Path("a"), Path("b"), Path("c")], problems)
    assert report.errors == [problems[i] for i in (0, 1, 3, 4, 5, 6)]
    assert report.warnings == [problems[2]]
    assert report.excluded == ["c"]
    assert report.unreadable == problems[4:]
    assert not report.ok
    assert report.summary_line() == (
        "INVALID: 3 run(s) checked in R; 5 error(s) in 3 run(s), 1 warning(s), "
        "1 incomplete run(s) excluded, 2 unreadable path(s)")
    ok = ValidationReport(Path("R"), [Path("a")], [problems[2]])
    assert ok.ok and ok.summary_line() == (
        "valid: 1 run(s) checked in R; 0 error(s) in 0 run(s), 1 warning(s), "
        "0 incomplete run(s) excluded")
    ok.raise_if_invalid()
    with pytest.raises(Exception) as info:
        report.raise_if_invalid()
    assert "run a: m" in str(info.value)
