"""Store-level rules: the RUNS_DIR listing, leftovers of interrupted writes, cross-run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from evalkit.errors import InputError
from evalkit.runlog.io import LINK_FIX, RunListing, UnreadableRun, leftover_kind, list_runs
from evalkit.runlog.validate.problem import Problem

__all__ = ["ValidationReport"]


@dataclass
class ValidationReport:
    """Everything :func:`validate_runs` found under one RUNS_DIR."""

    runs_dir: Path
    run_dirs: list[Path]
    problems: list[Problem]
    runs: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def excluded(self) -> list[str]:
        """Runs marked incomplete: listed, never audited."""
        return [p.run for p in self.problems if p.kind == "incomplete"]

    @property
    def unreadable(self) -> list[Problem]:
        """Runs (or directories) evalkit may not read: errors here, exclusions in the audit."""
        return [p for p in self.problems if p.kind == "unreadable"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary_line(self) -> str:
        errors = [p for p in self.errors if p.kind != "incomplete"]
        verdict = "valid" if self.ok else "INVALID"
        unreadable = len({p.file for p in self.unreadable})
        return (f"{verdict}: {len(self.run_dirs)} run(s) checked in {self.runs_dir}; "
                f"{len(errors)} error(s) in {len({p.run for p in errors})} run(s), "
                f"{len(self.warnings)} warning(s), {len(self.excluded)} incomplete run(s) excluded"
                + (f", {unreadable} unreadable path(s)" if unreadable else ""))

    def raise_if_invalid(self) -> None:
        if self.errors:
            raise self.errors[0].as_error()


def _leftover_problem(path: Path) -> Problem:
    """A hidden leftover of an interrupted write, a replaced run or a repair, and its fix."""
    run_id, tag = leftover_kind(path.name)
    target = path.parent / run_id
    if tag == "tmp":
        return Problem(path.name, str(path), None,
                       f"left by an interrupted write of run {run_id} (a process was killed "
                       "while writing it); ignored, nothing published is in it",
                       f"delete it, or resume the sweep (`evalkit sweep` removes it)",
                       severity="warning", kind="layout")
    if tag == "damaged":
        return Problem(path.name, str(path), None,
                       f"a damaged copy of run {run_id}, moved aside when the sweep re-ran it; "
                       "ignored", "inspect it if you wish, then delete it",
                       severity="warning", kind="layout")
    if tag == "replaced":
        return Problem(path.name, str(path), None,
                       f"an earlier copy of run {run_id}, moved aside when an import replaced "
                       "it (--replace); ignored",
                       f"inspect it if you wish, then delete it; to bring it back: mv "
                       f"{run_id} .{run_id}.unwanted && mv {path.name} {run_id} "
                       f"(in {path.parent})", severity="warning", kind="layout")
    try:
        landed = target.exists()
    except OSError:
        landed = False
    if landed:
        return Problem(path.name, str(path), None,
                       f"the previous copy of run {run_id}, left when its replacement was "
                       "published; ignored",
                       f"delete it (run {run_id} is in place), or resume the sweep, which "
                       "removes it", severity="warning", kind="layout")
    return Problem(run_id, str(path), None,
                   f"run {run_id} was moved aside to be replaced and the replacement never "
                   "landed (a process was killed between two renames): the run is missing",
                   f"restore it: mv {path.name} {run_id} (in {path.parent}), or resume the "
                   "sweep, which restores it", kind="layout")


def _layout_problems(listing: RunListing) -> list[Problem]:
    """Unlistable directories, directories with tables but no run.json, leftovers."""
    out = []
    for path, reason in listing.unreadable:
        out.append(Problem(path.name, str(path), None,
                           f"{reason}: any run inside is not checked and would be missing",
                           UnreadableRun.READ_FIX, kind="unreadable"))
    for path, reason in listing.refused:
        out.append(Problem(path.name, str(path), None,
                           f"{reason}: not followed, so any run there is not checked and "
                           "would be missing", LINK_FIX, kind="layout"))
    for run_dir in listing.orphans:
        out.append(Problem(run_dir.name, str(run_dir / "run.json"), None,
                           "directory holds Parquet files but no run.json",
                           "rerun the run (run.json is written last), or remove the directory",
                           kind="layout"))
    out.extend(_leftover_problem(p) for p in listing.leftovers)
    return out


def _start_report(runs_dir: str | os.PathLike):
    """A report holding the RUNS_DIR-level problems, and the run directories to check."""
    root = Path(runs_dir)
    report = ValidationReport(root, [], [])
    try:
        listing = list_runs(root)
    except InputError as exc:
        report.problems.append(Problem(str(root), str(root), None,
                                       "RUNS_DIR " + _root_trouble(root, exc), exc.fix or
                                       "pass the directory that holds the run directories"))
        return report, []
    report.run_dirs = listing.run_dirs
    report.problems.extend(_layout_problems(listing))
    if not report.run_dirs and not listing.unreadable and not listing.refused:
        report.problems.append(Problem(str(root), str(root), None,
                                       "no runs found (no run.json below RUNS_DIR)",
                                       "pass the directory that holds the run directories"))
    return report, report.run_dirs


def _root_trouble(root: Path, exc: InputError) -> str:
    try:
        if not root.exists():
            return "does not exist"
        if not root.is_dir():
            return "is not a directory"
    except OSError:
        pass
    return exc.message


def _cross_run(report: ValidationReport, checks: list[tuple[Path, str, dict | None]]) -> None:
    by_id: dict[str, list[Path]] = {}
    versions: dict[object, list[str]] = {}
    for run_dir, run, meta in checks:
        by_id.setdefault(run, []).append(run_dir)
        if meta is not None and "schema_version" in meta:
            versions.setdefault(meta["schema_version"], []).append(run)
    for run, dirs in sorted(by_id.items()):
        if len(dirs) > 1:
            report.problems.append(Problem(run, ", ".join(map(str, dirs)), "run_id",
                                           f"run_id used by {len(dirs)} directories",
                                           "run ids must be unique within RUNS_DIR"))
    if len(versions) > 1:
        listing = "; ".join(f"v{v}: {', '.join(sorted(r))}" for v, r in
                            sorted(versions.items(), key=lambda kv: str(kv[0])))
        report.problems.append(Problem(str(report.runs_dir), None, "schema_version",
                                       f"runs mix schema versions ({listing})",
                                       "rewrite all runs of one RUNS_DIR in one schema version"))
