"""The table rules: columns and types, nulls, times, orderings, counts, plausible scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from evalkit.errors import InputError
from evalkit.limits import MAX_LOG_TIME_S, MAX_TOKENS
from evalkit.runlog.io import EnvironmentFailure, TableFile, UnreadableRun
from evalkit.runlog.schema import REQUIRED_TABLES, TABLES
from evalkit.runlog.schema import is_number as _is_number
from evalkit.runlog.validate.problem import Problem

__all__ = ["MS_FACTOR", "MS_PLAUSIBLE", "TIME_TOL_S"]

TIME_TOL_S = 1e-9        # float slack for ordering checks
EARLY_SEND_TOL_S = 1e-3  # sending before the scheduled arrival by more than this is suspicious
MS_FACTOR = 100.0        # "implausible scale": 100x beyond the plausible value ...
MS_PLAUSIBLE = 100.0     # ... while the value / 1000 is within 100x of it
MS_FIX = "looks like milliseconds; divide by 1000 (run-log times are seconds)"


def _type_ok(kind: str, dtype: pa.DataType) -> bool:
    if pa.types.is_null(dtype):
        return True  # an all-null column; the null check decides
    if kind == "int":
        return pa.types.is_integer(dtype)
    if kind == "float":         # float16 keeps 3 digits: a time of 1,000 s is off by 0.5 s
        return (pa.types.is_floating(dtype) and not pa.types.is_float16(dtype)) \
            or pa.types.is_integer(dtype)
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
        with TableFile(run_dir, name) as handle:
            schema = handle.schema
            # only columns whose values are checked or summarised: a nullable string
            # (requests.error) is checked by its type alone, extra columns are ignored
            wanted = [c.name for c in TABLES[name] if c.name in schema.names
                      and not (c.kind == "string" and c.nullable)]
            table = handle.read(wanted)
    except EnvironmentFailure:          # the run was not judged: never a problem of the run
        raise
    except UnreadableRun as exc:
        out.append(Problem(run, str(path), None, exc.message, exc.fix, kind="unreadable"))
        return None
    except InputError as exc:
        out.append(Problem(run, str(path), None, exc.message, exc.fix))
        return None
    usable = {}
    in_file, read = set(schema.names), set(table.column_names)
    for col in TABLES[name]:
        if col.name not in in_file:
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
        nulls = table.column(col.name).null_count if col.name in read else 0
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


def _times_clean(t: np.ndarray, nullable: bool) -> bool:
    """No rule of :func:`_check_times` can fire: every value (every non-null one, for a
    nullable column) lies in ``[0, MAX_LOG_TIME_S]``; two reductions instead of a pass per
    rule.  A NaN where none may be, or no value at all, leaves it to the rules."""
    if t.size == 0:
        return True
    lo, hi = (np.fmin.reduce(t), np.fmax.reduce(t)) if nullable else (t.min(), t.max())
    return bool(lo >= 0 and hi <= MAX_LOG_TIME_S)


def _finite_max(values: np.ndarray) -> float | None:
    """The largest finite value, None when there is none."""
    if values.size == 0:
        return None
    top = float(np.fmax.reduce(values))
    if np.isfinite(top):
        return top
    if np.isnan(top):                       # every value NaN
        return None
    finite = values[np.isfinite(values)]    # an infinity is there
    return float(finite.max()) if finite.size else None


def _check_times(run, path, table, cols, nullable, ids, out, arrays=None):
    """``arrays``: the columns already converted by :func:`_floats` (name -> array or None)."""
    for name in cols:
        t = arrays[name] if arrays is not None else _floats(table, name)
        if t is None or _times_clean(t, name in nullable):
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
        if tol >= 0 and not np.any(b < a):     # then none is below a - tol either
            return
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
    arrays = dict(times)
    if "ok" in table.column_names:
        arrays["ok"] = ok = np.asarray(table.column("ok").to_numpy(zero_copy_only=False),
                                       dtype=bool)
    if "ok" in table.column_names and end is not None:
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
    return arrays


def _check_counts(run, path, col, vals: np.ndarray, ids, out, limit: int | None,
                  fix: str, what: str | None = None) -> None:
    """(n,) integers (any width, signed or not; NaN for nulls) in [0, limit]."""
    what = what or col
    if vals.size == 0 or (vals.min() >= 0 and (limit is None or vals.max() <= limit)):
        return                      # (a NaN fails both tests: the rules below decide)
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
        top = _finite_max(arrival)
        if top is not None and _looks_ms(top, horizon, slack=10.0):
            out.append(Problem(run, path, "arrival_s",
                               f"arrivals reach {top:.6g} but horizon_s is {horizon:g} s",
                               MS_FIX, kind="scale"))
    slo = (meta or {}).get("slo")
    e2e = slo.get("e2e_s") if isinstance(slo, dict) else None
    if arrival is not None and end is not None and _is_number(e2e) and e2e > 0:
        lat = end - arrival
        top = _finite_max(lat)
        # the median cannot exceed the maximum: skip the partial sort when it cannot look like ms
        if top is not None and top > MS_FACTOR * e2e:
            lat = lat[np.isfinite(lat)]
            if _looks_ms(float(np.median(lat)), e2e):
                out.append(Problem(run, path, "end_s",
                                   f"median latency {np.median(lat):.6g} is over "
                                   f"{MS_FACTOR:g}x the e2e SLO of {e2e:g} s", MS_FIX,
                                   kind="scale"))


def _check_merges(run, run_dir, table, meta, out):
    path = str(run_dir / "merges.parquet")
    idx = None
    if "merge_idx" in table.column_names:
        idx = table.column("merge_idx").to_numpy(zero_copy_only=False)
    arrays = {c: _floats(table, c) for c in ("start_s", "end_s")}
    _check_times(run, path, table, ("start_s", "end_s"), set(), idx, out, arrays)
    for col in ("inner_step", "bytes"):     # nullable: NaN where unknown
        if col in table.column_names:
            _check_counts(run, path, col, _floats(table, col), idx, out, None,
                          f"{col} counts from 0; null where unknown")
    if len(table) == 0:
        return arrays
    if meta and meta.get("role") == "no_sync":
        out.append(Problem(run, path, None, f"a no_sync run has {len(table)} merge(s)",
                           "a no_sync baseline must not merge; check role/policy or merges"))
    if idx is not None:
        uniq, counts = np.unique(idx, return_counts=True)
        if (counts > 1).any():
            out.append(Problem(run, path, "merge_idx",
                               f"duplicate merge_idx {uniq[counts > 1][:3].tolist()}",
                               "merge_idx must be unique"))
    start, end = arrays["start_s"], arrays["end_s"]
    if start is None or end is None:
        return arrays
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
    return arrays


def _check_steps(run, run_dir, table, out):
    path = str(run_dir / "steps.parquet")
    arrays = {c: _floats(table, c) for c in ("start_s", "end_s")}
    _check_times(run, path, table, ("start_s", "end_s"), set(), None, out, arrays)
    _order(run, path, None, arrays["start_s"], arrays["end_s"], "end_s",
           "step end_s before start_s", "a step ends after it starts", out)
    return arrays

