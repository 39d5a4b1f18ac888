"""Import a GuideLLM ``benchmarks.json`` report: one evalkit run per benchmark (strategy/rate).

GuideLLM (0.7+: ``guidellm run ... --output kind=json,path=benchmarks.json``; earlier
``guidellm benchmark ... --output-path benchmarks.json``) writes a report whose
``benchmarks`` list holds one entry per strategy it ran (``synchronous``, ``constant@4.00``,
``poisson@8.00``, ``concurrent@16``, ...).  Each entry keeps per-request statistics under
``requests.successful`` / ``requests.errored`` / ``requests.incomplete``.  Two layouts exist:

- report schema 2 (GuideLLM 0.4+): each request has ``info.timings`` with Unix-epoch
  ``targeted_start``, ``request_start``, ``first_token_iteration``, ``request_end``, and
  ``prompt_tokens`` / ``output_tokens`` (or ``input_metrics`` / ``output_metrics``);
  the strategy is ``config.strategy``;
- the earlier layout (0.2-0.3): ``start_time``, ``first_token_time``, ``end_time`` and
  ``scheduler_info.targeted_start_time`` on each request; the strategy is ``args.strategy``.

Mapping (times are seconds from ``t0``, the benchmark's first scheduled arrival):

==================  ==============================================================
``arrival_s``       targeted (scheduled) start, else the send time; latency is from it
``sent_s``          ``request_start`` (``start_time``)
``first_token_s``   ``first_token_iteration`` (``first_token_time``)
``end_s``           ``request_end`` (``end_time``); null unless successful
``ok``              the request is in ``successful``; an errored request is a failed
                    request, so it counts as an SLO violation
==================  ==============================================================

``incomplete`` requests (cut off when the benchmark ended) are dropped by default and
counted in the run's notes; ``incomplete="violation"`` keeps them as failed requests.
A report saved with request sampling keeps only a sample of each status group: the
import says so in the notes (V is then a sample estimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.interop._meta import (check_identity, check_slo, default_run_id, import_meta,
                                   publish_imports)
from evalkit.interop.merge_spans import (CLOCK_FLAG, Span, clock_hint, describe_outside,
                                         describe_spans, outside_every_span)
from evalkit.jsonio import loads_json
from evalkit.interop.vllm_bench import _load_json, _trace_identity, read_merge_windows
from evalkit.limits import MAX_LOG_TIME_S, MAX_TOKENS, finite
from evalkit.runlog.metrics import observed_span, windows_observed

__all__ = ["import_guidellm", "read_guidellm"]

STATUSES = ("successful", "errored", "incomplete")
OUTPUT_FLAG = "--output kind=json,path=benchmarks.json"
FIX = (f"pass the benchmarks.json GuideLLM wrote (GuideLLM 0.7+: guidellm run ... {OUTPUT_FLAG}; "
       "earlier versions: guidellm benchmark ... --output-path benchmarks.json)")


@dataclass
class GuideLLMBenchmark:
    index: int
    label: str                       # e.g. "poisson@4.00"
    strategy: dict
    requests: pd.DataFrame           # evalkit requests columns + source_request_id, status
    t0_unix: float                   # Unix time of arrival_s = 0
    layout: str                      # "schema 2" | "legacy"
    found: dict                      # requests per status in the file
    totals: dict | None              # requests per status GuideLLM counted (sampling check)
    notes: list = field(default_factory=list)


def strategy_label(strategy: dict) -> str:
    kind = str(strategy.get("type_") or strategy.get("type") or "unknown")
    if kind in ("constant", "poisson") and isinstance(strategy.get("rate"), (int, float)):
        return f"{kind}@{strategy['rate']:.2f}"
    if kind == "concurrent" and strategy.get("streams") is not None:
        return f"concurrent@{strategy['streams']}"
    if kind == "throughput" and strategy.get("max_concurrency") is not None:
        return f"throughput@{strategy['max_concurrency']}"
    return kind


def _num(v) -> float:
    return float(v) if finite(v) else float("nan")


def _requested_tokens(req: dict) -> int | None:
    args = req.get("request_args")
    if isinstance(args, str):
        try:
            args = loads_json(args, nonfinite=True)     # bounded depth: may be hostile
        except InputError:
            return None
    if isinstance(args, dict):
        body = args.get("body") if isinstance(args.get("body"), dict) else args
        for key in ("max_completion_tokens", "max_tokens"):
            if isinstance(body.get(key), int):
                return int(body[key])
    return None


def _tokens(req: dict, key: str, metrics_key: str) -> float:
    v = _num(req.get(key))
    if math.isnan(v):
        m = req.get(metrics_key) or {}
        v = _num(m.get("text_tokens") if isinstance(m, dict) else None)
    return v


def _row(req: dict, status: str, layout: str, where: str, i: int) -> dict:
    if not isinstance(req, dict):
        raise InputError(f"requests.{status}[{i}] is not an object", file=where, fix=FIX)
    if layout == "schema 2":
        info = req.get("info") or {}
        t = info.get("timings") or {}
        targeted = _num(t.get("targeted_start"))
        start = _num(t.get("request_start"))
        if math.isnan(start):
            start = _num(t.get("resolve_start"))
        first = _num(t.get("first_token_iteration"))
        end = _num(t.get("request_end"))
        if math.isnan(end):
            end = _num(t.get("resolve_end"))
        error = info.get("error")
        output = _tokens(req, "output_tokens", "output_metrics")
        if math.isnan(output) and isinstance(t.get("token_iterations"), int) and \
                t["token_iterations"] > 0:
            output = float(t["token_iterations"])
    else:
        sched = req.get("scheduler_info") or {}
        targeted = _num(sched.get("targeted_start_time"))
        start, first, end = (_num(req.get(k)) for k in ("start_time", "first_token_time",
                                                         "end_time"))
        error = req.get("error")
        output = _num(req.get("output_tokens"))
    prompt = _tokens(req, "prompt_tokens", "input_metrics")
    if math.isnan(prompt):
        prompt = 0.0
    if status != "successful":          # the run-log keeps the requested length of a failure
        requested = _requested_tokens(req)
        if requested is not None:
            output = float(requested)
    if math.isnan(output):
        output = 0.0
    return {"source_request_id": str(req.get("request_id", f"{status}-{i}")),
            "status": status, "targeted": targeted, "start": start, "first": first,
            "end": end, "prompt_tokens": prompt, "output_tokens": output,
            "error": None if status == "successful" else (
                str(error) if error else ("incomplete: cut off when the benchmark ended"
                                          if status == "incomplete" else "errored"))}


def _targets_on_the_send_clock(targeted: np.ndarray, sent: np.ndarray):
    """Targeted starts, or none when they are not on the send times' clock.

    A request may be sent late (the client fell behind), but never earlier than the
    benchmark's first send minus the benchmark's whole span, nor after its last send: a
    target outside that range is on another clock (GuideLLM has written offsets from 0
    beside Unix send times under load).  Latency is then taken from the send, and a note
    says so; a mix of clocks is never used.
    """
    have = ~np.isnan(targeted)
    if not have.any():
        return targeted, None
    lo, hi = float(np.min(sent)), float(np.max(sent))
    span = hi - lo
    off = have & ((targeted < lo - span - 1.0) | (targeted > hi + 1.0))
    if not off.any():
        return targeted, None
    gap = float(np.median(sent[off] - targeted[off]))
    return np.full_like(targeted, np.nan), (
        f"{int(off.sum())} of {int(have.sum())} targeted start times are not on the send "
        f"times' clock (median {gap:.4g} s from their send, the benchmark spans "
        f"{span:.4g} s): targeted starts ignored, arrival_s = sent_s and latency is from "
        "the send (client-side queueing is not counted)")


def _benchmark(b, k: int, where: str, incomplete: str) -> GuideLLMBenchmark | None:
    if not isinstance(b, dict) or not isinstance(b.get("requests"), dict):
        raise InputError(f"benchmarks[{k}] has no 'requests' breakdown", file=where,
                         column=f"benchmarks[{k}].requests",
                         fix="rerun GuideLLM keeping the requests: no --metrics "
                             "kind=generative,sample_size=0 (that strips them)")
    reqs = b["requests"]
    layout = "schema 2" if any(isinstance(r, dict) and "info" in r
                               for s in STATUSES for r in (reqs.get(s) or [])) else "legacy"
    strategy = ((b.get("config") or {}).get("strategy") or (b.get("args") or {}).get("strategy")
                or {})
    label = strategy_label(strategy)
    rows, found = [], {}
    for status in STATUSES:
        lst = reqs.get(status) or []
        if not isinstance(lst, list):
            raise InputError(f"requests.{status} is not a list", file=where,
                             column=f"benchmarks[{k}].requests.{status}", fix=FIX)
        found[status] = len(lst)
        if status == "incomplete" and incomplete == "drop":
            continue
        rows += [_row(r, status, layout, where, i) for i, r in enumerate(lst)]
    notes = []
    if found["incomplete"]:
        notes.append(f"{found['incomplete']} incomplete requests (cut off when the benchmark "
                     "ended) " + ("dropped" if incomplete == "drop"
                                  else "kept as failed requests (violations)"))
    if not rows:
        return None
    df = pd.DataFrame(rows)
    ok = (df["status"] == "successful").to_numpy()
    for col, what in (("start", "request_start / start_time"),
                      ("first", "first_token_iteration / first_token_time"),
                      ("end", "request_end / end_time")):
        bad = ok & df[col].isna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"successful request {df['source_request_id'][i]} has no {what}",
                             file=where, column=f"benchmarks[{k}].requests.successful",
                             fix=FIX)
    sent = df["start"].fillna(df["targeted"]).to_numpy(dtype=float)
    if np.isnan(sent).any():
        i = int(np.flatnonzero(np.isnan(sent))[0])
        raise InputError(f"request {df['source_request_id'][i]} has no start or targeted time",
                         file=where, column=f"benchmarks[{k}].requests.{df['status'][i]}",
                         fix=FIX)
    targeted = df["targeted"].to_numpy(dtype=float)
    targeted, clock_note = _targets_on_the_send_clock(targeted, sent)
    if clock_note:
        notes.append(clock_note)
    arrival = np.where(np.isnan(targeted), sent, np.minimum(targeted, sent))
    early = int(np.sum(targeted > sent + 1e-6))
    if early:
        notes.append(f"{early} requests started before their targeted start; their arrival "
                     "is taken as the send time")
    if np.isnan(targeted).all() and not clock_note:
        notes.append("no targeted start times: arrival_s = sent_s, latency from the send")
    first, end = df["first"].to_numpy(dtype=float), df["end"].to_numpy(dtype=float)
    late = ok & ((first < sent - 1e-6) | (end < first - 1e-6))
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise InputError(f"request {df['source_request_id'][i]}: times out of order "
                         "(start <= first token <= end expected)", file=where,
                         column=f"benchmarks[{k}].requests.successful", fix=FIX)
    order = np.lexsort((sent, arrival))
    t0 = float(arrival.min())
    _check_ranges(df, np.column_stack([arrival, sent, first, end]) - t0, k, where)
    requests = pd.DataFrame({
        "request_id": np.arange(len(df), dtype=np.int64),
        "arrival_s": arrival[order] - t0,
        "sent_s": sent[order] - t0,
        "first_token_s": np.where(np.isnan(first), np.nan, first - t0)[order],
        "end_s": np.where(ok, end - t0, np.nan)[order],
        "prompt_tokens": df["prompt_tokens"].to_numpy()[order].astype(np.int64),
        "output_tokens": df["output_tokens"].to_numpy()[order].astype(np.int64),
        "ok": ok[order],
        "error": pd.array(df["error"].to_numpy()[order], dtype="string"),
        "source_request_id": pd.array(df["source_request_id"].to_numpy()[order],
                                      dtype="string"),
    })
    totals = None
    made = ((b.get("scheduler_metrics") or {}).get("requests_made")
            or b.get("total_count") or None)
    if isinstance(made, dict):
        totals = {s: made.get(s) for s in STATUSES if isinstance(made.get(s), int)}
        short = {s: (found[s], totals[s]) for s in totals if found[s] < totals[s]}
        if short:
            notes.append("the report holds a sample of the requests (" + ", ".join(
                f"{s}: {a} of {t}" for s, (a, t) in short.items()) + "): V is a sample "
                "estimate; rerun GuideLLM without a sample_size in --metrics for every "
                "request")
    return GuideLLMBenchmark(index=k, label=label, strategy=strategy, requests=requests,
                             t0_unix=t0, layout=layout, found=found, totals=totals,
                             notes=notes)


_TIME_FIELDS = ("targeted_start", "request_start", "first_token_iteration", "request_end")


def _check_ranges(df: pd.DataFrame, times: np.ndarray, k: int, where: str) -> None:
    """What ``evalkit validate`` accepts, said in the report's own terms: token counts in
    [0, MAX_TOKENS] and times (``times``: (n, 4) seconds from the benchmark's first arrival,
    NaN where absent) in [0, MAX_LOG_TIME_S]."""
    for col in ("prompt_tokens", "output_tokens"):
        values = df[col].to_numpy(dtype=float)
        bad = np.flatnonzero((values < 0) | (values > MAX_TOKENS))
        if bad.size:
            i = int(bad[0])
            raise InputError(f"request {df['source_request_id'][i]} has {col} = "
                             f"{values[i]:.6g}, outside the allowed range [0, {MAX_TOKENS:,}]",
                             file=where, column=f"benchmarks[{k}].requests.{df['status'][i]}"
                                                f"[].{col}",
                             fix="token counts of one request lie in that range (what evalkit "
                                 "validate accepts); " + FIX)
    with np.errstate(invalid="ignore"):
        bad = np.argwhere(times > MAX_LOG_TIME_S)
    if bad.size:
        i, j = (int(x) for x in bad[0])
        raise InputError(f"request {df['source_request_id'][i]} has a time {times[i, j]:.6g} s "
                         "after the benchmark's first arrival, beyond the allowed range [0, "
                         f"{MAX_LOG_TIME_S:,.0f}] s", file=where,
                         column=f"benchmarks[{k}].requests.{df['status'][i]}[].info.timings."
                                f"{_TIME_FIELDS[j]}",
                         fix="one run spans at most that long (what evalkit validate "
                             "accepts); the timings of one benchmark share one clock -- " + FIX)


def read_guidellm(path, *, incomplete: str = "drop") -> list[GuideLLMBenchmark]:
    """Every benchmark of a GuideLLM report that holds requests, in report order."""
    if incomplete not in ("drop", "violation"):
        raise InputError(f"unknown incomplete handling {incomplete!r}", column="incomplete",
                         fix="use 'drop' or 'violation'")
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml", ".csv", ".html"):
        raise InputError(f"a GuideLLM {path.suffix[1:].upper()} output cannot be imported",
                         file=str(path), fix=f"save the report as JSON ({OUTPUT_FLAG})")
    data = _load_json(path, FIX)
    where = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        hint = FIX
        if isinstance(data, dict) and "start_times" in data and "ttfts" in data:
            hint = "this is a vLLM bench result: use `evalkit import vllm-bench`"
        raise InputError("not a GuideLLM benchmarks report (no 'benchmarks' list)",
                         file=where, column="benchmarks", fix=hint)
    out = [parsed for k, raw in enumerate(data["benchmarks"])
           if (parsed := _benchmark(raw, k, where, incomplete)) is not None]
    if not out:
        raise InputError("the report holds no requests", file=where, column="benchmarks",
                         fix="rerun GuideLLM so that some requests complete, without "
                             "--metrics kind=generative,sample_size=0")
    version = (data.get("metadata") or {}).get("guidellm_version")
    for b in out:
        b.notes.insert(0, f"imported from GuideLLM report {path.name} ({b.layout}"
                          + (f", guidellm {version}" if version else "") + f"), benchmark "
                          f"{b.index} {b.label}")
    return out


def import_guidellm(report, runs_dir, *, policy: str, seed: int, merges=None,
                    merge_clock: str = "absolute", regime: str | None = None,
                    role: str = "policy", draw: int | None = None,
                    matched_to: str | None = None, slo_e2e_s: float,
                    slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                    merge_duration_s: float | None = None, min_gap_s: float | None = None,
                    max_gap_s: float | None = None, horizon_s: float | None = None,
                    oracle: bool = False, benchmarks: list[int] | None = None,
                    incomplete: str = "drop", trace_name: str | None = None,
                    warn=None, replace: bool = False) -> list[Path]:
    """Write one run per selected benchmark; returns the run directories.

    Merge windows (``merges``): ``merge_clock="absolute"`` gives them in Unix seconds (the
    clock of GuideLLM's timings) and each benchmark gets those within its span;
    ``"relative"`` gives seconds from the benchmark's first arrival and needs exactly one
    benchmark selected.  Windows outside every selected benchmark's span are named (in the
    runs' notes and through ``warn(text)``); when all are outside, or a merging run would get
    K = 0, nothing is written and the error names ``--merge-clock``.  Everything is checked
    before anything is written, including that no run of the same id exists (unless
    ``replace``: each is then moved aside as ``.<id>.replaced-*``, never deleted).
    """
    report = Path(report)
    check_identity(role, draw, matched_to, where=str(report))
    slo = check_slo(slo_e2e_s, slo_ttft_s, slo_tpot_s, where=str(report))
    if merge_clock not in ("relative", "absolute"):
        raise InputError(f"unknown merge clock {merge_clock!r}", column="merge_clock",
                         fix="use 'absolute' (Unix seconds) or 'relative'")
    found = read_guidellm(report, incomplete=incomplete)
    if benchmarks:
        have = {b.index: b for b in found}
        missing = [i for i in benchmarks if i not in have]
        if missing:
            raise InputError(f"no benchmark {missing[0]} with requests in the report",
                             file=str(report), column="--benchmark",
                             fix=f"use one of {sorted(have)}")
        found = [have[i] for i in benchmarks]
    if merges is None and role != "no_sync":
        raise InputError(f"a {role} run needs its merge windows", column="merges",
                         fix="pass --merges FILE (CSV/JSON with start_s, end_s)")
    if merges is not None and role == "no_sync":
        raise InputError("a no_sync run cannot have merge windows", file=str(merges),
                         fix="drop --merges or change --role")
    if merges is not None and merge_clock == "relative" and len(found) > 1:
        raise InputError(f"relative merge times are ambiguous across {len(found)} benchmarks",
                         column="--merge-clock",
                         fix="give Unix times (--merge-clock absolute) or pick one benchmark "
                             "with --benchmark N")
    planned = []
    raw = None if merges is None else read_merge_windows(merges)
    spans = []
    for b in found:
        req = b.requests
        last = float(np.nanmax(np.concatenate([req["end_s"].to_numpy(),
                                               req["sent_s"].to_numpy()])))
        off = b.t0_unix if merge_clock == "absolute" else 0.0
        spans.append(Span(f"benchmark {b.index} ({b.label})", off, off + last))
    outside_note = ""
    if raw is not None and len(raw):
        out = outside_every_span(raw["start_s"], raw["end_s"], spans)
        outside_note = describe_outside(raw["start_s"], raw["end_s"], spans, merge_clock)
        if out.all():
            raise InputError(f"none of the {len(raw)} merge windows falls inside a benchmark's "
                             f"span ({describe_spans(spans, merge_clock)}): every run would "
                             "have K = 0", file=str(merges),
                             column=CLOCK_FLAG, fix=clock_hint(
                                 raw["start_s"], raw["end_s"], merge_clock) or (
                                 "give the windows on the benchmark's clock: "
                                 f"{CLOCK_FLAG} absolute (Unix seconds) or relative (s from "
                                 "the benchmark's first arrival, one --benchmark)"))
        if outside_note and warn is not None:
            warn(outside_note)
    for b, span in zip(found, spans):
        req = b.requests
        last = span.end - span.start
        if raw is None:
            m = pd.DataFrame({"merge_idx": pd.Series([], dtype=np.int64),
                              "start_s": pd.Series([], dtype=float),
                              "end_s": pd.Series([], dtype=float)})
        else:
            m = raw.copy()
            m["start_s"] = m["start_s"] - span.start
            m["end_s"] = m["end_s"] - span.start
            keep = (m["end_s"] > 0) & (m["start_s"] < last)
            if merge_clock == "absolute" or not keep.all():
                m = m[keep].reset_index(drop=True)
                m["merge_idx"] = np.arange(len(m), dtype=np.int64)
        h = float(last if horizon_s is None else horizon_s)
        if role != "no_sync":
            k = windows_observed(m["start_s"], m["end_s"], observed_span(
                req["arrival_s"], req["end_s"], h, 0.0)) if len(m) else 0
            if k == 0:
                raise InputError(
                    f"benchmark {b.index} ({b.label}): no merge window lies inside its "
                    f"observed span (0..{last:.3f} s from its first arrival, "
                    f"{merge_clock} clock): a {role} run with K = 0 merges compares nothing",
                    file=str(merges), column=CLOCK_FLAG,
                    fix=(clock_hint(raw["start_s"], raw["end_s"], merge_clock)
                         or f"check {CLOCK_FLAG} (absolute: Unix seconds; relative: s from "
                            "the benchmark's first arrival), pick the benchmarks the merges "
                            "ran in with --benchmark N, or import this one with --role "
                            "no_sync"))
        d = merge_duration_s
        if d is None:
            if not len(m):
                raise InputError(f"benchmark {b.index} ({b.label}) has no merge window to "
                                 "take the merge duration from", column="merge_duration_s",
                                 fix="pass --merge-duration SECONDS")
            d = float(np.median(m["end_s"] - m["start_s"]))
        planned.append((b, m, h, d))
    metas = []
    for b, m, h, d in planned:
        reg = regime or "guidellm"
        if regime is None or len(planned) > 1:
            reg = f"{reg}-{b.label}"
        notes = list(b.notes) + ["host is the importing machine, not the benchmark host"]
        if outside_note:
            notes.append(outside_note)
        if min_gap_s is None or max_gap_s is None:
            notes.append("corridor not supplied: min_gap_s=0, max_gap_s=horizon_s "
                         "(unconstrained)")
        corridor = {"min_gap_s": float(0.0 if min_gap_s is None else min_gap_s),
                    "max_gap_s": float(h if max_gap_s is None else max_gap_s)}
        n_err = int((b.requests["error"].notna() & ~b.requests["ok"]).sum())
        # what this benchmark measured and where it came from (the runs of one seed differ
        # in them: like-for-like leaves settings.effective.imported out)
        imported = {"source": report.name, "benchmark_index": b.index, "t0_unix": b.t0_unix,
                    "requests_in_file": b.found, "requests_made": b.totals, "failed": n_err}
        effective = {"strategy": b.strategy, "layout": b.layout, "imported": imported}
        meta = import_meta(
            run_id=default_run_id(reg, policy, role, seed, draw, matched_to), policy=policy,
            role=role, seed=seed, draw=draw, matched_to=matched_to, regime=reg,
            trace={"name": trace_name or f"guidellm-{b.label}",
                   "sha256": _trace_identity(b.requests)},
            slo=slo.to_dict(),
            merge_duration_s=d, horizon_s=h, corridor=corridor, oracle=oracle,
            settings={"requested": {"incomplete": incomplete, "merge_clock": merge_clock},
                      "effective": effective},
            rng_seeds={"seed": int(seed)}, notes=notes, engine="guidellm")
        metas.append((meta, b.requests, m))
    return publish_imports(runs_dir, metas, replace=replace, where=str(report))
