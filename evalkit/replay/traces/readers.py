"""Readers for public request-trace formats (see shared/traces/README.md).

Every reader returns a :class:`Trace` with arrivals rebased so the first request
arrives at 0 s (the original offset is kept in ``meta['t0']``), and records in
``meta`` every row it dropped and why.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.fileread import check_regular
from evalkit.jsonio import loads_json, read_json
from evalkit.limits import MAX_IMPORT_JSON_BYTES
from evalkit.replay.traces.generate import as_rng
from evalkit.replay.traces.model import Trace, validate_columns

FORMATS = ("azure", "mooncake", "burstgpt", "vllm-bench")


def _check_file(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", file=path, fix="check the path")
    return path


def _read_csv(path: Path, required: list[str]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"not a readable CSV file ({exc})", file=path,
                         fix="check the file and --format") from None
    for col in required:
        if col not in df.columns:
            raise InputError(f"missing column (has: {list(df.columns)})", file=path,
                             column=col, fix="check --format matches the file")
    return df


def _numeric(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(df[col], errors="coerce")
    bad = values.isna() & df[col].notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{int(bad.sum())} values are not numbers (first at data row {row + 1}: "
                         f"'{df[col].iloc[row]}')", file=path, column=col,
                         fix="remove or fix those rows")
    return values.to_numpy(dtype=np.float64)


def _build(arrival, prompt, output, *, path: Path, fmt: str, sort: bool, meta: dict,
           t0: float | None = None) -> Trace:
    arrival, prompt, output, repairs = validate_columns(
        arrival, prompt, output, source=str(path), sort=sort)
    t0 = float(arrival[0]) if t0 is None else t0
    meta = {"source": str(path.name), "format": fmt, "t0": t0, **meta}
    if repairs:
        meta.setdefault("repairs", []).extend(repairs)
    return Trace.from_arrays(arrival - t0, prompt, output, name=path.stem, meta=meta,
                             source=str(path))


_DATETIME = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?"
                       r"\s*(Z|[+-]\d{2}:?\d{2})?$")


def _azure_arrivals(raw: pd.Series, path: Path) -> tuple[np.ndarray, dict]:
    """Seconds from the first request, shape (n,), and how the TIMESTAMP column was read.

    The published traces carry wall-clock datetimes (``2023-11-16 18:17:03.9799600``);
    derived files often carry numbers (seconds from the start).  A column that is all
    numbers is taken as seconds; otherwise every value must be a datetime.  Mixed or
    unparseable values fail naming the data row and the value as written in the file.
    """
    text = raw.astype("string").str.strip()
    numbers = pd.to_numeric(text, errors="coerce")
    if numbers.notna().all():
        values = numbers.to_numpy(dtype=np.float64)
        if not np.isfinite(values).all():
            row = int(np.flatnonzero(~np.isfinite(values))[0])
            raise InputError(f"data row {row + 1}: timestamp {text.iloc[row]} is not finite",
                             file=path, column="TIMESTAMP", fix="remove or fix that row")
        origin = float(values.min())
        return values - origin, {"timestamp_kind": "numeric seconds", "t0_value": origin}
    is_date = text.str.fullmatch(_DATETIME).fillna(False).to_numpy(dtype=bool)
    ts = pd.to_datetime(text.where(is_date), format="ISO8601", errors="coerce", utc=True)
    bad = ts.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = text.iloc[row]
        shown = "an empty cell" if pd.isna(value) or value == "" else f"'{value}'"
        mixed = numbers.notna().any()
        raise InputError(
            f"{int(bad.sum())} timestamps cannot be parsed (first at data row {row + 1}: "
            f"{shown})" + (" - the column mixes numbers and datetimes" if mixed else ""),
            file=path, column="TIMESTAMP",
            fix="use wall-clock datetimes 'YYYY-MM-DD HH:MM:SS.fffffff' in every row, "
                "or numbers (seconds) in every row")
    origin = ts.min()
    arrival = (ts - origin).dt.total_seconds().to_numpy()
    return arrival, {"timestamp_kind": "datetime",
                     "wall_clock_origin": str(origin.tz_localize(None))}


def read_azure(path, *, sort: bool = False) -> Trace:
    """Azure LLM inference trace: TIMESTAMP (wall clock, or numeric seconds), ContextTokens,
    GeneratedTokens."""
    path = _check_file(path)
    df = _read_csv(path, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    if df.empty:
        raise InputError("the file has a header but no rows (empty)", file=path,
                         fix="pass a trace with at least one request")
    arrival, how = _azure_arrivals(df["TIMESTAMP"], path)
    meta = {**how, "rows_read": int(len(df)), "dropped": {}}
    return _build(arrival, _numeric(df, "ContextTokens", path),
                  _numeric(df, "GeneratedTokens", path), path=path, fmt="azure",
                  sort=sort, meta=meta)


def read_burstgpt(path, *, sort: bool = False) -> Trace:
    """BurstGPT CSV; failed requests (``Response tokens == 0``) are dropped and counted."""
    path = _check_file(path)
    df = _read_csv(path, ["Timestamp", "Request tokens", "Response tokens"])
    response = _numeric(df, "Response tokens", path)
    failed = response == 0
    kept = df[~failed]
    meta = {"rows_read": int(len(df)),
            "dropped": {"failed (Response tokens == 0)": int(failed.sum())}}
    if "Model" in df.columns:
        meta["models"] = {str(k): int(v) for k, v in kept["Model"].value_counts().items()}
    return _build(_numeric(kept, "Timestamp", path), _numeric(kept, "Request tokens", path),
                  response[~failed], path=path, fmt="burstgpt", sort=sort, meta=meta)


def detect_bucket(times) -> tuple[float, int]:
    """Quantisation of timestamps, shape (n,): (smallest gap between distinct values, max ties).

    The smallest gap is the widest window each timestamp can be spread over without
    overtaking the next one; ``nan`` when all timestamps are equal.
    """
    values, counts = np.unique(np.asarray(times, dtype=np.float64), return_counts=True)
    gap = float(np.min(np.diff(values))) if len(values) > 1 else float("nan")
    return gap, int(counts.max())


def grid_fraction(times, bucket: float) -> float | None:
    """Share of gaps between distinct timestamps that are whole multiples of ``bucket``.

    Near 1 for a quantised trace; well below 1 means the smallest gap is not the
    quantum (e.g. irregular timestamps), so jitter of that width is too narrow.
    """
    values = np.unique(np.asarray(times, dtype=np.float64))
    if len(values) < 2 or not bucket > 0:
        return None
    m = np.diff(values) / bucket
    return float(np.mean(np.abs(m - np.rint(m)) < 0.01))


def jitter_within_buckets(times, bucket: float, rng) -> np.ndarray:
    """Spread each timestamp uniformly over ``[t, t + bucket)``; shape (n,) -> (n,)."""
    return np.asarray(times, dtype=np.float64) + as_rng(rng).random(len(times)) * bucket


def read_mooncake(path, *, jitter: bool = True, seed: int = 0, sort: bool = False) -> Trace:
    """Mooncake FAST'25 JSONL (``timestamp`` in ms).

    Timestamps are quantised (conversation trace: ~3 s buckets, many requests per
    bucket).  With ``jitter`` (default) each request is moved uniformly within its
    bucket ``[t, t + q)``, q the detected bucket size, using ``seed``; the choice and
    q are recorded in ``meta['jitter']``.
    """
    path = _check_file(path)
    ts, inp, out = [], [], []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rec = loads_json(line, file=path, what=f"line {lineno}", nonfinite=True,
                             fix="check --format (mooncake expects JSON lines)")
            if not isinstance(rec, dict):
                raise InputError(f"line {lineno} is not a JSON object", file=path,
                                 fix="check --format")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in rec:
                    raise InputError(f"line {lineno} has no {key!r}", file=path, column=key,
                                     fix="each line needs timestamp, input_length, output_length")
            ts.append(rec["timestamp"])
            inp.append(rec["input_length"])
            out.append(rec["output_length"])
    try:
        arrival = np.asarray(ts, dtype=np.float64) / 1000.0
    except (TypeError, ValueError):
        raise InputError("timestamps must be numbers (ms)", file=path, column="timestamp",
                         fix="check the file") from None
    meta = {"rows_read": len(ts), "dropped": {}, "ignored_fields": ["hash_ids"]}
    # Check (and, with sort, repair) the raw timestamps before jitter touches them.
    arrival, inp, out, repairs = validate_columns(arrival, inp, out, source=str(path), sort=sort)
    if repairs:
        meta["repairs"] = repairs
    raw_t0 = float(arrival[0])
    bucket, max_ties = detect_bucket(arrival)
    info = {"applied": False, "bucket_s": bucket, "max_requests_per_timestamp": max_ties,
            "on_grid_fraction": grid_fraction(arrival, bucket)}
    if jitter and max_ties > 1:
        if not np.isfinite(bucket):
            raise InputError("all timestamps are equal: the bucket size cannot be detected",
                             file=path, column="timestamp", fix="pass --no-jitter (jitter=False)")
        jittered = jitter_within_buckets(arrival, bucket, seed)
        order = np.argsort(jittered, kind="stable")
        arrival, inp, out = jittered[order], inp[order], out[order]
        info.update(applied=True, seed=int(seed),
                    method="uniform within [t, t + bucket_s), then sorted; t0 is the first "
                           "raw timestamp")
    elif not jitter:
        info["reason"] = "disabled (--no-jitter)"
    else:
        info["reason"] = "no two requests share a timestamp"
    meta["jitter"] = info
    return _build(arrival, inp, out, path=path, fmt="mooncake", sort=False, meta=meta,
                  t0=raw_t0)


def read_vllm_bench(path, *, sort: bool = False) -> Trace:
    """vLLM ``bench serve --save-detailed`` JSON: per-request ``input_lens``, ``output_lens``,
    ``start_times``, ``errors``.  Requests with a non-empty error are dropped and counted."""
    path = _check_file(path)
    data = read_json(path, limit=MAX_IMPORT_JSON_BYTES, what="the trace file", nonfinite=True,
                     fix="check --format")
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", file=path, fix="check --format")
    for key in ("input_lens", "output_lens", "start_times"):
        if key not in data:
            fix = ("re-run `vllm bench serve --save-result --save-detailed` with a vLLM that "
                   "records start_times" if key == "start_times" else "use --save-detailed")
            raise InputError(f"missing per-request array (has: {sorted(data)})", file=path,
                             column=key, fix=fix)
    n = len(data["input_lens"])
    errors = data.get("errors")
    if errors is None:
        errors = [""] * n
    for key, arr in (("output_lens", data["output_lens"]), ("start_times", data["start_times"]),
                     ("errors", errors)):
        if len(arr) != n:
            raise InputError(f"has {len(arr)} entries but input_lens has {n}", file=path,
                             column=key, fix="the per-request arrays must be the same length")
    failed = np.array([bool(e) for e in errors], dtype=bool)
    keep = ~failed
    start = np.asarray(data["start_times"], dtype=np.float64)[keep]
    meta = {"rows_read": n, "dropped": {"failed (non-empty error)": int(failed.sum())},
            "bench": {k: data[k] for k in ("request_rate", "burstiness", "max_concurrency",
                                           "model_id", "date") if k in data}}
    if "errors" not in data:
        meta["dropped"]["note"] = "no 'errors' array: all requests taken as successful"
    return _build(start, np.asarray(data["input_lens"])[keep],
                  np.asarray(data["output_lens"])[keep], path=path, fmt="vllm-bench",
                  sort=sort, meta=meta)


READERS = {"azure": read_azure, "mooncake": read_mooncake, "burstgpt": read_burstgpt,
           "vllm-bench": read_vllm_bench}


def import_trace(path, fmt: str, *, jitter: bool = True, seed: int = 0,
                 sort: bool = False) -> Trace:
    """Read ``path`` in format ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in READERS:
        raise InputError(f"unknown format {fmt!r}", column="format",
                         fix=f"use one of {', '.join(FORMATS)}")
    if Path(path).exists():                         # a FIFO or device: refused, no hang
        check_regular(path, "the trace file")
    if fmt == "mooncake":
        return read_mooncake(path, jitter=jitter, seed=seed, sort=sort)
    return READERS[fmt](path, sort=sort)
