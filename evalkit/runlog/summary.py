"""One row of protocol quantities per run (V, latency percentiles, K, exposure, load).

Column names are a contract other modules depend on (:data:`SUMMARY_COLUMNS`).  Every V
has its denominator (``n_requests``); failed requests count as violations and as ``inf``
latency.  ``violation_rate`` (V) is the share of requests that miss *any* configured SLO
(end-to-end, TTFT, TPOT; vLLM's goodput definition: ``V = 1 - goodput_rate``); the
per-SLO breakdown is ``e2e_violation_rate``, ``ttft_violation_rate`` and
``tpot_violation_rate`` (NaN where that SLO is not configured), with ``n_failed``.  ``v_ci_low``/``v_ci_high`` is the cluster-robust 95% interval on V
(:mod:`evalkit.runlog.vinterval`: time blocks, or bursts of identical arrivals;
``v_ci_clusters`` is the effective number of independent clusters it rests on, bursts or
blocks over the measured dependence, not the count of blocks); ``v_cp_low``/``v_cp_high`` the Clopper–Pearson interval that
treats requests as independent (too narrow when violations cluster).  ``k_observed`` counts merges inside the observed span (protocol pitfall 3) and
the exposure columns sit next to V so that V can be regressed on exposure (pitfall 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from evalkit.errors import InputError
from evalkit.runlog import metrics as m
from evalkit.runlog.design import DESIGN_COLUMNS, design_facts
from evalkit.runlog.io import Run
from evalkit.runlog.validate import RunCheck, read_valid_run, validate_runs
from evalkit.runlog.vinterval import v_interval

__all__ = ["LOOP_WINDOWS", "REQUEST_COLUMNS", "SUMMARY_COLUMNS", "request_numbers",
           "summarize_arrays", "summarize_run", "summarize_runs", "unreadable_runs"]

META_COLUMNS = ("run_id", "role", "policy", "seed", "draw", "matched_to", "regime", "backend",
                "oracle", "complete", "trace_name", "trace_sha256", "trace_realisation")
SUMMARY_COLUMNS = META_COLUMNS + (
    "n_requests", "n_failed", "violation_rate", "e2e_violation_rate", "v_ci_low", "v_ci_high", "v_cp_low",
    "v_cp_high", "v_ci_clusters",
    "ttft_violation_rate", "tpot_violation_rate", "goodput_rate",
    "p50_s", "p95_s", "p99_s", "ttft_p95_s",
    "k_total", "k_observed", "exposure_requests", "exposure_time", "span_start_s", "span_end_s",
    "arrival_rate_scheduled", "arrival_rate_achieved", "send_lag_p99_s",
    "prompt_tokens_total", "output_tokens_total", "step_rate", "trainer_active_share",
    "merge_duration_s", "horizon_s", "slo_e2e_s", "slo_ttft_s", "slo_tpot_s",
)
REQUEST_COLUMNS = ("arrival_s", "sent_s", "first_token_s", "end_s", "prompt_tokens",
                   "output_tokens", "ok")
CI_CONFIDENCE = 0.95


LOOP_WINDOWS = 32   # up to this many merge windows, test each (cheaper than searchsorted)


def _overlaps(lo, hi, ws, we) -> np.ndarray:
    """(n,) bool: ``[lo, hi]`` overlaps one of the sorted, disjoint, finite windows ``ws, we``.

    Same booleans as :func:`evalkit.runlog.metrics.overlaps_windows` (which searches the
    first window ending after ``lo`` and tests its start against ``hi``): for sorted
    disjoint windows that window overlaps iff any does, and NaN compares False in both.
    For a few windows, two comparisons per window beat a binary search per request.
    """
    out = np.zeros(lo.shape, dtype=bool)
    for start, stop in zip(ws.tolist(), we.tolist()):
        out |= (lo < stop) & (hi > start)
    return out


def _count_exposed(arrival, sent, end, done, has_end, horizon, w_start, w_end) -> int:
    """Requests whose lifetime overlaps a merge window (``metrics.request_exposure``'s count).

    Lifetimes as :func:`evalkit.runlog.metrics.request_intervals`: completed requests are
    ``[arrival, end]``, the others ``[sent, end or max(horizon, sent)]``.  With a few finite
    windows the completed ones are tested on ``arrival, end`` directly and the few others
    redone, instead of building both interval arrays for every request.
    """
    ws, we = m.union_windows(w_start, w_end)
    if ws.size == 0:
        return 0
    if ws.size > LOOP_WINDOWS or not (np.isfinite(ws).all() and np.isfinite(we).all()):
        lo = np.where(done, arrival, sent)
        hi = np.where(has_end, end, np.maximum(horizon, sent))
        return int(np.count_nonzero(m.overlaps_windows(lo, hi, w_start, w_end)))
    exposed = _overlaps(arrival, end, ws, we)
    other = np.flatnonzero(~done)
    if other.size:
        s = sent[other]
        hi = np.where(has_end[other], end[other], np.maximum(horizon, s))
        exposed[other] = _overlaps(s, hi, ws, we)
    return int(np.count_nonzero(exposed))


def _sum_where(values, mask) -> int:
    """Total of ``values`` where ``mask`` (NaN counts 0): ``nansum(where(mask, values, 0))``."""
    if values.dtype.kind in "iu":
        return int(np.sum(values, where=mask))
    return int(np.nansum(np.where(mask, values, 0)))


def _rate(times: np.ndarray) -> float:
    """Requests per second: (n - 1) inter-arrival gaps over their total length; NaN if < 2."""
    if times.size < 2:
        return float("nan")
    width = float(times.max() - times.min())
    return (times.size - 1) / width if width > 0 else float("nan")


def _step_rate(steps: dict | None, merges: dict) -> float:
    if steps is None or steps["end_s"].size == 0:
        return float("nan")
    return m.step_rate(steps["end_s"].size, steps["start_s"].min(), steps["end_s"].max(),
                       merges["start_s"], merges["end_s"])


# a pause between the trainer's steps shorter than this is still training (data loading,
# logging); a longer one is an idle stretch
ACTIVE_BRIDGE_S = 1.0


def _trainer_active_share(steps: dict | None, merges: dict, horizon: float) -> float:
    """Share of the horizon [0, horizon] the trainer was stepping or merging: a trainer idle
    after 30 s of a 300 s run has 0.1 whatever its step rate while it ran.  NaN without
    steps."""
    if steps is None or steps["end_s"].size == 0 or not horizon > 0:
        return float("nan")
    starts = np.concatenate([steps["start_s"], merges["start_s"]])
    ends = np.concatenate([steps["end_s"] + ACTIVE_BRIDGE_S, merges["end_s"]])
    return m.time_exposure(starts, ends, (0.0, float(horizon)))


def summarize_arrays(meta: dict, req: dict, merges: dict, steps: dict | None = None,
                     design: bool = False) -> dict:
    """The summary row from numpy columns (``design``: plus :data:`DESIGN_COLUMNS`).

    ``req``: REQUEST_COLUMNS -> (n,) arrays (NaN for nulls); ``merges``: ``start_s``,
    ``end_s`` -> (k,); ``steps``: ``start_s``, ``end_s`` -> (s,) or None.
    """
    trace = meta.get("trace") or {}
    row = {
        "run_id": meta["run_id"], "role": meta["role"], "policy": meta["policy"],
        "seed": meta["seed"], "draw": meta.get("draw"), "matched_to": meta.get("matched_to"),
        "regime": meta["regime"], "backend": meta["backend"], "oracle": bool(meta["oracle"]),
        "complete": bool(meta["complete"]), "trace_name": trace.get("name"),
        "trace_sha256": trace.get("sha256"),
        "trace_realisation": meta.get("trace_realisation") or trace.get("sha256"),
    }
    row.update(request_numbers(req, merges, steps, meta["slo"], float(meta["merge_duration_s"]),
                               float(meta["horizon_s"]), run=meta.get("run_id")))
    out = {col: row[col] for col in SUMMARY_COLUMNS}
    if design:
        out.update(design_facts(meta, req, merges, steps))
    return out


def request_numbers(req: dict, merges: dict, steps: dict | None, slo: dict,
                    merge_duration_s: float, horizon_s: float, run=None) -> dict:
    """The request- and merge-level columns of the summary row (no run.json fields).

    Arrays as in :func:`summarize_arrays` (token counts may be int64); ``slo = {"e2e_s",
    "ttft_s", "tpot_s"}`` (None where unused).  The definitions are those of
    :mod:`evalkit.runlog.metrics`, evaluated with each intermediate array computed once
    (this is the hot loop of every scan); ``tests/runlog/test_summary.py`` checks them
    against brute force and ``tests/runlog/test_summary_fused.py`` against the metrics functions.
    """
    D, horizon = float(merge_duration_s), float(horizon_s)
    arrival, sent = m._f(req["arrival_s"]), m._f(req["sent_s"])
    first, end = m._f(req["first_token_s"]), m._f(req["end_s"])
    ok = np.asarray(req["ok"], dtype=bool)
    n = int(arrival.size)
    if n == 0:
        raise InputError("run has no requests", file=run, column="arrival_s",
                         fix="a run needs at least one request")
    has_end = np.isfinite(end)
    done = ok & has_end
    n_done = int(np.count_nonzero(done))
    not_done = ~done
    lat = end - arrival                                   # = m.e2e_latency
    lat[not_done] = np.inf
    ttft = first - arrival                                # = m.ttft
    ttft[~(ok & np.isfinite(first))] = np.inf
    flags = m.SloFlags.of(lat, ttft, lambda: m.tpot(first, end, req["output_tokens"], ok),
                          slo)
    bad = flags.violated                                  # V: any configured SLO missed
    n_viol = int(np.count_nonzero(bad))
    rates = {"e2e_violation_rate": int(np.count_nonzero(flags.e2e)) / n}
    for name, got in (("ttft_violation_rate", flags.ttft), ("tpot_violation_rate", flags.tpot)):
        rates[name] = float("nan") if got is None else int(np.count_nonzero(got)) / n
    cp_low, cp_high = m.clopper_pearson(n_viol, n, CI_CONFIDENCE)
    low, high, n_clusters, _ = v_interval(arrival, bad, CI_CONFIDENCE)
    p50, p95, p99 = m.quantiles(lat, (0.50, 0.95, 0.99))
    span = m.observed_span(arrival, end, horizon, D)
    w_start, w_end = m._f(merges["start_s"]), m._f(merges["end_s"])
    n_exposed = _count_exposed(arrival, sent, end, done, has_end, horizon, w_start, w_end)
    out_tokens = req["output_tokens"]
    return {
        "n_requests": n, "n_failed": n - n_done,
        "violation_rate": n_viol / n, "v_ci_low": low, "v_ci_high": high,
        "v_cp_low": cp_low, "v_cp_high": cp_high, "v_ci_clusters": n_clusters,
        **rates,
        "goodput_rate": (n - n_viol) / n,
        "p50_s": float(p50), "p95_s": float(p95), "p99_s": float(p99),
        "ttft_p95_s": m.quantile(ttft, 0.95),
        "k_total": int(w_start.size),
        "k_observed": m.windows_observed(w_start, w_end, span),
        "exposure_requests": n_exposed / n,
        "exposure_time": m.time_exposure(w_start, w_end, span),
        "span_start_s": span.start_s, "span_end_s": span.end_s,
        "arrival_rate_scheduled": _rate(arrival), "arrival_rate_achieved": _rate(sent),
        "send_lag_p99_s": m.quantile(sent - arrival, 0.99),
        "prompt_tokens_total": int(np.nansum(req["prompt_tokens"])),
        # generated tokens: completed requests only (failed rows hold the requested count)
        "output_tokens_total": _sum_where(out_tokens, ok),
        "step_rate": _step_rate(steps, merges),
        "trainer_active_share": _trainer_active_share(steps, merges, horizon),
        "merge_duration_s": D, "horizon_s": horizon, "slo_e2e_s": float(slo["e2e_s"]),
        "slo_ttft_s": _slo_or_nan(slo.get("ttft_s")), "slo_tpot_s": _slo_or_nan(slo.get("tpot_s")),
    }


def _slo_or_nan(value) -> float:
    return float("nan") if value is None else float(value)


def _from_frame(df: pd.DataFrame | None, cols) -> dict | None:
    if df is None:
        return None
    return {c: df[c].to_numpy(dtype=bool) if c == "ok"
            else pd.to_numeric(df[c]).to_numpy(dtype=float, na_value=np.nan) for c in cols}


def _from_arrow(table: pa.Table | None, cols) -> dict | None:
    """Arrow columns -> numpy: ``ok`` bool; integer columns without nulls stay int64 (exact,
    no copy); everything else float64 with NaN for nulls."""
    if table is None:
        return None
    out = {}
    for c in cols:
        col = table.column(c)
        if c == "ok":
            out[c] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=bool)
        elif pa.types.is_null(col.type):
            out[c] = np.full(len(table), np.nan)
        elif pa.types.is_integer(col.type) and col.null_count == 0:
            out[c] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
        else:
            if not pa.types.is_float64(col.type):
                col = col.cast(pa.float64())
            out[c] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=float)
    return out


def summarize_run(run: Run | str | os.PathLike) -> dict:
    """Summary row (dict keyed by :data:`SUMMARY_COLUMNS`) of a loaded or on-disk run (an
    on-disk run is validated first: its first error is raised)."""
    if not isinstance(run, Run):
        run = read_valid_run(run)
    return summarize_arrays(run.meta, _from_frame(run.requests, REQUEST_COLUMNS),
                            _from_frame(run.merges, ("start_s", "end_s")),
                            _from_frame(run.steps, ("start_s", "end_s")))


def _checked_columns(check: RunCheck, name: str, cols) -> dict | None:
    """The columns of table ``name`` as :func:`_from_arrow` gives them, reusing the arrays
    the checks converted (the same values: float64 times with NaN, ``ok`` bool)."""
    table = check.tables.get(name)
    if table is None:
        return None
    done = check.arrays.get(name, {})
    out = {c: done[c] for c in cols if done.get(c) is not None}
    rest = [c for c in cols if c not in out]
    if rest:
        out.update(_from_arrow(table, rest))
    return {c: out[c] for c in cols}


def _summarize_check(check: RunCheck, design: bool = True) -> dict:
    return summarize_arrays(check.meta, _checked_columns(check, "requests", REQUEST_COLUMNS),
                            _checked_columns(check, "merges", ("start_s", "end_s")),
                            _checked_columns(check, "steps", ("start_s", "end_s")),
                            design=design)


def summarize_runs(runs_dir: str | os.PathLike, include_incomplete: bool = False,
                   threads: int | None = None, design: bool = True,
                   metas: dict | None = None) -> pd.DataFrame:
    """One row per run under ``runs_dir``, sorted by run_id.

    Every run is validated first; any error raises :class:`InputError` (nothing is
    dropped silently).  Incomplete runs are excluded unless ``include_incomplete``; their ids
    are in ``df.attrs["excluded"]``.  Runs (or directories) that cannot be read for lack of
    permission are excluded too and listed, with the reason, in ``df.attrs["unreadable"]``.
    Each run's files are read once, for the checks and the row; ``threads`` runs at a time
    (None: every core).  ``design`` (default) appends :data:`DESIGN_COLUMNS`.  This is the
    one scan of a store: ``evalkit summarize`` and the audit both read runs through it.
    ``metas``, when given, receives the parsed run.json of every run whose run.json could be
    read (complete or not), keyed by the run directory, so a caller need not parse it again.
    """
    rows: list[dict] = []

    def on_run(check: RunCheck) -> None:     # in a worker thread
        if metas is not None and check.meta is not None:
            metas[Path(check.run_dir)] = check.meta
        if not check.errors:
            rows.append(_summarize_check(check, design))

    report = validate_runs(runs_dir, include_incomplete=include_incomplete, on_run=on_run,
                           threads=threads)
    blocking = [p for p in report.errors if p.kind not in ("incomplete", "unreadable")]
    if blocking:
        first = blocking[0]
        more = ""
        if len(blocking) > 1:
            more = f" (+{len(blocking) - 1} more; run `evalkit validate {runs_dir}`)"
        raise InputError(f"run {first.run}: {first.message}{more}", file=first.file,
                         column=first.column, fix=first.fix)
    if not rows:
        if report.unreadable and not report.excluded:
            first = report.unreadable[0]
            raise InputError(f"no readable runs: {first.message}", file=first.file,
                             fix=first.fix)
        raise InputError(f"no complete runs to summarise ({len(report.excluded)} incomplete run(s) "
                         "excluded)", file=str(runs_dir),
                         fix="rerun the incomplete runs (--include-incomplete to inspect them)")
    # the design facts (pairing fingerprint, merge lengths, corridor, open loop) follow the
    # summary columns: summary tables written from this carry the audit's design evidence
    df = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS) + list(DESIGN_COLUMNS if design else ()))
    df["draw"] = df["draw"].astype("Int64")
    df = df.sort_values("run_id", kind="stable").reset_index(drop=True)
    df.attrs["excluded"] = sorted(report.excluded)
    df.attrs["warnings"] = [p.format() for p in report.warnings]
    df.attrs["unreadable"] = unreadable_runs(report)
    return df


def unreadable_runs(report) -> list[dict]:
    """``{"run_id", "path", "reason"}`` per unreadable run or unlistable directory (first
    problem of each), sorted by run id; the run id is the directory name when run.json
    itself cannot be read."""
    seen: dict[str, dict] = {}
    for p in report.unreadable:
        seen.setdefault(p.run, {"run_id": p.run, "path": p.file,
                                "reason": f"unreadable: {p.message} ({p.file})"})
    return [seen[k] for k in sorted(seen)]
