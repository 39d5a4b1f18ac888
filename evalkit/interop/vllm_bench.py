"""Import a ``vllm bench serve --save-result --save-detailed`` result as one run.

vLLM's detailed result holds per-request arrays of equal length, in request order:
``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (list of s per request),
``start_times`` (send times on the client's ``perf_counter`` clock, s), ``errors`` ("" on
success) and, depending on the version, ``latencies`` or ``e2els`` (end-to-end s).  Mapping:

==================  ==========================================================
``request_id``      position in the arrays
``sent_s``          ``start_times[i] - t0``, ``t0 = min(start_times)``
``arrival_s``       = ``sent_s``: vLLM does not save the scheduled arrival, so
                    latency here is measured from the actual send and send lag is 0
``first_token_s``   ``sent_s + ttfts[i]`` (null for failed requests)
``end_s``           ``sent_s + latency`` with latency from ``latencies``, else
                    ``e2els``, else ``ttfts[i] + sum(itls[i])`` (null if failed)
``ok``              ``errors[i]`` is empty / null
==================  ==========================================================

Merge windows come from a separate CSV or JSON (``start_s``, ``end_s``; optional
``merge_idx``, ``inner_step``, ``bytes``) on the same relative clock (default) or, with
``merge_clock="absolute"``, on the client's ``perf_counter`` clock (``t0`` is subtracted).
Everything is checked before anything is written: bad input raises :class:`InputError`
naming the file and key, and leaves the run store untouched.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.interop._meta import (check_identity, check_slo, default_run_id, import_meta,
                                   publish_imports)
from evalkit.fileread import check_regular
from evalkit.jsonio import read_json
from evalkit.limits import MAX_IMPORT_JSON_BYTES, MAX_LOG_TIME_S, MAX_TOKENS

__all__ = ["import_vllm_bench", "read_merge_windows"]

PER_REQUEST_REQUIRED = ("input_lens", "output_lens", "ttfts", "start_times", "errors")
LATENCY_KEYS = ("latencies", "e2els")
PER_REQUEST_KEYS = PER_REQUEST_REQUIRED + LATENCY_KEYS + ("itls",)


SAVE_FIX = "pass the JSON file written by --save-result"


def _load_json(path: Path, fix: str = SAVE_FIX):
    """The JSON at ``path``; ``fix`` names the flag of the tool that writes it.  Read through
    the one JSON front door: a FIFO or device, an oversized or too deeply nested file and a
    duplicated key are refused (NaN and Infinity are let through: Python's json writes them,
    and the per-request checks refuse them where a value must be finite)."""
    if not path.exists():
        raise InputError("file does not exist", file=str(path), fix="check the path")
    return read_json(path, limit=MAX_IMPORT_JSON_BYTES, what="the file", fix=fix,
                     nonfinite=True)


def _numeric(values, key: str, path: Path, *, integer: bool = False,
             allow_none: bool = False, upper: float | None = None) -> np.ndarray:
    """(n,) float; every entry a finite number >= 0 (an integer if ``integer``), at most
    ``upper`` (default: :data:`MAX_TOKENS` for integers, :data:`MAX_LOG_TIME_S` for seconds,
    the bounds of ``evalkit validate``)."""
    if upper is None:
        upper = MAX_TOKENS if integer else MAX_LOG_TIME_S
    out = np.empty(len(values), dtype=float)
    for i, v in enumerate(values):
        if v is None and allow_none:
            out[i] = np.nan
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError(f"entry {i} is {v!r}, expected a number", file=str(path),
                             column=key, fix="pass an unmodified vLLM detailed result")
        if integer and float(v) != int(v):
            raise InputError(f"entry {i} is {v!r}, expected an integer token count",
                             file=str(path), column=key, fix="pass an unmodified vLLM result")
        if not math.isfinite(v) or v < 0:
            raise InputError(f"entry {i} is {v!r}, expected a finite value >= 0",
                             file=str(path), column=key, fix="pass an unmodified vLLM result")
        if v > upper:
            raise InputError(f"entry {i} is {v!r}, beyond the allowed range [0, {upper:,.0f}]"
                             + (" tokens" if integer else " s"), file=str(path), column=key,
                             fix="run logs hold " + ("token counts of one request up to "
                                                     f"{upper:,}" if integer else
                                                     f"times up to {upper:,.0f} s")
                                 + " (what evalkit validate accepts); pass an unmodified "
                                   "vLLM result")
        out[i] = v
    return out


def parse_vllm_result(path: str | os.PathLike) -> tuple[pd.DataFrame, dict]:
    """Per-request rows (evalkit ``requests`` columns) and the result's scalar fields.

    Returns ``(requests, scalars)`` where ``requests`` has n rows (n = array length) and the
    ``sent_s`` origin is the first send; ``scalars["t0_perf_counter"]`` is that origin.
    """
    path = Path(path)
    data = _load_json(path)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object (vLLM bench result)", file=str(path),
                         fix="pass the JSON file written by --save-result --save-detailed")
    for key in PER_REQUEST_REQUIRED:
        if key not in data:
            fix = ("rerun `vllm bench serve` with --save-result --save-detailed"
                   if key != "start_times" else
                   "this vLLM version does not save per-request send times; rerun with a "
                   "vLLM whose detailed result has start_times (needed to place requests "
                   "relative to merge windows)")
            raise InputError("per-request key missing", file=str(path), column=key, fix=fix)
    lat_key = next((k for k in LATENCY_KEYS if k in data), None)
    if lat_key is None and "itls" not in data:
        raise InputError("no end-to-end latency: neither latencies, e2els nor itls present",
                         file=str(path), column="latencies",
                         fix="rerun `vllm bench serve` with --save-detailed")
    present = [k for k in PER_REQUEST_KEYS if k in data]
    for key in present:
        if not isinstance(data[key], list):
            raise InputError(f"expected a per-request list, got {type(data[key]).__name__}",
                             file=str(path), column=key, fix="pass an unmodified vLLM result")
    n = len(data["start_times"])
    for key in present:
        if len(data[key]) != n:
            raise InputError(f"has {len(data[key])} entries but start_times has {n}",
                             file=str(path), column=key,
                             fix="per-request arrays must cover the same requests; this "
                                 "result may list only successful requests in some arrays "
                                 "- rerun with an unmodified vLLM --save-detailed")
    if n == 0:
        raise InputError("the result holds no requests", file=str(path), column="start_times",
                         fix="import a benchmark that sent requests")

    errors = data["errors"]
    for i, e in enumerate(errors):
        if e is not None and not isinstance(e, str):
            raise InputError(f"entry {i} is {e!r}, expected a string or null", file=str(path),
                             column="errors", fix="pass an unmodified vLLM result")
    ok = np.array([not e for e in errors], dtype=bool)
    start = _numeric(data["start_times"], "start_times", path, upper=math.inf)
    prompt = _numeric(data["input_lens"], "input_lens", path, integer=True)
    output = _numeric(data["output_lens"], "output_lens", path, integer=True)
    ttft = _numeric(data["ttfts"], "ttfts", path, allow_none=True)
    if lat_key is not None:
        latency = _numeric(data[lat_key], lat_key, path, allow_none=True)
    else:
        latency = np.empty(n)
        for i, itl in enumerate(data["itls"]):
            if not isinstance(itl, list):
                raise InputError(f"entry {i} is {itl!r}, expected a list", file=str(path),
                                 column="itls", fix="pass an unmodified vLLM result")
            latency[i] = ttft[i] + float(np.sum(_numeric(itl, f"itls[{i}]", path)))
    bad = ok & (np.isnan(ttft) | np.isnan(latency))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"successful request {i} has no ttft/latency", file=str(path),
                         column="ttfts" if np.isnan(ttft[i]) else lat_key,
                         fix="pass an unmodified vLLM result")
    early = ok & (latency + 1e-9 < ttft)
    if early.any():
        i = int(np.flatnonzero(early)[0])
        raise InputError(f"request {i} finishes ({latency[i]} s) before its first token "
                         f"({ttft[i]} s)", file=str(path), column=lat_key or "itls",
                         fix="pass an unmodified vLLM result")

    t0 = float(start.min())
    sent = start - t0
    late = np.flatnonzero((sent > MAX_LOG_TIME_S) | (sent + np.nan_to_num(latency)
                                                      > MAX_LOG_TIME_S))
    if late.size:
        i = int(late[0])
        raise InputError(f"request {i} ends {sent[i] + np.nan_to_num(latency[i]):.6g} s after "
                         f"the first send (start_times[{i}] = {float(start[i])!r}), beyond the allowed "
                         f"range [0, {MAX_LOG_TIME_S:,.0f}] s", file=str(path),
                         column="start_times",
                         fix="one run spans at most that long (what evalkit validate accepts); "
                             "pass an unmodified vLLM result whose start_times share one "
                             "perf_counter clock")
    requests = pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64),
        "arrival_s": sent,
        "sent_s": sent,
        "first_token_s": np.where(ok, sent + np.nan_to_num(ttft), np.nan),
        "end_s": np.where(ok, sent + np.nan_to_num(latency), np.nan),
        "prompt_tokens": prompt.astype(np.int64),
        "output_tokens": output.astype(np.int64),
        "ok": ok,
        "error": pd.array([None if not e else e for e in errors], dtype="string"),
    })
    scalars = {k: v for k, v in data.items()
               if isinstance(v, (str, int, float, bool)) or v is None}
    scalars["t0_perf_counter"] = t0
    scalars["latency_source"] = lat_key or "ttfts+itls"
    return requests, scalars


MERGE_COLUMNS = ("start_s", "end_s")


def read_merge_windows(path: str | os.PathLike, *, offset_s: float = 0.0) -> pd.DataFrame:
    """Merge windows from CSV or JSON (a list of objects, ``{"merges": [...]}``, or an object
    of equal-length arrays); ``offset_s`` is subtracted from both ends.  Checked: numeric,
    ``start_s < end_s``, no overlaps.  Sorted by start, ``merge_idx`` assigned if absent."""
    path = Path(path)
    if not path.exists():
        raise InputError("merge-window file does not exist", file=str(path),
                         fix="pass the CSV/JSON of merge windows (start_s, end_s)")
    if path.suffix.lower() == ".json":
        data = _load_json(path)
        if isinstance(data, dict) and "merges" in data:
            data = data["merges"]
        try:
            df = pd.DataFrame(data)
        except (ValueError, TypeError) as exc:
            raise InputError(f"cannot read merge windows ({exc})", file=str(path),
                             fix='use [{"start_s": .., "end_s": ..}, ...]') from exc
    else:
        check_regular(path, "the merge-window file")      # a FIFO would block pandas
        try:
            df = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read merge windows as CSV ({exc})", file=str(path),
                             fix="a CSV with header start_s,end_s") from exc
    for col in MERGE_COLUMNS:
        if col not in df.columns:
            raise InputError("merge windows lack a column", file=str(path), column=col,
                             fix="give start_s and end_s in seconds for every merge")
    for col in MERGE_COLUMNS + tuple(c for c in ("merge_idx", "inner_step", "bytes")
                                     if c in df.columns):
        values = pd.to_numeric(df[col], errors="coerce")
        nullable = col in ("inner_step", "bytes")
        bad = values.isna() & ~(df[col].isna() & nullable)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"row {i}: {df[col].iloc[i]!r} is not a number", file=str(path),
                             column=col, fix="merge times are numbers in seconds")
        df[col] = values
    df = df.sort_values("start_s", kind="stable").reset_index(drop=True)
    df["start_s"] = df["start_s"] - offset_s
    df["end_s"] = df["end_s"] - offset_s
    if (df["end_s"] <= df["start_s"]).any():
        i = int(np.flatnonzero((df["end_s"] <= df["start_s"]).to_numpy())[0])
        raise InputError(f"merge window {i} ends before it starts", file=str(path),
                         column="end_s", fix="each window needs start_s < end_s")
    if len(df) > 1 and (df["start_s"].to_numpy()[1:] < df["end_s"].to_numpy()[:-1]).any():
        raise InputError("merge windows overlap", file=str(path), column="start_s",
                         fix="one trainer merges one window at a time; fix the windows")
    if "merge_idx" not in df.columns:
        df["merge_idx"] = np.arange(len(df), dtype=np.int64)
    for col in ("inner_step", "bytes"):
        if col in df.columns:
            df[col] = df[col].astype("Int64")
    return df


# What the bench measured or when it ran (this run's own: the runs of one seed differ in
# them), as opposed to how it was configured (compared between the runs of a seed).  They go
# to settings.effective.imported, which like-for-like leaves out; an unknown key counts as
# configuration, so like-for-like stays fail closed.
_MEASURED_KEYS = {"date", "duration", "completed", "failed", "total_input_tokens",
                  "total_output_tokens", "request_throughput", "request_goodput",
                  "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
                  "max_concurrent_requests", "t0_perf_counter"}
_MEASURED_PREFIXES = ("mean_", "median_", "std_", "p25_", "p50_", "p75_", "p90_", "p95_",
                      "p99_", "p999_")


def _measured(key: str) -> bool:
    return key in _MEASURED_KEYS or key.startswith(_MEASURED_PREFIXES) or key.endswith("_ms")


def _trace_identity(requests: pd.DataFrame) -> str:
    """Hash of the prompt-length sequence: runs replaying the same prompts in the same order
    share it (send times differ between replays, so they are left out)."""
    return hashlib.sha256(requests["prompt_tokens"].to_numpy(np.int64).tobytes()).hexdigest()


def import_vllm_bench(result_json, runs_dir, *, policy: str, seed: int,
                      merges=None, regime: str = "default", role: str = "policy",
                      draw: int | None = None, matched_to: str | None = None,
                      slo_e2e_s: float, slo_ttft_s: float | None = None,
                      slo_tpot_s: float | None = None, merge_duration_s: float | None = None,
                      min_gap_s: float | None = None, max_gap_s: float | None = None,
                      horizon_s: float | None = None, oracle: bool = False,
                      merge_clock: str = "relative", run_id: str | None = None,
                      trace_name: str | None = None, replace: bool = False) -> Path:
    """Write one run (backend ``import``) from a vLLM detailed result; return its directory.

    An existing run of the same id is an InputError unless ``replace`` (then it is moved
    aside as ``.<id>.replaced-*``, never deleted)."""
    result_json = Path(result_json)
    check_identity(role, draw, matched_to, where=str(result_json))
    slo = check_slo(slo_e2e_s, slo_ttft_s, slo_tpot_s, where=str(result_json))
    requests, scalars = parse_vllm_result(result_json)
    if merge_clock not in ("relative", "absolute"):
        raise InputError(f"unknown merge clock {merge_clock!r}", column="merge_clock",
                         fix="use 'relative' (s from the first request) or 'absolute' "
                             "(the bench client's perf_counter clock)")
    if merges is None:
        if role != "no_sync":
            raise InputError(f"a {role} run needs its merge windows", column="merges",
                             fix="pass --merges FILE (CSV/JSON with start_s, end_s)")
        merges_df = pd.DataFrame({"merge_idx": pd.Series([], dtype=np.int64),
                                  "start_s": pd.Series([], dtype=float),
                                  "end_s": pd.Series([], dtype=float)})
    else:
        offset = scalars["t0_perf_counter"] if merge_clock == "absolute" else 0.0
        merges_df = read_merge_windows(merges, offset_s=offset)
        if role == "no_sync" and len(merges_df):
            raise InputError("a no_sync run cannot have merge windows", file=str(merges),
                             fix="drop --merges or change --role")
    last = float(np.nanmax(np.concatenate([requests["end_s"].to_numpy(),
                                           requests["sent_s"].to_numpy()])))
    if horizon_s is None:
        horizon_s = last
    if merge_duration_s is None:
        if not len(merges_df):
            raise InputError("no merges to take the merge duration from",
                             column="merge_duration_s", fix="pass --merge-duration SECONDS")
        merge_duration_s = float(np.median(merges_df["end_s"] - merges_df["start_s"]))
    notes = [f"imported from vLLM bench result {result_json.name}",
             "arrival_s = sent_s: vLLM saves no scheduled arrivals; latency is from the send",
             f"end-to-end latency from {scalars['latency_source']}",
             "host is the importing machine, not the benchmark host"]
    if min_gap_s is None or max_gap_s is None:
        notes.append("corridor not supplied: min_gap_s=0, max_gap_s=horizon_s (unconstrained)")
    corridor = {"min_gap_s": float(0.0 if min_gap_s is None else min_gap_s),
                "max_gap_s": float(horizon_s if max_gap_s is None else max_gap_s)}
    sha = _trace_identity(requests)
    name = trace_name or str(scalars.get("dataset_name") or "vllm-bench")
    imported = {k: v for k, v in scalars.items() if _measured(k)}
    imported["source"] = result_json.name
    requested = {k: v for k, v in scalars.items() if k not in imported
                 and k != "latency_source"}
    effective = {"imported": imported}
    run_id = run_id or default_run_id(regime, policy, role, seed, draw, matched_to)
    meta = import_meta(
        run_id=run_id, policy=policy, role=role, seed=seed, draw=draw, matched_to=matched_to,
        regime=regime, trace={"name": name, "sha256": sha},
        slo=slo.to_dict(),
        merge_duration_s=merge_duration_s, horizon_s=horizon_s, corridor=corridor,
        oracle=oracle, settings={"requested": requested, "effective": effective},
        rng_seeds={"seed": int(seed)}, notes=notes, engine="vllm bench serve")
    (path,) = publish_imports(runs_dir, [(meta, requests, merges_df)], replace=replace,
                              where=str(result_json))
    return path
