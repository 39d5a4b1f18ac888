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

import math
import os
import unicodedata
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit.errors import InputError
from evalkit.fileread import check_regular
from evalkit.limits import INT64_MAX, MAX_HORIZON_S, MAX_LOG_TIME_S, MAX_TOKENS
from evalkit.names import name_problem
from evalkit.runlog.io import (LINK_FIX, RunListing, UnreadableRun, leftover_kind, list_runs,
                              read_meta)
from evalkit.runlog.schema import (BACKENDS, REQUIRED_META, REQUIRED_TABLES, ROLES,
                                   SUPPORTED_SCHEMA_VERSIONS, TABLES)

TIME_TOL_S = 1e-9        # float slack for ordering checks
EARLY_SEND_TOL_S = 1e-3  # sending before the scheduled arrival by more than this is suspicious
MS_FACTOR = 100.0        # "implausible scale": 100x beyond the plausible value ...
MS_PLAUSIBLE = 100.0     # ... while the value / 1000 is within 100x of it
MS_FIX = "looks like milliseconds; divide by 1000 (run-log times are seconds)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run (or with RUNS_DIR as a whole)."""

    run: str
    file: str | None
    column: str | None
    message: str
    fix: str
    severity: str = "error"      # "error" | "warning"
    kind: str = "format"         # "format" | "scale" | "incomplete" | "layout" | "unreadable"

    def as_error(self) -> InputError:
        return InputError(f"run {self.run}: {self.message}", file=self.file,
                          column=self.column, fix=self.fix)

    def format(self) -> str:
        label = "EXCLUDED" if self.kind == "incomplete" else self.severity.upper()
        where = [f"run={self.run}"]
        if self.file:
            where.append(f"file={self.file}")
        if self.column:
            where.append(f"column={self.column}")
        return f"{label:8s} {' '.join(where)}: {self.message} (fix: {self.fix})"


@dataclass
class RunCheck:
    """The outcome of checking one run, with the tables that were read (Arrow)."""

    run_dir: Path
    run: str
    meta: dict | None
    problems: list[Problem]
    tables: dict[str, pa.Table] = field(default_factory=dict, repr=False)

    @property
    def incomplete(self) -> bool:
        return any(p.kind == "incomplete" for p in self.problems)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


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


# ----------------------------------------------------------------------------- run.json


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _nonempty_str(x) -> bool:
    return isinstance(x, str) and bool(x.strip())


def _short(value, limit: int = 60) -> str:
    """repr of a value from a file, cut to ``limit`` characters (hostile values are huge)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 30:
        return f"a {len(str(abs(value)))}-digit integer"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def _check_meta(meta: dict, run_dir: Path, run: str) -> list[Problem]:
    path = str(run_dir / "run.json")
    out: list[Problem] = []

    def bad(key, message, fix, severity="error"):
        out.append(Problem(run, path, key, message, fix, severity))

    for key in REQUIRED_META:
        if key not in meta:
            bad(key, "required key is missing",
                f"add '{key}' to run.json (see evalkit.runlog.schema)")
    has = meta.__contains__

    if has("run_id") and not _nonempty_str(meta["run_id"]):
        bad("run_id", f"must be a non-empty string, got {_short(meta['run_id'])}",
            "set run_id to the directory name")
    elif has("run_id") and meta["run_id"] != run_dir.name:
        bad("run_id", f"run_id {_short(meta['run_id'])} differs from the directory name {run_dir.name!r}",
            "rename the directory or fix run_id; they must be equal")
    for key in ("policy", "regime", "matched_to"):
        if has(key) and key != "matched_to" and not _nonempty_str(meta[key]):
            bad(key, f"must be a non-empty string, got {_short(meta[key])}", f"set {key} to its name")
        elif _nonempty_str(meta.get(key)):
            why = name_problem(unicodedata.normalize("NFKC", meta[key]))
            if why is not None:
                bad(key, f"{key} {meta[key]!r} is refused: {why}",
                    "use a name of visible characters of one script; a name that looks like "
                    "another is another claim in disguise")
    if has("role") and meta["role"] not in ROLES:
        bad("role", f"unknown role {_short(meta['role'])}", f"use one of {', '.join(ROLES)}")
    if has("backend") and meta["backend"] not in BACKENDS:
        bad("backend", f"unknown backend {_short(meta['backend'])}", f"use one of {', '.join(BACKENDS)}")
    if has("seed") and not _is_int(meta["seed"]):
        bad("seed", f"must be an integer, got {_short(meta['seed'])}",
            "write the replication seed as an integer")
    elif has("seed") and not 0 <= meta["seed"] <= INT64_MAX:
        bad("seed", f"{_short(meta['seed'])} is outside [0, 2**63)",
            "write the replication seed as a non-negative 64-bit integer")
    draw = meta.get("draw")
    if draw is not None and not (_is_int(draw) and 0 <= draw <= INT64_MAX):
        bad("draw", f"must be null or an integer in [0, 2**63), got {_short(meta['draw'])}",
            "write the draw index as an integer")
    matched_to = meta.get("matched_to")
    if matched_to is not None and not _nonempty_str(matched_to):
        bad("matched_to", f"must be null or a policy name, got {_short(meta['matched_to'])}",
            "name the policy whose K this draw matches")
    for key in ("oracle", "complete"):
        if has(key) and not isinstance(meta[key], bool):
            bad(key, f"must be true or false, got {_short(meta[key])}", f"write {key} as a JSON boolean")
    for key in ("merge_duration_s", "horizon_s"):
        if has(key) and not (_is_number(meta[key]) and meta[key] > 0):
            bad(key, f"must be a positive number of seconds, got {_short(meta[key])}",
                f"write {key} in seconds")
        elif has(key) and meta[key] > MAX_HORIZON_S:
            bad(key, f"{meta[key]:g} s is beyond the {MAX_HORIZON_S:,.0f} s (30-day) limit",
                f"write {key} in seconds (evalkit.limits.MAX_HORIZON_S)")
    for key in ("evalkit_version", "created_at"):
        if has(key) and not _nonempty_str(meta[key]):
            bad(key, f"must be a string, got {_short(meta[key])}", f"write {key} as a string")
    for key in ("settings", "host", "rng_seeds"):
        if has(key) and not isinstance(meta[key], dict):
            bad(key, f"must be a JSON object, got {type(meta[key]).__name__}",
                f"write {key} as an object")
    if "trace_realisation" in meta and not _nonempty_str(meta["trace_realisation"]):
        bad("trace_realisation", f"must be a non-empty string, got {_short(meta['trace_realisation'])}",
            "remove it (defaults to trace.sha256) or name the request sequence")

    trace = meta.get("trace")
    if has("trace"):
        if not isinstance(trace, dict):
            bad("trace", "must be an object {name, sha256}",
                'write trace as {"name": ..., "sha256": ...}')
        else:
            for sub in ("name", "sha256"):
                if not _nonempty_str(trace.get(sub)):
                    bad(f"trace.{sub}", f"missing or not a string ({_short(trace.get(sub))})",
                        f"record the trace's {sub}")
    slo = meta.get("slo")
    if has("slo"):
        if not isinstance(slo, dict):
            bad("slo", "must be an object {e2e_s, ttft_s, tpot_s}", "write the SLOs in seconds")
        else:
            if not (_is_number(slo.get("e2e_s")) and slo["e2e_s"] > 0):
                bad("slo.e2e_s", f"must be a positive number of seconds, got {_short(slo.get('e2e_s'))}",
                    "set the end-to-end SLO in seconds")
            for sub in ("ttft_s", "tpot_s"):
                val = slo.get(sub)
                if val is not None and not (_is_number(val) and val > 0):
                    bad(f"slo.{sub}", f"must be null or a positive number of seconds, got {_short(val)}",
                        f"set {sub} in seconds or null when that SLO is not used")
    corridor = meta.get("corridor")
    if has("corridor"):
        if not isinstance(corridor, dict):
            bad("corridor", "must be an object {min_gap_s, max_gap_s}",
                "write the corridor in seconds")
        else:
            gaps = [corridor.get("min_gap_s"), corridor.get("max_gap_s")]
            for sub, val in zip(("min_gap_s", "max_gap_s"), gaps):
                if not (_is_number(val) and val >= 0):
                    bad(f"corridor.{sub}", f"must be a number of seconds >= 0, got {_short(val)}",
                        "write the corridor gaps between merge starts in seconds")
            if all(_is_number(g) for g in gaps) and gaps[0] > gaps[1]:
                bad("corridor", f"min_gap_s {gaps[0]} > max_gap_s {gaps[1]}",
                    "swap or fix the corridor gaps")

    # role / draw / matched_to / policy consistency
    role = meta.get("role")
    if role == "matched_random":
        if meta.get("draw") is None:
            bad("draw", "a matched_random run needs its draw index", "set draw to 0, 1, ...")
        if meta.get("matched_to") is None:
            bad("matched_to", "a matched_random run must name the policy whose K it matches",
                "set matched_to to that policy's name")
    elif role in ROLES:
        for key in ("draw", "matched_to"):
            if meta.get(key) is not None:
                bad(key, f"only matched_random runs have {key}; this run's role is {role!r}",
                    f"set {key} to null or fix role")
    if role == "no_sync" and has("policy") and meta["policy"] != "no_sync":
        bad("policy", f"role no_sync but policy {_short(meta['policy'])}",
            "a no_sync run's policy is 'no_sync'")
    if role in ("policy", "matched_random") and meta.get("policy") == "no_sync":
        bad("role", f"policy no_sync but role {role!r}", "set role to 'no_sync'")
    if role == "no_sync" and meta.get("oracle") is True:
        bad("oracle", "a no_sync run cannot be an oracle", "set oracle to false")
    return out


# ----------------------------------------------------------------------------- tables


def _type_ok(kind: str, dtype: pa.DataType) -> bool:
    if pa.types.is_null(dtype):
        return True  # an all-null column; the null check decides
    if kind == "int":
        return pa.types.is_integer(dtype)
    if kind == "float":
        return pa.types.is_floating(dtype) or pa.types.is_integer(dtype)
    if kind == "bool":
        return pa.types.is_boolean(dtype)
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype)


_EXPECTED = {"int": "int64", "float": "float64 (seconds)", "bool": "bool", "string": "string"}


def _read_table(run: str, run_dir: Path, name: str, out: list[Problem]) -> pa.Table | None:
    path = run_dir / f"{name}.parquet"
    try:
        present = path.exists()
    except OSError as exc:
        out.append(Problem(run, str(path), None, f"cannot read: {exc.strerror or exc}",
                           UnreadableRun.READ_FIX, kind="unreadable"))
        return None
    if not present:
        if name in REQUIRED_TABLES:
            out.append(Problem(run, str(path), None, f"{name}.parquet is missing",
                               "rerun the replay; a run directory needs requests and merges"))
        return None
    try:
        check_regular(path, f"{name}.parquet")      # a FIFO would block the memory map
        # much faster than read_table for small files; one thread per file (callers run
        # several runs at once); memory-mapped without pre-buffering: ~15% less CPU
        with pq.ParquetFile(path, memory_map=True, pre_buffer=False) as handle:
            schema = handle.schema_arrow
            # only columns whose values are checked or summarised: a nullable string
            # (requests.error) is checked by its type alone, extra columns are ignored
            wanted = [c.name for c in TABLES[name] if c.name in schema.names
                      and not (c.kind == "string" and c.nullable)]
            table = handle.read(columns=wanted, use_threads=False)
    except PermissionError as exc:
        out.append(Problem(run, str(path), None, f"cannot read: {exc.strerror or exc}",
                           UnreadableRun.READ_FIX, kind="unreadable"))
        return None
    except InputError as exc:
        out.append(Problem(run, str(path), None, exc.message, exc.fix))
        return None
    except (pa.ArrowException, OSError, ValueError) as exc:
        out.append(Problem(run, str(path), None,
                           "cannot read Parquet: corrupt or truncated "
                           f"({str(exc).splitlines()[0][:160]})",
                           "rerun this run (or re-import it); the file is damaged"))
        return None
    usable = {}
    for col in TABLES[name]:
        if col.name not in schema.names:
            out.append(Problem(run, str(path), col.name, f"column is missing from {name}.parquet",
                               f"write '{col.name}' ({_EXPECTED[col.kind]}"
                               f"{', null where unknown' if col.nullable else ''})"))
            continue
        dtype = schema.field(col.name).type
        if not _type_ok(col.kind, dtype):
            out.append(Problem(run, str(path), col.name,
                               f"has type {dtype}, expected {_EXPECTED[col.kind]}",
                               f"write '{col.name}' as {_EXPECTED[col.kind]}"))
            continue
        nulls = table.column(col.name).null_count if col.name in table.column_names else 0
        if nulls and not col.nullable:
            out.append(Problem(run, str(path), col.name,
                               f"{nulls} null value(s) in a required column",
                               f"every row needs '{col.name}'; rerun, or repair the source"))
            continue
        usable[col.name] = True
    # keep only the columns that passed, so value checks never see a wrong dtype
    return table.select([c for c in table.column_names if usable.get(c)])


def _floats(table: pa.Table, name: str) -> np.ndarray | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    if pa.types.is_null(col.type):
        return np.full(len(table), np.nan)
    return np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def _strictly_increasing(values: np.ndarray) -> bool:
    """(n,) numeric -> True when every value exceeds the one before (so all are unique)."""
    if values.dtype.kind not in "iuf" or values.size < 2:
        return values.size < 2
    return bool(np.all(values[1:] > values[:-1]))


def _first_ids(ids: np.ndarray | None, mask: np.ndarray, limit: int = 3) -> str:
    idx = np.flatnonzero(mask)[:limit]
    shown = ", ".join(str(ids[i]) if ids is not None else f"row {i}" for i in idx)
    more = " ..." if mask.sum() > limit else ""
    return f"{int(mask.sum())} row(s), e.g. {shown}{more}"


def _check_times(run, path, table, cols, nullable, ids, out, arrays=None):
    """``arrays``: the columns already converted by :func:`_floats` (name -> array or None)."""
    for name in cols:
        t = arrays[name] if arrays is not None else _floats(table, name)
        if t is None:
            continue
        if name not in nullable and np.isnan(t).any():
            out.append(Problem(run, path, name, f"NaN time: {_first_ids(ids, np.isnan(t))}",
                               f"every row needs a finite '{name}' in seconds"))
        if np.isinf(t).any():
            out.append(Problem(run, path, name, f"infinite time: {_first_ids(ids, np.isinf(t))}",
                               f"write finite seconds in '{name}' (null if unknown)"))
        with np.errstate(invalid="ignore"):
            neg = t < 0
            huge = np.isfinite(t) & (t > MAX_LOG_TIME_S)
        if neg.any():
            out.append(Problem(run, path, name, f"negative time: {_first_ids(ids, neg)}",
                               "times are seconds from the run's origin and must be >= 0"))
        if huge.any():
            out.append(Problem(run, path, name, f"time beyond {MAX_LOG_TIME_S:,.0f} s: "
                               f"{_first_ids(ids, huge)}",
                               "times are seconds from the run's origin (t = 0 when the "
                               "replay started), not timestamps; subtract the origin"))


def _order(run, path, ids, a, b, col, message, fix, out, severity="error", tol=TIME_TOL_S):
    """Report rows where b < a - tol (both present)."""
    if a is None or b is None:
        return
    with np.errstate(invalid="ignore"):
        wrong = b < a - tol
    if wrong.any():
        out.append(Problem(run, path, col, f"{message}: {_first_ids(ids, wrong)}", fix, severity))


def _check_requests(run, run_dir, table, meta, out):
    path = str(run_dir / "requests.parquet")
    n = len(table)
    if n == 0:
        out.append(Problem(run, path, None, "requests.parquet has no rows",
                           "a run needs at least one request; rerun the replay"))
        return
    ids = None
    if "request_id" in table.column_names:
        ids = table.column("request_id").to_numpy(zero_copy_only=False)
        if not _strictly_increasing(ids):     # writers number requests 0..n-1: no sort needed
            uniq, counts = np.unique(ids, return_counts=True)
        else:
            counts = np.ones(0, dtype=np.int64)
        if (counts > 1).any():
            dup = uniq[counts > 1]
            out.append(Problem(run, path, "request_id",
                               f"{len(dup)} duplicate request_id value(s), "
                               f"e.g. {', '.join(map(str, dup[:3]))}",
                               "request ids must be unique within a run"))
    times = {c: _floats(table, c) for c in ("arrival_s", "sent_s", "first_token_s", "end_s")}
    _check_times(run, path, table, tuple(times), {"first_token_s", "end_s"}, ids, out, times)
    arrival, sent, first, end = times.values()
    _order(run, path, ids, arrival, end, "end_s", "end_s before arrival_s",
           "end_s must be >= the scheduled arrival; check the time origin of both", out)
    _order(run, path, ids, sent, end, "end_s", "end_s before sent_s",
           "a request cannot finish before it is sent", out)
    _order(run, path, ids, sent, first, "first_token_s", "first_token_s before sent_s",
           "the first token cannot come before the request is sent", out)
    _order(run, path, ids, first, end, "end_s", "end_s before first_token_s",
           "a request cannot finish before its first token", out)
    _order(run, path, ids, arrival, sent, "sent_s", "sent_s earlier than the scheduled arrival_s",
           "an open-loop client sends at or after the scheduled arrival; check clocks",
           out, severity="warning", tol=EARLY_SEND_TOL_S)
    if "ok" in table.column_names and end is not None:
        ok = np.asarray(table.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
        missing = ok & ~np.isfinite(end)
        if missing.any():
            out.append(Problem(run, path, "end_s",
                               f"ok=True but end_s is null: {_first_ids(ids, missing)}",
                               "a completed request needs end_s; set ok=False for failed requests"))
    for col in ("prompt_tokens", "output_tokens"):
        if col in table.column_names:
            _check_counts(run, path, col, table.column(col).to_numpy(zero_copy_only=False),
                          ids, out, MAX_TOKENS, "token counts are per request, >= 0",
                          "token count")
    _check_request_scale(run, path, meta, arrival, end, out)


def _check_counts(run, path, col, vals: np.ndarray, ids, out, limit: int | None,
                  fix: str, what: str | None = None) -> None:
    """(n,) integers (any width, signed or not; NaN for nulls) in [0, limit]."""
    what = what or col
    with np.errstate(invalid="ignore"):
        neg = vals < 0
        huge = vals > limit if limit is not None else np.zeros(len(vals), dtype=bool)
    if neg.any():
        out.append(Problem(run, path, col, f"negative {what}: {_first_ids(ids, neg)}", fix))
    if huge.any():
        out.append(Problem(run, path, col, f"{what} above {limit:,}: {_first_ids(ids, huge)}",
                           fix))


def _looks_ms(value: float, plausible: float, slack: float = MS_PLAUSIBLE) -> bool:
    """``value`` is over MS_FACTOR x ``plausible`` while ``value / 1000`` is within ``slack`` x."""
    return value > MS_FACTOR * plausible and value / 1000.0 <= slack * plausible


def _check_request_scale(run, path, meta, arrival, end, out):
    horizon = meta.get("horizon_s") if meta else None
    if arrival is not None and _is_number(horizon) and horizon > 0:
        finite = arrival[np.isfinite(arrival)]
        if finite.size and _looks_ms(float(finite.max()), horizon, slack=10.0):
            out.append(Problem(run, path, "arrival_s",
                               f"arrivals reach {finite.max():.6g} but horizon_s is {horizon:g} s",
                               MS_FIX, kind="scale"))
    slo = (meta or {}).get("slo")
    e2e = slo.get("e2e_s") if isinstance(slo, dict) else None
    if arrival is not None and end is not None and _is_number(e2e) and e2e > 0:
        lat = end - arrival
        lat = lat[np.isfinite(lat)]
        # the median cannot exceed the maximum: skip the partial sort when it cannot look like ms
        if lat.size and float(lat.max()) > MS_FACTOR * e2e and \
                _looks_ms(float(np.median(lat)), e2e):
            out.append(Problem(run, path, "end_s",
                               f"median latency {np.median(lat):.6g} is over {MS_FACTOR:g}x the "
                               f"e2e SLO of {e2e:g} s", MS_FIX, kind="scale"))


def _check_merges(run, run_dir, table, meta, out):
    path = str(run_dir / "merges.parquet")
    idx = None
    if "merge_idx" in table.column_names:
        idx = table.column("merge_idx").to_numpy(zero_copy_only=False)
    _check_times(run, path, table, ("start_s", "end_s"), set(), idx, out)
    for col in ("inner_step", "bytes"):     # nullable: NaN where unknown
        if col in table.column_names:
            _check_counts(run, path, col, _floats(table, col), idx, out, None,
                          f"{col} counts from 0; null where unknown")
    if len(table) == 0:
        return
    if meta and meta.get("role") == "no_sync":
        out.append(Problem(run, path, None, f"a no_sync run has {len(table)} merge(s)",
                           "a no_sync baseline must not merge; check role/policy or merges"))
    if idx is not None:
        uniq, counts = np.unique(idx, return_counts=True)
        if (counts > 1).any():
            out.append(Problem(run, path, "merge_idx",
                               f"duplicate merge_idx {uniq[counts > 1][:3].tolist()}",
                               "merge_idx must be unique"))
    start, end = _floats(table, "start_s"), _floats(table, "end_s")
    if start is None or end is None:
        return
    with np.errstate(invalid="ignore"):
        reversed_ = ~(end > start) & np.isfinite(start) & np.isfinite(end)
    if reversed_.any():
        out.append(Problem(run, path, "end_s", "reversed or empty merge window (end_s <= start_s): "
                           f"{_first_ids(idx, reversed_)}", "a merge window needs end_s > start_s"))
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    overlap = np.zeros(len(s), dtype=bool)
    overlap[1:] = s[1:] < e[:-1] - TIME_TOL_S
    if overlap.any():
        i = int(np.flatnonzero(overlap)[0])

        def name(j):
            return f"merge_idx {idx[order][j]}" if idx is not None else f"row {order[j]}"

        out.append(Problem(run, path, "start_s",
                           f"{int(overlap.sum())} overlapping merge window(s): {name(i)} starts at "
                           f"{s[i]:.6g} s before {name(i - 1)} ends at {e[i - 1]:.6g} s",
                           "merges are sequential: each must start after the previous one ended"))
    D = meta.get("merge_duration_s") if meta else None
    dur = (e - s)[np.isfinite(e - s) & (e > s)]
    if _is_number(D) and D > 0 and dur.size and _looks_ms(float(np.median(dur)), D):
        out.append(Problem(run, path, "end_s",
                           f"median merge duration {np.median(dur):.6g} is over "
                           f"{MS_FACTOR:g}x merge_duration_s = {D:g} s", MS_FIX, kind="scale"))


def _check_steps(run, run_dir, table, out):
    path = str(run_dir / "steps.parquet")
    _check_times(run, path, table, ("start_s", "end_s"), set(), None, out)
    _order(run, path, None, _floats(table, "start_s"), _floats(table, "end_s"), "end_s",
           "step end_s before start_s", "a step ends after it starts", out)


# ----------------------------------------------------------------------------- drivers


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
    except UnreadableRun as exc:
        out.append(Problem(run, str(meta_path), None, exc.message, exc.fix, kind="unreadable"))
        return RunCheck(run_dir, run, None, out)
    except InputError as exc:
        out.append(Problem(run, str(meta_path), None, exc.message, exc.fix or "rewrite the run"))
        return RunCheck(run_dir, run, None, out)
    if _nonempty_str(meta.get("run_id")):
        run = meta["run_id"]
    version = meta.get("schema_version")
    if "schema_version" in meta and version not in SUPPORTED_SCHEMA_VERSIONS:
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
    if "requests" in tables:
        _check_requests(run, run_dir, tables["requests"], meta, out)
    if "merges" in tables:
        _check_merges(run, run_dir, tables["merges"], meta, out)
    if "steps" in tables:
        _check_steps(run, run_dir, tables["steps"], out)
    return RunCheck(run_dir, run, meta, out, tables)


def validate_run(run_dir: str | os.PathLike, *, include_incomplete: bool = False) -> list[Problem]:
    """Every problem of one run directory (errors first); empty when the run is valid."""
    problems = inspect_run(run_dir, include_incomplete=include_incomplete).problems
    return sorted(problems, key=lambda p: p.severity != "error")


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


def default_threads() -> int:
    """Worker threads for per-run work: every core (Parquet decoding and numpy release the GIL)."""
    return max(1, min(8, os.cpu_count() or 1))


def map_ordered(fn, items, threads: int | None = None, window: int | None = None):
    """Yield ``fn(item)`` for each item, in order, computed by ``threads`` worker threads.

    At most ``window`` (default ``2 * threads``) results are pending at once, so memory stays
    bounded by a few runs whatever the store size.  ``threads <= 1`` runs in this thread.
    """
    threads = default_threads() if threads is None else int(threads)
    if threads <= 1:
        for item in items:
            yield fn(item)
        return
    window = window or 2 * threads
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="evalkit-run") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()


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
        check.tables = {}     # the caller has used them; keep memory flat over many runs
        return check

    seen = []
    for check in map_ordered(inspect, run_dirs, threads):
        report.runs.append(check.run)
        report.problems.extend(sorted(check.problems, key=lambda p: p.severity != "error"))
        seen.append((check.run_dir, check.run, check.meta))
    _cross_run(report, seen)
    return report
