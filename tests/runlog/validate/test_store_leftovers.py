"""Store-level validation on a copy of the fixture runs: mixed schema versions, errors and
warnings, each kind of leftover."""

from __future__ import annotations

from pathlib import Path

from tests.support.fixture_run import RUN, edit_meta


def test_mixed_schema_versions_listed_in_version_order(copy_fixture):
    from evalkit.runlog.validate import validate_runs

    runs = copy_fixture("runs")
    edit_meta(runs / RUN, lambda m: m.update({"schema_version": 2}))
    mixed = [p for p in validate_runs(runs).errors if "mix schema versions" in p.message]
    assert len(mixed) == 1
    message = mixed[0].message
    assert 0 <= message.index("v1: ") < message.index("v2: ")
    assert f"v2: {RUN})" in message


def test_report_splits_errors_and_warnings():
    from evalkit.runlog.validate.problem import Problem
    from evalkit.runlog.validate.store import ValidationReport

    err = Problem("r1", None, "x", "bad", "fix it")
    warn = Problem("r2", None, "y", "odd", "check it", severity="warning")
    report = ValidationReport(runs_dir=Path("runs"), run_dirs=[], problems=[err, warn])
    assert report.errors == [err] and report.warnings == [warn]


def test_each_kind_of_leftover_is_named_for_what_it_is(copy_fixture):
    import shutil

    from evalkit.runlog.validate import validate_runs

    runs = copy_fixture("runs")
    shutil.copytree(runs / RUN, runs / f".{RUN}.tmp-0000abcd")
    shutil.copytree(runs / RUN, runs / f".{RUN}.damaged-0000abcd")
    shutil.copytree(runs / RUN, runs / f".{RUN}.old-0000abcd")         # its run is in place
    gone = "fixture-s1-fixed_h"
    (runs / gone).rename(runs / f".{gone}.old-0000abcd")                # replacement missing
    report = validate_runs(runs)
    by_file = {Path(p.file).name: p for p in report.problems if p.kind == "layout"}
    tmp, dmg, old = (by_file[f".{RUN}.{t}-0000abcd"] for t in ("tmp", "damaged", "old"))
    assert "interrupted write" in tmp.message and tmp.severity == "warning"
    assert "damaged copy" in dmg.message and dmg.severity == "warning"
    assert "previous copy" in old.message and old.severity == "warning"
    lost = by_file[f".{gone}.old-0000abcd"]
    assert "replacement never landed" in lost.message and lost.severity == "error"
    assert lost.run == gone
