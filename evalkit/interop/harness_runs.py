"""What the serving-benchmark importers (AIPerf, inference-perf) share: one benchmark run as
read from a harness's files (:class:`HarnessRun`), the checks on a per-request value, the
configuration hash, and the write of such runs as evalkit runs.

A reader (``evalkit.interop.aiperf.read_aiperf``, ``evalkit.interop.inference_perf.
read_inference_perf``) returns a list of :class:`HarnessRun`, one per result file or per
repetition, in the harness's order; ``requests`` has the run-log request columns (seconds
from the run's first arrival) so a caller that compares runs can summarise them without
writing anything.  :func:`write_harness_runs` writes them with the command line's SLO and
identity (backend ``import``; the harness, its version and the configuration hash under
``settings.effective.source``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.interop._meta import (check_identity, check_slo, default_run_id, import_meta,
                                   publish_imports)
from evalkit.interop.vllm_bench import _trace_identity, read_merge_windows
from evalkit.jsonio import canonical_json
from evalkit.limits import MAX_LOG_TIME_S, MAX_TOKENS
from evalkit.runlog.schema import short_repr

__all__ = ["HarnessRun", "config_sha256", "load_label", "nonneg_number", "requests_frame",
           "whole_number", "write_harness_runs"]


@dataclass
class HarnessRun:
    tool: str                        # "aiperf" | "inference-perf"
    tool_version: str
    source: str                      # the per-request file, as given or found
    label: str                       # load setting, e.g. "concurrency@2", "constant@4"
    repetition: int | None           # the harness's repetition index (AIPerf run_NNNN)
    requests: pd.DataFrame           # run-log request columns + source_request_id
    config_sha256: str               # the configuration, output location and seeds left out
    tool_seed: object                # the harness's random seed(s), recorded beside the hash
    measured: dict = field(default_factory=dict)   # the harness's own counts and times
    notes: list = field(default_factory=list)


def config_sha256(config: dict) -> str:
    """sha256 of the configuration as canonical JSON: two runs of one configuration share it."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


def nonneg_number(value, *, where: str, column: str, fix: str, integer: bool = False) -> float:
    """``value`` as a float: a finite number >= 0 (a whole number if ``integer``), else an
    InputError naming ``column``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{short_repr(value)} is not a number", file=where, column=column,
                         fix=fix)
    try:
        number = float(value)
    except OverflowError:       # an integer beyond any float
        raise InputError(f"{short_repr(value)} is too large to be a time or a count",
                         file=where, column=column, fix=fix) from None
    if not math.isfinite(number) or number < 0:
        raise InputError(f"{short_repr(value)} is not a finite number >= 0", file=where,
                         column=column, fix=fix)
    value = number
    if integer and float(value) != math.floor(value):
        raise InputError(f"{value!r} is not a whole number of tokens", file=where,
                         column=column, fix=fix)
    return float(value)


def load_label(kind: str, value, *, where: str, column: str) -> str:
    """``KIND@VALUE`` (``concurrency@2``, ``constant@4``): the load setting a run's regime
    and trace are named after."""
    number = nonneg_number(value, where=where, column=column,
                           fix="a load setting is a finite number >= 0")
    return f"{kind}@{number:g}"


def whole_number(value, *, where: str, column: str, fix: str) -> int:
    """A token count in [0, MAX_TOKENS] (what ``evalkit validate`` accepts)."""
    v = nonneg_number(value, where=where, column=column, fix=fix, integer=True)
    if v > MAX_TOKENS:
        raise InputError(f"{v:.6g} tokens is beyond the allowed range [0, {MAX_TOKENS:,}]",
                         file=where, column=column,
                         fix="token counts of one request lie in that range (what evalkit "
                             "validate accepts); " + fix)
    return int(v)


def requests_frame(rows: list[dict], *, where: str, time_column: str, fix: str) -> pd.DataFrame:
    """Run-log requests from rows of absolute times on one clock (``arrival``, ``sent``,
    ``first`` (NaN: none), ``end`` (NaN for a failed request)), tokens, ``ok``, ``error``
    and ``source_request_id``: sorted by arrival, times made seconds from the first arrival
    and checked against :data:`MAX_LOG_TIME_S` (``time_column`` names the file's field)."""
    df = pd.DataFrame(rows)
    arrival = df["arrival"].to_numpy(dtype=float)
    order = np.lexsort((df["sent"].to_numpy(dtype=float), arrival))
    df = df.iloc[order].reset_index(drop=True)
    t0 = float(arrival.min())
    times = {k: df[k].to_numpy(dtype=float) - t0 for k in ("arrival", "sent", "first", "end")}
    with np.errstate(invalid="ignore"):
        late = np.flatnonzero(np.nan_to_num(np.maximum.reduce(
            [times[k] for k in ("arrival", "sent", "first", "end")])) > MAX_LOG_TIME_S)
    if late.size:
        i = int(late[0])
        raise InputError(f"request {df['source_request_id'][i]} has a time "
                         f"{np.nanmax([times[k][i] for k in times]):.6g} s after the run's "
                         f"first arrival, beyond the allowed range [0, {MAX_LOG_TIME_S:,.0f}] s",
                         file=where, column=time_column,
                         fix="one run spans at most that long (what evalkit validate accepts); "
                             + fix)
    return pd.DataFrame({
        "request_id": np.arange(len(df), dtype=np.int64),
        "arrival_s": times["arrival"],
        "sent_s": times["sent"],
        "first_token_s": times["first"],
        "end_s": times["end"],
        "prompt_tokens": df["prompt_tokens"].to_numpy(dtype=np.int64),
        "output_tokens": df["output_tokens"].to_numpy(dtype=np.int64),
        "ok": df["ok"].to_numpy(dtype=bool),
        "error": pd.array(df["error"].to_numpy(dtype=object), dtype="string"),
        "source_request_id": pd.array(df["source_request_id"].astype(str).to_numpy(),
                                      dtype="string"),
    })


def _no_merges() -> pd.DataFrame:
    return pd.DataFrame({"merge_idx": pd.Series([], dtype=np.int64),
                         "start_s": pd.Series([], dtype=float),
                         "end_s": pd.Series([], dtype=float)})


def write_harness_runs(runs: list[HarnessRun], runs_dir, *, where: str, policy: str,
                       seed: int, regime: str | None = None, role: str = "policy",
                       draw: int | None = None, matched_to: str | None = None,
                       slo_e2e_s: float, slo_ttft_s: float | None = None,
                       slo_tpot_s: float | None = None, merges=None,
                       merge_duration_s: float | None = None, min_gap_s: float | None = None,
                       max_gap_s: float | None = None, horizon_s: float | None = None,
                       oracle: bool = False, trace_name: str | None = None,
                       replace: bool = False) -> list[Path]:
    """Write ``runs`` (from one reader) as evalkit runs; return their directories.

    Run ``i`` (0-based, in the reader's order) gets seed ``seed + i``: repetitions are
    replications.  Its regime is ``REGIME-LABEL`` (default ``TOOL-LABEL``).  Merge windows
    (``merges``: seconds from the run's first arrival) need exactly one run.  Nothing is
    written unless every run passes, and no existing run is replaced unless ``replace``.
    """
    check_identity(role, draw, matched_to, where=where)
    slo = check_slo(slo_e2e_s, slo_ttft_s, slo_tpot_s, where=where)
    if merges is None and role != "no_sync":
        raise InputError(f"a {role} run needs its merge windows", column="--merges",
                         fix="pass --merges FILE (CSV/JSON with start_s, end_s, seconds from "
                             "the run's first arrival), or import a baseline with --role "
                             "no_sync")
    if merges is not None and role == "no_sync":
        raise InputError("a no_sync run cannot have merge windows", file=str(merges),
                         column="--merges", fix="drop --merges or change --role")
    if merges is not None and len(runs) > 1:
        raise InputError(f"one merge-window file for {len(runs)} runs is ambiguous",
                         file=where, column="--merges",
                         fix="import the repetitions one at a time (pass one run's files)")
    planned = []
    for i, run in enumerate(runs):
        req = run.requests
        last = float(np.nanmax(np.concatenate([req["end_s"].to_numpy(),
                                               req["sent_s"].to_numpy()])))
        horizon = float(last if horizon_s is None else horizon_s)
        m = _no_merges() if merges is None else read_merge_windows(merges)
        d = merge_duration_s
        if d is None:
            if not len(m):
                raise InputError("no merge window to take the merge duration from",
                                 file=where, column="--merge-duration",
                                 fix="pass --merge-duration SECONDS")
            d = float(np.median(m["end_s"] - m["start_s"]))
        reg = f"{regime or run.tool}-{run.label}"
        run_seed = int(seed) + i
        notes = list(run.notes)
        if len(runs) > 1:
            notes.append(f"run {i} of {len(runs)} read from the same input: seed {seed} + {i}")
        notes.append("host is the importing machine, not the benchmark host")
        if min_gap_s is None or max_gap_s is None:
            notes.append("corridor not supplied: min_gap_s=0, max_gap_s=horizon_s "
                         "(unconstrained)")
        corridor = {"min_gap_s": float(0.0 if min_gap_s is None else min_gap_s),
                    "max_gap_s": float(horizon if max_gap_s is None else max_gap_s)}
        source = {"tool": run.tool, "tool_version": run.tool_version,
                  "config_sha256": run.config_sha256, "load": run.label,
                  "repetition": run.repetition}
        imported = dict(run.measured, source=Path(run.source).name, tool_seed=run.tool_seed)
        meta = import_meta(
            run_id=default_run_id(reg, policy, role, run_seed, draw, matched_to),
            policy=policy, role=role, seed=run_seed, draw=draw, matched_to=matched_to,
            regime=reg, trace={"name": trace_name or f"{run.tool}-{run.label}",
                               "sha256": _trace_identity(req)},
            slo=slo.to_dict(), merge_duration_s=d, horizon_s=horizon, corridor=corridor,
            oracle=oracle, settings={"requested": {"merges": None if merges is None
                                                   else Path(merges).name},
                                     "effective": {"source": source, "imported": imported}},
            rng_seeds={"seed": run_seed}, notes=notes, engine=run.tool)
        planned.append((meta, req, m))
    return publish_imports(runs_dir, planned, replace=replace, where=where)
