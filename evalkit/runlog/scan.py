"""The per-run scan over a whole run store: bounded memory, every core.

:func:`scan_runs` computes, per run, the columns of
:func:`evalkit.runlog.summary.summarize_runs` (V with its cluster-robust and Clopper–Pearson
CIs, TTFT/TPOT/goodput rates, latency percentiles, K observed, exposure, arrival rates, send
lag, token totals) without the row-level validation and without loading any run into pandas.

Two engines.  ``arrow`` (default): each run's Parquet files are read once, only the columns
used (``ParquetFile.read(columns=...)``, several times faster than ``read_table`` for
files of this size), straight into numpy, and summarised by
:func:`evalkit.runlog.summary.request_numbers` -- the very code of ``summarize_runs``, so
the numbers are identical -- with a few runs at a time in worker threads (pyarrow and numpy
release the GIL).  ``duckdb``: all ``requests.parquet`` files are read by one
``read_parquet([...])`` per batch of runs, aggregated ``GROUP BY`` run (``file_index``), and
the request exposure is an equality join of each request's lifetime start against a bucketed
search table over its run's merged windows (:func:`_window_lookup`; an ASOF join was 5x
slower because it sorts every row).  Batches are cut by row count (from the Parquet
footers) so memory stays bounded; DuckDB runs with ``threads`` threads and a
``memory_limit``.  It was 3-5x slower than ``arrow`` on the scale benchmark
(``examples/bench/bench_scale.py``): per-run joins and three holistic aggregates.

Definitions follow :mod:`evalkit.runlog.metrics` exactly (failed requests have latency
``+inf``; percentiles are linear interpolation, DuckDB ``quantile_cont`` = numpy
``method="linear"``, which ``metrics.quantile`` matches including ``inf``); merge-window
quantities (K observed, time exposure) are few rows and use the metrics functions directly.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit.errors import InputError
from evalkit.fileread import check_regular
from evalkit.runlog import metrics, vinterval
from evalkit.runlog.io import iter_run_dirs, read_meta
from evalkit.runlog.schema import SUPPORTED_SCHEMA_VERSIONS
from evalkit.runlog.summary import META_COLUMNS, SUMMARY_COLUMNS, _from_arrow, request_numbers
from evalkit.runlog.validate import default_threads, map_ordered

REQUEST_COLUMNS = ("arrival_s", "sent_s", "first_token_s", "end_s", "prompt_tokens",
                   "output_tokens", "ok")
MERGE_COLUMNS = ("start_s", "end_s")
BATCH_ROWS = 4_000_000      # request rows per DuckDB query: bounds memory of the quantiles
# DuckDB errors that come from the files (others are bugs and propagate unchanged)
DATA_ERRORS = (duckdb.IOException, duckdb.InvalidInputException, duckdb.ConversionException,
               duckdb.BinderException)


# ---------------------------------------------------------------- run discovery / checks

def _meta_rows(runs_dir, include_incomplete: bool) -> list[tuple[Path, dict]]:
    found = [(d, read_meta(d)) for d in iter_run_dirs(runs_dir)]
    if not found:
        raise InputError("no runs found", file=str(runs_dir),
                         fix="pass the directory that holds the run directories")
    versions: dict = {}
    for d, meta in found:
        versions.setdefault(meta.get("schema_version"), []).append(meta.get("run_id", d.name))
    if len(versions) > 1:
        listing = "; ".join(f"v{v}: {_names(ids)}" for v, ids in
                            sorted(versions.items(), key=lambda kv: str(kv[0])))
        raise InputError(f"runs mix schema versions ({listing})", file=str(runs_dir),
                         column="schema_version",
                         fix=f"migrate the older runs to schema v{max(SUPPORTED_SCHEMA_VERSIONS)}"
                             " (rewrite them with this evalkit) or scan each version's runs "
                             "from its own directory")
    (version, ids), = versions.items()
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise InputError(f"unknown schema_version {version!r} in runs {_names(ids)}",
                         file=str(runs_dir), column="schema_version",
                         fix=f"this evalkit reads schema versions "
                             f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))}; upgrade evalkit")
    if not include_incomplete:
        found = [(d, m) for d, m in found if m.get("complete") is True]
        if not found:
            raise InputError("every run is marked incomplete", file=str(runs_dir),
                             column="complete", fix="rerun the runs; incomplete runs are "
                                                    "never audited")
    return found


def _names(ids, limit: int = 6) -> str:
    ids = [str(i) for i in ids]
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more


@contextmanager
def _open(path: Path, columns):
    """Open a Parquet file after checking it has ``columns`` (InputError naming file/column).

    Read through an ``OSFile`` without pre-buffering: for run-sized files ~15% less CPU than
    a memory map (whose page faults cost more than the copy) and no filesystem lookup.
    """
    try:
        check_regular(path, path.name)          # a FIFO would block the open below
        source = pa.OSFile(str(path))
    except InputError:
        raise
    except FileNotFoundError as exc:
        raise InputError(f"{path.name} is missing", file=str(path),
                         fix="rerun this run; its directory is incomplete") from exc
    except Exception as exc:  # noqa: BLE001 - e.g. a directory where the file belongs
        raise InputError(f"cannot read Parquet ({exc})", file=str(path),
                         fix="the file is corrupt or truncated; rerun this run") from exc
    try:
        try:
            handle = pq.ParquetFile(source, pre_buffer=False)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad files
            raise InputError(f"cannot read Parquet ({exc})", file=str(path),
                             fix="the file is corrupt or truncated; rerun this run") from exc
        names = set(handle.schema_arrow.names)
        for col in columns:
            if col not in names:
                raise InputError(f"{path.name} lacks a column", file=str(path), column=col,
                                 fix="rewrite the run with a current evalkit (`evalkit validate` "
                                     "lists every problem)")
        yield handle
    finally:
        source.close()


def _footer(path: Path, columns) -> int:
    """Row count of a Parquet file, after checking it opens and has ``columns``."""
    with _open(path, columns) as handle:
        return handle.metadata.num_rows


def _run_table(found, footers: bool = True) -> pd.DataFrame:
    """One row per run: run.json fields (numbers checked) and, with ``footers``, row counts."""
    rows = []
    for fid, (d, meta) in enumerate(found):
        slo = meta.get("slo") or {}
        trace = meta.get("trace") or {}
        rows.append({
            "fid": fid, "requests_file": str(d / "requests.parquet"),
            "merges_file": str(d / "merges.parquet"),
            "steps_file": str(d / "steps.parquet") if (d / "steps.parquet").exists() else None,
            "n_rows": _footer(d / "requests.parquet", REQUEST_COLUMNS) if footers else -1,
            "n_merge_rows": _footer(d / "merges.parquet", MERGE_COLUMNS) if footers else -1,
            "run_id": str(meta.get("run_id", d.name)), "role": meta.get("role"),
            "policy": meta.get("policy"), "seed": meta.get("seed"), "draw": meta.get("draw"),
            "matched_to": meta.get("matched_to"), "regime": meta.get("regime"),
            "backend": meta.get("backend"), "oracle": meta.get("oracle"),
            "complete": meta.get("complete"), "trace_name": trace.get("name"),
            "trace_sha256": trace.get("sha256"),
            "trace_realisation": meta.get("trace_realisation", trace.get("sha256")),
            "slo_e2e_s": _slo(slo, "e2e_s", d), "slo_ttft_s": _slo(slo, "ttft_s", d, True),
            "slo_tpot_s": _slo(slo, "tpot_s", d, True),
            "horizon_s": _number(meta, "horizon_s", d),
            "merge_duration_s": _number(meta, "merge_duration_s", d),
        })
    return pd.DataFrame(rows)


def _number(meta: dict, key: str, run_dir: Path) -> float:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{key} is {v!r}, expected a number", file=str(run_dir / "run.json"),
                         column=key, fix="`evalkit validate` lists every problem")
    return float(v)


def _slo(slo: dict, key: str, run_dir: Path, optional: bool = False) -> float:
    v = slo.get(key)
    if v is None and optional:
        return np.nan
    return _number({key: v}, key, run_dir)


# ---------------------------------------------------------------- SQL

# A request is good (does not count towards V) when it completed and every configured SLO
# holds: metrics.SloFlags, the one definition of V.  Columns: done, latency, ttft, tpot.
_GOOD = ("done AND latency <= slo_e2e_s"
         " AND (slo_ttft_s IS NULL OR isnan(slo_ttft_s) OR ttft <= slo_ttft_s)"
         " AND (slo_tpot_s IS NULL OR isnan(slo_tpot_s) OR tpot <= slo_tpot_s)")

def _request_sql(n_candidates: int) -> str:
    """Per-run aggregates of one batch.  ``file_index`` numbers ``$files`` = batch ``fid``.

    Exposure: ``lookup`` maps (fid, bucket of lo) to ``n_candidates`` consecutive union
    windows that include the first window ending after any ``lo`` of that bucket
    (see :func:`_window_lookup`); the first candidate with ``lo < we`` is metrics'
    ``searchsorted(we, lo, "right")`` window, and the request is exposed iff its ``ws < hi``.
    """
    cases = " ".join(f"WHEN lo < l.we{i} THEN l.ws{i}" for i in range(n_candidates))
    next_ws = f"CASE {cases} ELSE 'inf'::DOUBLE END" if n_candidates else "'inf'::DOUBLE"
    return f"""
WITH q AS (
    SELECT r.fid, r.slo_e2e_s, r.slo_ttft_s, r.slo_tpot_s, r.horizon_s,
           r.origin_s, r.bucket_s, r.n_buckets,
           t.arrival_s, t.sent_s, t.first_token_s, t.end_s, t.prompt_tokens, t.output_tokens,
           coalesce(t.ok, false) AS ok,
           coalesce(t.ok AND isfinite(t.end_s), false) AS done,
           coalesce(t.ok AND isfinite(t.first_token_s), false) AS has_first,
           coalesce(isfinite(t.end_s), false) AS has_end
    FROM read_parquet($files, union_by_name = true) AS t
    JOIN batch_runs AS r ON t.file_index = r.fid
), m AS (
    SELECT fid,
           CASE WHEN done THEN end_s - arrival_s ELSE 'inf'::DOUBLE END AS latency,
           CASE WHEN has_first THEN first_token_s - arrival_s ELSE 'inf'::DOUBLE END AS ttft,
           CASE WHEN done AND has_first THEN
                CASE WHEN output_tokens > 1
                     THEN (end_s - first_token_s) / (output_tokens - 1) ELSE 0.0 END
                ELSE 'inf'::DOUBLE END AS tpot,
           CASE WHEN done THEN arrival_s ELSE sent_s END AS lo,
           CASE WHEN has_end THEN end_s ELSE greatest(horizon_s, sent_s) END AS hi,
           CASE WHEN has_end THEN end_s ELSE horizon_s END AS span_end,
           done, ok, arrival_s, sent_s, prompt_tokens, output_tokens,
           slo_e2e_s, slo_ttft_s, slo_tpot_s, origin_s, bucket_s, n_buckets
    FROM q
), x AS (
    SELECT m.*, coalesce({next_ws} < hi, false) AS exposed
    FROM m LEFT JOIN lookup AS l
      ON l.fid = m.fid
     AND l.bucket = least(greatest(floor((m.lo - m.origin_s) / m.bucket_s), 0),
                          m.n_buckets - 1)::BIGINT
)
SELECT fid,
       count(*) AS n_requests,
       count(*) FILTER (WHERE NOT done) AS n_failed,
       count(*) FILTER (WHERE latency > slo_e2e_s) AS n_e2e_violations,
       count(*) FILTER (WHERE ttft > slo_ttft_s) AS n_ttft_violations,
       count(*) FILTER (WHERE tpot > slo_tpot_s) AS n_tpot_violations,
       count(*) FILTER (WHERE {_GOOD}) AS n_good,
       quantile_cont(latency, [0.5, 0.95, 0.99]) AS latency_q,
       quantile_cont(ttft, 0.95) AS ttft_p95_s,
       quantile_cont(sent_s - arrival_s, 0.99) AS send_lag_p99_s,
       count(*) FILTER (WHERE exposed) AS n_exposed,
       min(arrival_s) AS first_arrival_s, max(arrival_s) AS last_arrival_s,
       count(DISTINCT arrival_s) AS n_arrival_times,
       min(sent_s) AS first_sent_s, max(sent_s) AS last_sent_s,
       max(span_end) AS last_end_s,
       sum(prompt_tokens) AS prompt_tokens_total,
       coalesce(sum(output_tokens) FILTER (WHERE ok), 0) AS output_tokens_total
FROM x
GROUP BY fid
"""


_CLUSTER_SQL = f"""
WITH q AS (
    SELECT r.fid, r.bursts, r.origin_s, r.block_s, r.slo_e2e_s, r.slo_ttft_s, r.slo_tpot_s,
           t.arrival_s,
           coalesce(t.ok AND isfinite(t.end_s), false) AS done,
           coalesce(t.ok AND isfinite(t.first_token_s), false) AS has_first,
           t.first_token_s, t.end_s, t.output_tokens
    FROM read_parquet($files, union_by_name = true) AS t
    JOIN cluster_runs AS r ON t.file_index = r.fid
), m AS (
    SELECT fid, bursts, origin_s, block_s, arrival_s, done,
           slo_e2e_s, slo_ttft_s, slo_tpot_s,
           CASE WHEN done THEN end_s - arrival_s ELSE 'inf'::DOUBLE END AS latency,
           CASE WHEN has_first THEN first_token_s - arrival_s ELSE 'inf'::DOUBLE END AS ttft,
           CASE WHEN done AND has_first THEN
                CASE WHEN output_tokens > 1
                     THEN (end_s - first_token_s) / (output_tokens - 1) ELSE 0.0 END
                ELSE 'inf'::DOUBLE END AS tpot
    FROM q
)
SELECT fid,
       CASE WHEN bursts THEN arrival_s
            WHEN block_s > 0 THEN floor((arrival_s - origin_s) / block_s)
            ELSE 0.0 END AS cluster,
       count(*) AS n, count(*) FILTER (WHERE NOT ({_GOOD})) AS v
FROM m
GROUP BY ALL
"""

_STEP_SQL = """
SELECT r.fid, count(*) AS n_steps, min(t.start_s) AS first_s, max(t.end_s) AS last_s
FROM read_parquet($files, union_by_name = true) AS t
JOIN step_files AS r ON t.file_index = r.i
GROUP BY r.fid
"""

_MERGE_SQL = """
SELECT r.fid, t.start_s, t.end_s
FROM read_parquet($files, union_by_name = true) AS t
JOIN merge_files AS r ON t.file_index = r.i
"""


def _connect(threads: int, memory_limit: str, temp_dir: str | None) -> duckdb.DuckDBPyConnection:
    # no replacement scans: every table a query reads is registered by name, never found
    # among the caller's local variables
    con = duckdb.connect(config={"threads": int(threads), "memory_limit": memory_limit,
                                 "preserve_insertion_order": False,
                                 "python_enable_replacements": False})
    if temp_dir:
        con.execute(f"SET temp_directory = '{temp_dir}'")
    return con


def _duck_error(exc: Exception, files) -> InputError:
    """Name the file a DuckDB failure was about (or find it by opening each one)."""
    text = str(exc)
    for f in files:
        if f in text or Path(f).as_posix() in text:
            return InputError(f"cannot scan Parquet ({text.splitlines()[0]})", file=f,
                              fix="the file is corrupt or truncated; rerun this run")
    for f in files:
        try:
            pq.read_table(f)
        except Exception as inner:  # noqa: BLE001
            return InputError(f"cannot read Parquet ({inner})", file=f,
                              fix="the file is corrupt or truncated; rerun this run")
    m = re.search(r"'([^']+\.parquet)'", text)
    return InputError(f"scan failed ({text.splitlines()[0]})", file=m.group(1) if m else None,
                      fix="run `evalkit validate` on the run store")


def _batches(runs: pd.DataFrame, batch_rows: int):
    start, rows = 0, 0
    for i, n in enumerate(runs["n_rows"]):
        if rows and rows + n > batch_rows:
            yield runs.iloc[start:i]
            start, rows = i, 0
        rows += n
    if start < len(runs):
        yield runs.iloc[start:]


def _query_files(con, table: str, keep: pd.DataFrame, column: str, sql: str) -> pd.DataFrame:
    """Run ``sql`` over the files in ``keep[column]``; ``table`` maps file index to run fid."""
    files = list(keep[column])
    con.register(table, pd.DataFrame({"i": np.arange(len(keep)), "fid": keep["fid"].to_numpy()}))
    try:
        return con.execute(sql, {"files": files}).df()
    except DATA_ERRORS as exc:
        raise _duck_error(exc, files) from exc
    finally:
        con.unregister(table)


def _merge_windows(con, batch: pd.DataFrame) -> dict:
    """Raw merge windows of each run of the batch: ``{fid: (start_s (k,), end_s (k,))}``."""
    keep = batch[batch["n_merge_rows"] > 0]
    if keep.empty:
        return {}
    merges = _query_files(con, "merge_files", keep, "merges_file", _MERGE_SQL)
    return {int(fid): (g["start_s"].to_numpy(float), g["end_s"].to_numpy(float))
            for fid, g in merges.groupby("fid", sort=True)}


MAX_BUCKETS = 4096     # per run; more window ends per bucket only widens the CASE


def _window_lookup(raw: dict, batch: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Bucketed search table over each run's union of merge windows.

    A run's union windows ``ws, we`` (m,) are cut into ``n_buckets`` buckets of
    ``bucket_s`` from ``origin_s = ws[0]``.  For bucket b starting at ``t_b``, the
    candidates are windows ``j0 - 1 .. j0 + e_max`` with ``j0 = searchsorted(we, t_b,
    "right")`` and ``e_max`` the most window ends inside one bucket, so the first window
    ending after any ``lo`` in the bucket is among them (the one below ``j0`` covers
    rounding of ``floor((lo - origin_s) / bucket_s)`` at the bucket edge).  Missing
    candidates: ``we = -inf`` below the first window, ``we = ws = +inf`` past the last.

    Returns (per-run bucket parameters, lookup rows, number of candidates).
    """
    params = pd.DataFrame({"fid": batch["fid"].to_numpy(), "origin_s": 0.0, "bucket_s": 1.0,
                           "n_buckets": 1})
    tables, spans = [], {}
    for fid, (s, e) in raw.items():
        ws, we = metrics.union_windows(s, e)
        extent = float(we[-1] - ws[0])
        b_min = float(np.min(np.diff(we))) if we.size > 1 else extent
        width = max(b_min, extent / MAX_BUCKETS)
        nb = int(np.floor(extent / width)) + 2
        t = ws[0] + width * np.arange(nb)
        j0 = np.searchsorted(we, t, side="right")
        ends_inside = np.searchsorted(we, t + width, side="right") - j0
        spans[fid] = (ws, we, float(ws[0]), width, nb, j0, int(ends_inside.max()))
    n_cand = (max(v[6] for v in spans.values()) + 2) if spans else 0
    for fid, (ws, we, origin, width, nb, j0, _) in spans.items():
        row = params["fid"] == fid
        params.loc[row, ["origin_s", "bucket_s", "n_buckets"]] = [origin, width, nb]
        cols = {"fid": np.full(nb, fid, np.int64), "bucket": np.arange(nb, dtype=np.int64)}
        wsx = np.concatenate([[np.inf], ws, np.full(n_cand, np.inf)])
        wex = np.concatenate([[-np.inf], we, np.full(n_cand, np.inf)])
        for i in range(n_cand):
            idx = j0 + i          # candidate j0 - 1 + i, shifted by the -inf/+inf padding
            cols[f"ws{i}"], cols[f"we{i}"] = wsx[idx], wex[idx]
        tables.append(pd.DataFrame(cols))
    lookup = (pd.concat(tables, ignore_index=True) if tables else
              pd.DataFrame({"fid": pd.Series([], dtype=np.int64),
                            "bucket": pd.Series([], dtype=np.int64)}))
    params["n_buckets"] = params["n_buckets"].astype(np.int64)
    return params, lookup, n_cand


def _step_rates(con, batch: pd.DataFrame) -> pd.DataFrame:
    """Step count and extent per run with steps.parquet (``metrics.step_rate`` uses them)."""
    keep = batch[batch["steps_file"].map(lambda f: isinstance(f, str))]
    if keep.empty:
        return pd.DataFrame({"fid": batch["fid"].to_numpy(), "n_steps": 0,
                             "first_s": np.nan, "last_s": np.nan})
    steps = _query_files(con, "step_files", keep, "steps_file", _STEP_SQL)
    return steps[["fid", "n_steps", "first_s", "last_s"]]


def _v_intervals(con, batch: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """Cluster-robust V interval per run (:mod:`evalkit.runlog.vinterval`): the same
    clusters as the arrow engine, counted by DuckDB, the interval from the counts."""
    runs = agg[["fid", "n_requests", "n_arrival_times", "first_arrival_s",
                "last_arrival_s"]].merge(batch[["fid", "slo_e2e_s", "slo_ttft_s", "slo_tpot_s"]],
                                         on="fid")
    runs["bursts"] = [vinterval.uses_bursts(n, u) for n, u in
                      zip(runs["n_requests"], runs["n_arrival_times"])]
    runs["origin_s"] = runs["first_arrival_s"].astype(float)
    runs["block_s"] = [vinterval.block_length(a, b) for a, b in
                       zip(runs["first_arrival_s"], runs["last_arrival_s"])]
    con.register("cluster_runs", runs[["fid", "bursts", "origin_s", "block_s", "slo_e2e_s",
                                       "slo_ttft_s", "slo_tpot_s"]])
    files = list(batch["requests_file"])
    try:
        counts = con.execute(_CLUSTER_SQL, {"files": files}).df()
    except DATA_ERRORS as exc:
        raise _duck_error(exc, files) from exc
    finally:
        con.unregister("cluster_runs")
    counts = counts.sort_values(["fid", "cluster"], kind="stable")
    bursts = dict(zip(runs["fid"], runs["bursts"]))
    block_s = dict(zip(runs["fid"], runs["block_s"]))
    rows = []
    for fid, g in counts.groupby("fid", sort=True):
        kind = vinterval.BURSTS if bursts[fid] else vinterval.BLOCKS
        low, high, _, clusters = vinterval.robust_v_fit(
            g["n"].to_numpy(float), g["v"].to_numpy(float), kind, block_s=float(block_s[fid]))
        rows.append((fid, low, high, clusters))
    return pd.DataFrame(rows, columns=["fid", "v_ci_low", "v_ci_high", "v_ci_clusters"])


def _scan_batch(con, batch: pd.DataFrame) -> pd.DataFrame:
    """Aggregates of one batch of runs; ``fid`` is renumbered 0.. to match ``file_index``."""
    batch = batch.assign(global_fid=batch["fid"].to_numpy(), fid=np.arange(len(batch)))
    raw = _merge_windows(con, batch)
    params, lookup, n_cand = _window_lookup(raw, batch)
    runs = batch[["fid", "slo_e2e_s", "slo_ttft_s", "slo_tpot_s", "horizon_s"]].merge(
        params, on="fid")
    con.register("batch_runs", runs)
    con.register("lookup", lookup)
    files = list(batch["requests_file"])
    try:
        agg = con.execute(_request_sql(n_cand), {"files": files}).df()
    except DATA_ERRORS as exc:
        raise _duck_error(exc, files) from exc
    finally:
        con.unregister("lookup")
        con.unregister("batch_runs")
    agg = agg.merge(_v_intervals(con, batch, agg), on="fid", how="left")
    agg = agg.merge(_step_rates(con, batch), on="fid", how="left")
    agg = agg.merge(batch[["fid", "horizon_s", "merge_duration_s"]], on="fid")
    span_start = agg["first_arrival_s"].to_numpy(float)
    span_end = np.minimum(agg["horizon_s"].to_numpy(float),
                          np.maximum(agg["last_end_s"].to_numpy(float),
                                     agg["last_arrival_s"].to_numpy(float)))
    k_obs, t_exp, rates = [], [], []
    steps = agg[["n_steps", "first_s", "last_s"]].fillna({"n_steps": 0}).to_numpy(float)
    for fid, lo, hi, (n_steps, first_s, last_s) in zip(agg["fid"], span_start, span_end, steps):
        s, e = raw.get(int(fid), (np.empty(0), np.empty(0)))
        k_obs.append(metrics.windows_observed(s, e, (lo, hi)))
        t_exp.append(metrics.time_exposure(s, e, (lo, hi)))
        rates.append(metrics.step_rate(int(n_steps), first_s, last_s, s, e))
    agg["step_rate"] = rates
    agg["k_total"] = [len(raw.get(int(f), (np.empty(0),))[0]) for f in agg["fid"]]
    agg["k_observed"] = np.asarray(k_obs, dtype=np.int64)
    agg["exposure_time"] = t_exp
    agg["span_start_s"], agg["span_end_s"] = span_start, span_end
    agg["fid"] = batch["global_fid"].to_numpy()[agg["fid"].to_numpy()]
    return agg.drop(columns=["horizon_s", "merge_duration_s", "n_steps", "first_s", "last_s"])


# ---------------------------------------------------------------- arrow engine

def _read_columns(path: Path, columns) -> dict:
    """Only ``columns`` of one Parquet file as float (``ok``: bool) numpy arrays."""
    with _open(path, columns) as handle:
        try:
            # one thread per file: the runs themselves are spread over the worker threads
            table = handle.read(columns=list(columns), use_threads=False)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad files
            raise InputError(f"cannot read Parquet ({exc})", file=str(path),
                             fix="the file is corrupt or truncated; rerun this run") from exc
    try:
        return _from_arrow(table, columns)
    except Exception as exc:  # noqa: BLE001 - e.g. a string column where numbers belong
        raise InputError(f"cannot use the columns of {path.name} ({exc})", file=str(path),
                         fix="`evalkit validate` lists every problem") from exc


def _arrow_row(run) -> dict:
    """The summary row of one run (a row of :func:`_run_table`), read with pyarrow."""
    req = _read_columns(Path(run.requests_file), REQUEST_COLUMNS)
    if req["arrival_s"].size == 0:
        raise InputError("run has no requests: V has no denominator", file=run.requests_file,
                         fix="rerun this run")
    merges = _read_columns(Path(run.merges_file), MERGE_COLUMNS)
    steps = (_read_columns(Path(run.steps_file), MERGE_COLUMNS)
             if isinstance(run.steps_file, str) else None)
    slo = {"e2e_s": run.slo_e2e_s,
           "ttft_s": None if np.isnan(run.slo_ttft_s) else run.slo_ttft_s,
           "tpot_s": None if np.isnan(run.slo_tpot_s) else run.slo_tpot_s}
    row = {col: getattr(run, col) for col in META_COLUMNS}
    row.update(request_numbers(req, merges, steps, slo, run.merge_duration_s, run.horizon_s,
                               run=run.requests_file))
    return row


def _scan_arrow(runs: pd.DataFrame, threads: int) -> pd.DataFrame:
    rows = list(map_ordered(_arrow_row, runs.itertuples(index=False), threads))
    out = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    out = out.sort_values("run_id", kind="stable").reset_index(drop=True)
    return _dtypes(out)


# ---------------------------------------------------------------- public

ENGINES = ("arrow", "duckdb")


def scan_runs(runs_dir: str | os.PathLike, threads: int | None = 2, *,
              include_incomplete: bool = False, engine: str = "arrow",
              memory_limit: str = "1GB", batch_rows: int = BATCH_ROWS,
              temp_dir: str | None = None) -> pd.DataFrame:
    """One row per run of ``runs_dir``: the table of ``summarize_runs``, without row checks.

    Same columns (:data:`evalkit.runlog.summary.SUMMARY_COLUMNS`), dtypes and order (by
    ``run_id``); incomplete runs are left out unless ``include_incomplete``.  Unlike
    ``summarize_runs`` it does not validate each run's rows (run ``evalkit validate`` for
    that): it checks schema versions, that the Parquet files open and have the columns used.

    ``engine="arrow"`` (default, fastest): each run's files are read once, only the columns
    used, with pyarrow, and summarised with the numpy code of ``summarize_runs`` (identical
    numbers), ``threads`` runs at a time (None: every core) -- memory is a few runs.
    ``engine="duckdb"``: one ``read_parquet`` query per ``batch_rows`` request rows with
    ``threads`` DuckDB threads under ``memory_limit`` (numbers agree to ~1e-12).

    Bad input raises :class:`InputError`: mixed or unknown schema versions (naming the
    runs), missing or corrupt Parquet files (naming the file), missing columns.
    """
    if engine not in ENGINES:
        raise InputError(f"unknown scan engine {engine!r}", column="engine",
                         fix=f"use one of {', '.join(ENGINES)}")
    found = _meta_rows(runs_dir, include_incomplete)
    if engine == "arrow":
        return _scan_arrow(_run_table(found, footers=False), threads)
    runs = _run_table(found)
    con = _connect(threads or default_threads(), memory_limit, temp_dir)
    try:
        parts = [_scan_batch(con, b) for b in _batches(runs, batch_rows)]
    finally:
        con.close()
    agg = pd.concat(parts, ignore_index=True)
    out = runs.merge(agg, on="fid", how="left")
    out = out.sort_values("run_id", kind="stable").reset_index(drop=True)
    return _finish(out)


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    n = df["n_requests"].fillna(0).to_numpy(float)    # a run without rows has no group
    empty = n == 0
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise InputError("run has no requests: V has no denominator",
                         file=df["requests_file"].iloc[i], fix="rerun this run")
    n_violations = n - df["n_good"].to_numpy(float)     # V: any configured SLO missed
    df["violation_rate"] = n_violations / n
    df["e2e_violation_rate"] = df["n_e2e_violations"] / n
    low, high = metrics.clopper_pearson(n_violations, n)
    df["v_cp_low"], df["v_cp_high"] = low, high
    df["ttft_violation_rate"] = np.where(df["slo_ttft_s"].isna(), np.nan,
                                         df["n_ttft_violations"] / n)
    df["tpot_violation_rate"] = np.where(df["slo_tpot_s"].isna(), np.nan,
                                         df["n_tpot_violations"] / n)
    df["goodput_rate"] = df["n_good"] / n
    q = np.vstack(df["latency_q"].to_numpy())
    df["p50_s"], df["p95_s"], df["p99_s"] = q[:, 0], q[:, 1], q[:, 2]
    df["exposure_requests"] = df["n_exposed"] / n
    df["arrival_rate_scheduled"] = _rate(n, df["first_arrival_s"], df["last_arrival_s"])
    df["arrival_rate_achieved"] = _rate(n, df["first_sent_s"], df["last_sent_s"])
    return _dtypes(df[list(SUMMARY_COLUMNS)].copy())


def _dtypes(out: pd.DataFrame) -> pd.DataFrame:
    out["v_ci_clusters"] = out["v_ci_clusters"].astype(float)
    for col in ("n_requests", "n_failed", "k_total", "k_observed",
                "prompt_tokens_total", "output_tokens_total"):
        out[col] = out[col].astype(np.int64)
    out["draw"] = out["draw"].astype("Int64")
    out["oracle"] = out["oracle"].astype(bool)
    out["complete"] = out["complete"].astype(bool)
    return out


def _rate(n, first, last) -> np.ndarray:
    """Requests per second over the arrival (or send) window: ``(n - 1) / (last - first)``."""
    width = last.to_numpy(float) - first.to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(width > 0, (n - 1) / width, np.nan)
