"""Error codes of the run-log invariants and the FORMAT.md section each belongs to.

:data:`INVARIANTS` is the list ``FORMAT.md`` §5 is generated from.  :func:`classify` maps a
:class:`~evalkit.runlog.validate.Problem` to its invariant by the file it names, its kind
and the start of its message; a problem no rule knows still gets the section of its file
(:func:`section_of`), so ``evalkit validate`` names a section for every line it prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BY_CODE", "INVARIANTS", "SECTIONS", "classify", "spec_ref"]

SPEC = "FORMAT.md"

SECTIONS = {
    "1": "Scope and versions",
    "2": "Layout: RUNS_DIR and run directories",
    "3": "run.json",
    "3.1": "run.json keys",
    "3.2": "run.json invariants",
    "3.3": "What the audit needs of a campaign",
    "4": "Parquet tables",
    "4.1": "Rules for every table",
    "4.2": "requests.parquet",
    "4.3": "merges.parquet",
    "4.4": "steps.parquet",
    "4.5": "signals.parquet",
    "4.6": "decisions.parquet",
    "5": "Invariants and error codes",
    "6": "Machine-readable schemas",
}


@dataclass(frozen=True)
class Invariant:
    code: str
    section: str
    severity: str           # "error" | "warning" | "excluded"
    rule: str
    file: str               # "run.json" | "<table>.parquet" | "*.parquet" | "RUNS_DIR"
    pattern: str            # regex matched at the start of the problem's message

    def matches(self, file_kind: str, kind: str, message: str) -> bool:
        if self.file not in (file_kind, "*") and not (
                self.file == "*.parquet" and file_kind.endswith(".parquet")):
            return False
        if self.code == "L08":
            return kind == "unreadable"
        if self.code == "M03":
            return kind == "incomplete"
        return re.match(self.pattern, message) is not None


INVARIANTS: tuple[Invariant, ...] = (
    # layout (§2)
    Invariant("L01", "2", "error", "RUNS_DIR exists and is a directory", "RUNS_DIR",
              r"RUNS_DIR |run directory does not exist"),
    Invariant("L02", "2", "error", "RUNS_DIR holds at least one run (a run.json below it)",
              "RUNS_DIR", r"no runs found"),
    Invariant("L03", "2", "error", "a directory with Parquet files has a run.json "
              "(run.json is written last)", "run.json", r"directory holds Parquet files"),
    Invariant("L04", "2", "warning", "hidden leftovers of an interrupted write "
              "(.<id>.tmp-*, .<id>.old-* beside <id>, .<id>.damaged-*) are ignored", "*",
              r"left by an interrupted write|a damaged copy|the previous copy of run"),
    Invariant("L05", "2", "error", "a run moved aside for replacement (.<id>.old-*) whose "
              "replacement never landed is missing", "*", r"run \S+ was moved aside"),
    Invariant("L06", "2", "error", "run ids are unique within RUNS_DIR", "*",
              r"run_id used by"),
    Invariant("L07", "1", "error", "all runs of one RUNS_DIR have one schema_version", "*",
              r"runs mix schema versions"),
    Invariant("L08", "2", "error", "every path below RUNS_DIR is readable (an unreadable run "
              "is never skipped silently)", "*", r""),
    # run.json (§3)
    Invariant("M01", "3", "error", "run.json is a JSON object of at most the size limit",
              "run.json", r"run\.json "),
    Invariant("M02", "1", "error", "schema_version is one this reader supports", "run.json",
              r"unknown schema_version"),
    Invariant("M03", "3.2", "excluded", "complete is true; an incomplete run is listed and "
              "excluded, its tables are not checked", "run.json", r""),
    Invariant("M04", "3.1", "error", "every required key is present", "run.json",
              r"required key is missing"),
    Invariant("M06", "3.2", "error", "run_id equals the directory name", "run.json",
              r"run_id .* differs from the directory name"),
    Invariant("M07", "3.2", "error", "corridor.min_gap_s <= corridor.max_gap_s", "run.json",
              r"min_gap_s \S+ > max_gap_s"),
    Invariant("M08", "3.2", "error", "a matched_random run has draw and matched_to; no other "
              "role has them", "run.json",
              r"a matched_random run|only matched_random runs have"),
    Invariant("M09", "3.2", "error", "a no_sync run has policy 'no_sync' and oracle false, "
              "and policy 'no_sync' implies role no_sync", "run.json",
              r"role no_sync but|policy no_sync but|a no_sync run cannot"),
    Invariant("M05", "3.1", "error", "every key has its type and value rule (§3.1 table)",
              "run.json", r"must be|unknown role|unknown backend|missing or not a string|"
              r"\S+ is outside the 64-bit"),
    # every table (§4.1)
    Invariant("T01", "4.1", "error", "requests.parquet and merges.parquet exist",
              "*.parquet", r"\w+\.parquet is missing"),
    Invariant("T02", "4.1", "error", "each table is readable Parquet", "*.parquet",
              r"cannot read Parquet"),
    Invariant("T03", "4.1", "error", "every column of the table's schema is present",
              "*.parquet", r"column is missing from"),
    Invariant("T04", "4.1", "error", "every column has its Arrow type (int64, double, bool, "
              "string; integers are accepted for double; an all-null column passes)",
              "*.parquet", r"has type"),
    Invariant("T05", "4.1", "error", "no nulls in a non-nullable column", "*.parquet",
              r"\d+ null value\(s\) in a required column"),
    # requests (§4.2)
    Invariant("R01", "4.2", "error", "at least one request", "requests.parquet",
              r"requests\.parquet has no rows"),
    Invariant("R02", "4.2", "error", "request_id unique", "requests.parquet",
              r"\d+ duplicate request_id"),
    Invariant("R03", "4.2", "error", "times finite and >= 0 (first_token_s, end_s may be null)",
              "requests.parquet", r"NaN time|infinite time|negative time"),
    Invariant("R04", "4.2", "error", "arrival_s <= end_s, sent_s <= first_token_s <= end_s "
              "(1e-9 s slack)", "requests.parquet",
              r"end_s before arrival_s|end_s before sent_s|first_token_s before sent_s|"
              r"end_s before first_token_s"),
    Invariant("R05", "4.2", "warning", "sent_s >= arrival_s - 1 ms (an open-loop client "
              "sends at the scheduled time)", "requests.parquet", r"sent_s earlier than"),
    Invariant("R06", "4.2", "error", "ok = true implies end_s not null", "requests.parquet",
              r"ok=True but end_s is null"),
    Invariant("R07", "4.2", "error", "token counts >= 0", "requests.parquet",
              r"negative token count"),
    Invariant("R08", "4.2", "error", "times are seconds, not milliseconds (arrivals within "
              "about the horizon, median latency within 100x the e2e SLO)",
              "requests.parquet", r"arrivals reach|median latency"),
    # merges (§4.3)
    Invariant("G01", "4.3", "error", "start_s and end_s finite and >= 0", "merges.parquet",
              r"NaN time|infinite time|negative time"),
    Invariant("G02", "4.3", "error", "a no_sync run has no merges", "merges.parquet",
              r"a no_sync run has"),
    Invariant("G03", "4.3", "error", "merge_idx unique", "merges.parquet",
              r"duplicate merge_idx"),
    Invariant("G04", "4.3", "error", "end_s > start_s", "merges.parquet",
              r"reversed or empty merge window"),
    Invariant("G05", "4.3", "error", "merge windows do not overlap (each starts after the "
              "previous one ended)", "merges.parquet", r"\d+ overlapping merge window"),
    Invariant("G06", "4.3", "error", "durations are seconds, not milliseconds (median "
              "within 100x merge_duration_s)", "merges.parquet", r"median merge duration"),
    # steps (§4.4)
    Invariant("S01", "4.4", "error", "start_s and end_s finite and >= 0", "steps.parquet",
              r"NaN time|infinite time|negative time"),
    Invariant("S02", "4.4", "error", "end_s >= start_s", "steps.parquet",
              r"step end_s before start_s"),
)

BY_CODE = {inv.code: inv for inv in INVARIANTS}
_TABLE_SECTION = {"requests": "4.2", "merges": "4.3", "steps": "4.4", "signals": "4.5",
                  "decisions": "4.6"}


def file_kind(path: str | None) -> str:
    """``run.json``, ``<table>.parquet`` or ``RUNS_DIR`` (a directory or nothing named)."""
    if not path:
        return "RUNS_DIR"
    base = str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    if base == "run.json" or base.endswith(".parquet"):
        return base
    return "RUNS_DIR"


def section_of(path: str | None) -> str:
    kind = file_kind(path)
    if kind == "run.json":
        return "3"
    if kind.endswith(".parquet"):
        return _TABLE_SECTION.get(kind[: -len(".parquet")], "4.1")
    return "2"


def classify(problem) -> Invariant | None:
    """The invariant a validation problem breaks (None: no rule knows its message)."""
    kind = file_kind(problem.file)
    for inv in INVARIANTS:
        if inv.matches(kind, problem.kind, problem.message):
            return inv
    return None


def spec_ref(problem) -> str:
    """``"R04, FORMAT.md §4.2 requests.parquet"``: code and section for one problem."""
    inv = classify(problem)
    section = inv.section if inv is not None else section_of(problem.file)
    code = inv.code if inv is not None else "no code"
    return f"{code}, {SPEC} §{section} {SECTIONS[section]}"
