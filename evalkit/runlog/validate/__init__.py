"""Check run directories against the run-log format (:mod:`evalkit.runlog.schema`).

:func:`validate_run` lists every problem of one run; :func:`validate_runs` checks a whole
RUNS_DIR, including what only shows across runs (no runs at all, duplicate run ids, mixed
schema versions, directories without ``run.json``, leftovers of interrupted writes).

A run marked ``complete: false`` gets one problem of kind ``"incomplete"``: it is excluded,
never audited, and its tables are not checked.  A run (or a directory below RUNS_DIR) that
cannot be read for lack of permission gets an error of kind ``"unreadable"``: it is never
skipped silently -- ``validate`` fails, and the audit lists it as excluded with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from evalkit.errors import InputError
from evalkit.fsutil import map_ordered
from evalkit.runlog.io import EnvironmentFailure, Run, UnreadableRun, read_meta, read_run
from evalkit.runlog.schema import SUPPORTED_SCHEMA_VERSIONS, TABLES
from evalkit.runlog.validate.meta import _check_meta
from evalkit.runlog.validate.problem import Problem, _nonempty_str
from evalkit.runlog.validate.store import ValidationReport, _cross_run, _start_report
from evalkit.runlog.validate.tables import (_check_merges, _check_requests, _check_steps,
                                            _read_table)

__all__ = ["RunCheck", "inspect_run", "read_valid_run", "validate_run", "validate_runs"]


@dataclass
class RunCheck:
    """The outcome of checking one run, with the tables that were read (Arrow) and the
    columns the checks converted to numpy (``arrays[table][column]``; times float64 with
    NaN for nulls, ``ok`` bool), so that the summary converts nothing twice."""

    run_dir: Path
    run: str
    meta: dict | None
    problems: list[Problem]
    tables: dict[str, pa.Table] = field(default_factory=dict, repr=False)
    arrays: dict[str, dict] = field(default_factory=dict, repr=False)

    @property
    def incomplete(self) -> bool:
        return any(p.kind == "incomplete" for p in self.problems)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


def inspect_run(run_dir: str | os.PathLike, *, include_incomplete: bool = False) -> RunCheck:
    """Check one run and keep the Arrow tables read (used by the summary to read once)."""
    run_dir = Path(run_dir)
    run = run_dir.name
    out: list[Problem] = []
    try:
        is_dir = run_dir.is_dir()
    except OSError as exc:       # e.g. a parent directory without search permission
        out.append(Problem(run, str(run_dir), None, f"cannot read: {exc.strerror or exc}",
                           UnreadableRun.READ_FIX, kind="unreadable"))
        return RunCheck(run_dir, run, None, out)
    if not is_dir:
        out.append(Problem(run, str(run_dir), None, "run directory does not exist",
                           "pass an existing run directory"))
        return RunCheck(run_dir, run, None, out)
    meta_path = run_dir / "run.json"
    try:
        meta = read_meta(run_dir)
    except EnvironmentFailure:          # the run was not judged: never a problem of the run
        raise
    except UnreadableRun as exc:
        out.append(Problem(run, str(meta_path), None, exc.message, exc.fix, kind="unreadable"))
        return RunCheck(run_dir, run, None, out)
    except InputError as exc:
        out.append(Problem(run, str(meta_path), None, exc.message, exc.fix or "rewrite the run"))
        return RunCheck(run_dir, run, None, out)
    if _nonempty_str(meta.get("run_id")):
        run = meta["run_id"]
    version = meta.get("schema_version")
    # type() and not `in`: true == 1 in Python, and a boolean is no version
    if "schema_version" in meta and (type(version) is not int
                                     or version not in SUPPORTED_SCHEMA_VERSIONS):
        out.append(Problem(run, str(meta_path), "schema_version",
                           f"unknown schema_version {version!r}; this evalkit reads "
                           f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))}",
                           "upgrade evalkit, or rewrite the run in a supported version"))
        return RunCheck(run_dir, run, meta, out)
    if meta.get("complete") is False and not include_incomplete:
        reason = f" ({str(meta['error'])[:500]})" if meta.get("error") else ""
        out.append(Problem(run, str(meta_path), "complete",
                           f"incomplete run (complete: false){reason}: excluded, never audited",
                           "rerun it to completion, or remove the directory", kind="incomplete"))
        return RunCheck(run_dir, run, meta, out)
    out.extend(_check_meta(meta, run_dir, run))
    tables: dict[str, pa.Table] = {}
    for name in TABLES:
        table = _read_table(run, run_dir, name, out)
        if table is not None:
            tables[name] = table
    arrays = {}
    if "requests" in tables:
        arrays["requests"] = _check_requests(run, run_dir, tables["requests"], meta, out)
    if "merges" in tables:
        arrays["merges"] = _check_merges(run, run_dir, tables["merges"], meta, out)
    if "steps" in tables:
        arrays["steps"] = _check_steps(run, run_dir, tables["steps"], out)
    return RunCheck(run_dir, run, meta, out, tables,
                    {name: got for name, got in arrays.items() if got is not None})


def validate_run(run_dir: str | os.PathLike, *, include_incomplete: bool = False) -> list[Problem]:
    """Every problem of one run directory (errors first); empty when the run is valid."""
    problems = inspect_run(run_dir, include_incomplete=include_incomplete).problems
    return sorted(problems, key=lambda p: p.severity != "error")


def read_valid_run(run_dir: str | os.PathLike) -> Run:
    """Check one run (:func:`validate_run`), raise its first error, then read it."""
    errors = [p for p in validate_run(run_dir) if p.severity == "error"]
    if errors:
        raise errors[0].as_error()
    return read_run(run_dir)


def validate_runs(runs_dir: str | os.PathLike, *, include_incomplete: bool = False,
                  on_run=None, threads: int | None = 1) -> ValidationReport:
    """Check every run under ``runs_dir``; ``on_run(check)`` sees each :class:`RunCheck`.

    With ``threads > 1`` (None: every core) runs are inspected -- and ``on_run`` is called --
    in worker threads, a few runs at a time; ``on_run`` must then be thread-safe.  The
    report (problems in run order) is the same for any thread count.
    """
    report, run_dirs = _start_report(runs_dir)

    def inspect(run_dir):
        check = inspect_run(run_dir, include_incomplete=include_incomplete)
        if on_run is not None:
            on_run(check)
        check.tables = check.arrays = {}    # used by the caller; keep memory flat
        return check

    seen = []
    for check in map_ordered(inspect, run_dirs, threads):
        report.runs.append(check.run)
        report.problems.extend(sorted(check.problems, key=lambda p: p.severity != "error"))
        seen.append((check.run_dir, check.run, check.meta))
    _cross_run(report, seen)
    return report
