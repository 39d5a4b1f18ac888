"""Import NVIDIA AIPerf (``aiperf profile``) results: one evalkit run per profiling run.

AIPerf writes into its artifact directory an aggregate ``profile_export_aiperf.json``
(``aiperf_version``, ``input_config``, ``run_info``, the statistics) and the per-request
records ``profile_export.jsonl`` (one JSON object a line: ``metadata`` with wall-clock
``credit_issued_ns`` / ``request_start_ns`` / ``request_end_ns`` and ``benchmark_phase``;
``metrics``, each ``{"value", "unit"}``; ``error``).  With ``--profile-export-prefix P`` the
two are ``P.json`` and ``P.jsonl``; with ``--num-profile-runs N`` each repetition has its own
``profile_runs/run_NNNN/``.  Both files of a run are needed: the records hold the timings, the
aggregate the version and configuration.

Mapping (seconds from the run's first arrival; only ``profiling``-phase records):

==================  ==============================================================
``arrival_s``       ``credit_issued_ns`` (when AIPerf's scheduler released the request),
                    else ``request_start_ns`` (a note counts those)
``sent_s``          ``request_start_ns``
``first_token_s``   ``sent_s + time_to_first_token`` (null when not streamed)
``end_s``           ``sent_s + request_latency``; null for a failed request
``prompt_tokens``   ``usage_prompt_tokens`` (the server's count), else
                    ``input_sequence_length`` (AIPerf's tokenizer), else ``error_isl``
``output_tokens``   ``usage_completion_tokens``, else ``output_sequence_length``
``ok``              ``error`` is null and the request was not cancelled
==================  ==============================================================

:func:`read_aiperf` returns the runs (:class:`~evalkit.interop.harness_runs.HarnessRun`)
without writing anything; :func:`import_aiperf` writes them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from evalkit.errors import InputError
from evalkit.fileread import read_text_bounded
from evalkit.interop.harness_runs import (HarnessRun, config_sha256, load_label,
                                          nonneg_number, requests_frame, whole_number,
                                          write_harness_runs)
from evalkit.jsonio import loads_json, read_json
from evalkit.limits import MAX_IMPORT_JSON_BYTES
from evalkit.runlog.schema import short_repr

__all__ = ["find_aiperf_exports", "import_aiperf", "read_aiperf"]

TOOL = "aiperf"
AGGREGATE = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"
FIX = ("pass the artifact directory `aiperf profile` wrote (--output-artifact-dir), or its "
       f"{AGGREGATE} / {RECORDS}, unmodified")
_RUN_DIR = re.compile(r"run_(\d+)")
# seconds per unit of a metric value
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _pair(path: Path) -> tuple[Path, Path]:
    """(aggregate JSON, per-request JSONL) named like ``path``, one of them."""
    name = path.name
    if name.endswith("_aggregate.json"):
        raise InputError("this is AIPerf's summary across repetitions: it holds no requests",
                         file=str(path), fix="pass the artifact directory above it (each "
                                             "profile_runs/run_NNNN becomes a run)")
    if name == AGGREGATE or name == RECORDS:
        return path.with_name(AGGREGATE), path.with_name(RECORDS)
    if path.suffix == ".jsonl":
        return path.with_suffix(".json"), path
    if path.suffix == ".json":
        return path, path.with_suffix(".jsonl")
    raise InputError("not an AIPerf export (expected a .json aggregate, a .jsonl of records "
                     "or an artifact directory)", file=str(path), fix=FIX)


def find_aiperf_exports(path) -> list[tuple[Path, Path, int | None]]:
    """``(aggregate, records, repetition)`` of each profiling run under ``path``: an artifact
    directory (its ``profile_runs/run_NNNN/`` repetitions in order, else its own exports),
    or one of a run's two files.  A file of a pair that is missing is an InputError."""
    path = Path(path)
    if path.is_dir():
        if (path / AGGREGATE).exists() or (path / RECORDS).exists():
            found = [(*_pair(path / AGGREGATE), None)]
        else:
            reps = sorted((int(m.group(1)), d) for d in (path / "profile_runs").glob("run_*")
                          if d.is_dir() and (m := _RUN_DIR.fullmatch(d.name)))
            if not reps:
                raise InputError(f"no AIPerf exports in the directory (neither {AGGREGATE} "
                                 "nor profile_runs/run_NNNN/)", file=str(path), fix=FIX)
            found = [(*_pair(d / AGGREGATE), n) for n, d in reps]
    elif not path.exists():
        raise InputError("file does not exist", file=str(path), fix="check the path")
    else:
        found = [(*_pair(path), None)]
    for aggregate, records, _ in found:
        for needed, what in ((aggregate, "the aggregate (version, configuration)"),
                             (records, "the per-request records (timings)")):
            if not needed.exists():
                raise InputError(f"{needed.name} is missing beside the other export: AIPerf "
                                 f"writes {what} there", file=str(needed),
                                 fix="rerun aiperf profile without --export-level summary "
                                     "(the records are written at the default level) and "
                                     "pass the whole artifact directory")
    return found


def _aggregate(path: Path) -> dict:
    data = read_json(path, limit=MAX_IMPORT_JSON_BYTES, what="the AIPerf aggregate", fix=FIX,
                     nonfinite=True)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object (AIPerf profile export)", file=str(path),
                         fix=FIX)
    version = data.get("aiperf_version")
    if not isinstance(version, str) or not version:
        raise InputError("the aggregate does not say which AIPerf wrote it", file=str(path),
                         column="aiperf_version", fix=FIX)
    if not isinstance(data.get("input_config"), dict):
        raise InputError("the aggregate has no configuration", file=str(path),
                         column="input_config", fix=FIX)
    return data


def _load_label(config: dict, where: str) -> str:
    """``TYPE@VALUE`` of the profiling phase (``concurrency@2``, ``request_rate@4``)."""
    phases = config.get("phases")
    phase = next((p for p in phases if isinstance(p, dict) and p.get("kind") == "profiling"),
                 None) if isinstance(phases, list) else None
    if phase is None:
        return "profile"
    kind = str(phase.get("type") or "profile")
    for key in ("concurrency", "request_rate", "rate"):
        value = phase.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return load_label(kind, value, where=where, column=f"input_config.phases[].{key}")
    return kind


def _hashed_config(config: dict, where: str) -> tuple[dict, object]:
    """The configuration without where outputs go (``artifacts``), the console (``runtime``)
    and the random seeds (returned apart: repetitions of one configuration share the hash)."""
    kept = {k: v for k, v in config.items() if k not in ("artifacts", "runtime")}
    seeds = []
    datasets = kept.get("datasets")
    if isinstance(datasets, list):
        clean = []
        for d in datasets:
            if isinstance(d, dict) and "random_seed" in d:
                seed = d["random_seed"]
                if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                    raise InputError(f"random_seed is {seed!r:.60}, expected an integer",
                                     file=where, column="input_config.datasets[].random_seed",
                                     fix=FIX)
                seeds.append(seed)
                d = {k: v for k, v in d.items() if k != "random_seed"}
            clean.append(d)
        kept["datasets"] = clean
    return kept, (seeds[0] if len(seeds) == 1 else seeds or None)


def _seconds(metric, *, where: str, column: str) -> float:
    if not isinstance(metric, dict) or "value" not in metric:
        raise InputError(f"expected {{\"value\": .., \"unit\": ..}}, got {metric!r:.80}",
                         file=where, column=column, fix=FIX)
    unit = metric.get("unit")
    if unit not in _UNIT_S:
        raise InputError(f"unknown time unit {unit!r}", file=where, column=f"{column}.unit",
                         fix=f"AIPerf writes times in one of {sorted(_UNIT_S)}; " + FIX)
    return nonneg_number(metric["value"], where=where, column=column, fix=FIX) * _UNIT_S[unit]


def _tokens(metrics: dict, keys: tuple[str, ...], *, where: str, line: int):
    """(count, which key gave it) of the first of ``keys`` present, else (None, None)."""
    for key in keys:
        metric = metrics.get(key)
        if metric is None:
            continue
        if not isinstance(metric, dict) or "value" not in metric:
            raise InputError(f"line {line}: expected {{\"value\": .., \"unit\": ..}}",
                             file=where, column=f"metrics.{key}", fix=FIX)
        return whole_number(metric["value"], where=where, column=f"line {line}: metrics.{key}",
                            fix=FIX), key
    return None, None


def _ns(meta: dict, key: str, *, where: str, line: int, required: bool) -> int | None:
    value = meta.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise InputError(f"line {line}: {short_repr(value)} is not a time in integer "
                         "nanoseconds (0 to 2**63 - 1)", file=where, column=f"metadata.{key}",
                         fix=FIX)
    return value


def _records(path: Path) -> tuple[list[dict], dict]:
    """Run-log rows of the profiling-phase records, and counts for the notes."""
    where = str(path)
    text = read_text_bounded(path, MAX_IMPORT_JSON_BYTES, "the AIPerf records",
                             action="cannot read the AIPerf records", fix=FIX)
    rows, counts = [], {"warmup": 0, "arrival_from_start": 0, "prompt_fallback": 0,
                        "output_fallback": 0, "no_ttft": 0, "failed_without_tokens": 0}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        rec = loads_json(line, file=where, what=f"line {line_no} of the AIPerf records",
                         nonfinite=True, fix=FIX)
        if not isinstance(rec, dict) or not isinstance(rec.get("metadata"), dict) \
                or not isinstance(rec.get("metrics"), dict):
            raise InputError(f"line {line_no} is not a record with 'metadata' and 'metrics' "
                             "objects", file=where, column="metadata", fix=FIX)
        meta, metrics = rec["metadata"], rec["metrics"]
        phase = meta.get("benchmark_phase")
        if phase == "warmup":
            counts["warmup"] += 1
            continue
        if phase != "profiling":
            raise InputError(f"line {line_no}: unknown benchmark_phase {phase!r:.60}",
                             file=where, column="metadata.benchmark_phase",
                             fix="AIPerf records are 'warmup' or 'profiling'; " + FIX)
        start = _ns(meta, "request_start_ns", where=where, line=line_no, required=True)
        credit = _ns(meta, "credit_issued_ns", where=where, line=line_no, required=False)
        if credit is None or credit > start:
            counts["arrival_from_start"] += 1
            credit = start
        error = rec.get("error")
        if error is not None and not isinstance(error, dict):
            raise InputError(f"line {line_no}: error is {error!r:.60}, expected an object or "
                             "null", file=where, column="error", fix=FIX)
        cancelled = meta.get("was_cancelled") is True
        ok = error is None and not cancelled
        prompt, prompt_key = _tokens(metrics, ("usage_prompt_tokens", "input_sequence_length",
                                               "error_isl"), where=where, line=line_no)
        output, output_key = _tokens(metrics, ("usage_completion_tokens",
                                               "output_sequence_length"),
                                     where=where, line=line_no)
        ttft = latency = math.nan
        if ok:
            if prompt is None or output is None:
                raise InputError(f"line {line_no}: a successful request without its "
                                 f"{'prompt' if prompt is None else 'output'} token count",
                                 file=where, column="metrics.input_sequence_length"
                                 if prompt is None else "metrics.output_sequence_length",
                                 fix=FIX)
            if "request_latency" not in metrics:
                raise InputError(f"line {line_no}: a successful request without its latency",
                                 file=where, column="metrics.request_latency", fix=FIX)
            latency = _seconds(metrics["request_latency"], where=where,
                               column=f"line {line_no}: metrics.request_latency")
            if "time_to_first_token" in metrics:
                ttft = _seconds(metrics["time_to_first_token"], where=where,
                                column=f"line {line_no}: metrics.time_to_first_token")
                if ttft > latency + 1e-9:
                    raise InputError(f"line {line_no}: the first token comes after the end "
                                     "(time_to_first_token > request_latency)", file=where,
                                     column="metrics.time_to_first_token", fix=FIX)
            else:
                counts["no_ttft"] += 1
            counts["prompt_fallback"] += prompt_key != "usage_prompt_tokens"
            counts["output_fallback"] += output_key != "usage_completion_tokens"
        else:
            if prompt is None or output is None:
                counts["failed_without_tokens"] += 1
            prompt, output = prompt or 0, output or 0
        text_error = None
        if not ok:
            text_error = ("cancelled by AIPerf" if error is None else
                          str(error.get("message") or error.get("type") or "error"))[:500]
        rows.append({"source_request_id": meta.get("x_request_id") or f"line-{line_no}",
                     "arrival": credit, "sent": start, "ttft": ttft, "latency": latency,
                     "prompt_tokens": prompt, "output_tokens": output, "ok": ok,
                     "error": text_error})
    if not rows:
        raise InputError("no profiling-phase request in the records" + (
            f" ({counts['warmup']} warmup records only)" if counts["warmup"] else ""),
            file=where, column="metadata.benchmark_phase",
            fix="import a run that sent profiling requests")
    # integer nanoseconds since the epoch lose sub-microsecond digits as floats: seconds are
    # taken from the earliest arrival before converting
    origin = min(r["arrival"] for r in rows)
    for r in rows:
        r["arrival"] = (r["arrival"] - origin) * 1e-9
        r["sent"] = (r["sent"] - origin) * 1e-9
        r["first"] = r["sent"] + r.pop("ttft")
        r["end"] = r["sent"] + r.pop("latency")
    return rows, counts


def _notes(counts: dict, n: int) -> list[str]:
    notes = []
    if counts["warmup"]:
        notes.append(f"{counts['warmup']} warmup records left out (profiling phase only)")
    if counts["arrival_from_start"]:
        notes.append(f"{counts['arrival_from_start']} of {n} requests have no credit_issued_ns "
                     "at or before their start: arrival_s = sent_s for them")
    if counts["no_ttft"]:
        notes.append(f"{counts['no_ttft']} successful requests have no time_to_first_token "
                     "(not streamed): first_token_s is null for them")
    if counts["prompt_fallback"] or counts["output_fallback"]:
        notes.append(f"token counts from AIPerf's tokenizer where the server reported no "
                     f"usage: {counts['prompt_fallback']} prompts, {counts['output_fallback']} "
                     "outputs")
    if counts["failed_without_tokens"]:
        notes.append(f"{counts['failed_without_tokens']} failed requests without a prompt or "
                     "output token count (AIPerf records no output for a failure): the missing "
                     "count is recorded as 0 (a failure is a violation whatever its length)")
    return notes


def read_aiperf(path) -> list[HarnessRun]:
    """Every profiling run under ``path`` (see :func:`find_aiperf_exports`), in order."""
    runs = []
    for aggregate_path, records_path, repetition in find_aiperf_exports(path):
        data = _aggregate(aggregate_path)
        rows, counts = _records(records_path)
        requests = requests_frame(rows, where=str(records_path),
                                  time_column="metadata.request_start_ns", fix=FIX)
        config, seeds = _hashed_config(data["input_config"], str(aggregate_path))
        label = _load_label(data["input_config"], str(aggregate_path))
        notes = [f"imported from AIPerf {data['aiperf_version']} records {records_path.name} "
                 f"(aggregate {aggregate_path.name}), {label}"
                 + (f", repetition {repetition}" if repetition is not None else "")]
        notes += _notes(counts, len(rows))
        run_info = data.get("run_info") if isinstance(data.get("run_info"), dict) else {}
        measured = {k: data[k] for k in ("benchmark_id", "schema_version", "start_time",
                                         "end_time", "was_cancelled", "is_complete")
                    if k in data}
        counted = (data.get("completed_request_count") or {}).get("avg") \
            if isinstance(data.get("completed_request_count"), dict) else None
        if isinstance(counted, (int, float)) and not isinstance(counted, bool) \
                and counted != len(rows):
            notes.append(f"the records hold {len(rows)} profiling requests, AIPerf's aggregate "
                         f"counts {counted:g} completed: V is over the records AIPerf wrote")
            measured["completed_request_count"] = counted
        if data.get("was_cancelled") is True or data.get("is_complete") is False:
            notes.append("AIPerf marked this run cancelled or incomplete: its records cover "
                         "only what ran")
        measured["trial"] = run_info.get("trial")
        measured["failed"] = int((~requests["ok"]).sum())
        ok = requests["ok"].to_numpy()
        if not ok.any():
            notes.append("every request failed")
        runs.append(HarnessRun(
            tool=TOOL, tool_version=data["aiperf_version"], source=str(records_path),
            label=label, repetition=repetition, requests=requests,
            config_sha256=config_sha256(config), tool_seed=seeds,
            measured=measured, notes=notes))
    return runs


def import_aiperf(path, runs_dir, *, policy: str, seed: int, **options) -> list[Path]:
    """Write one run per AIPerf profiling run under ``path``; return the run directories.
    ``options`` are :func:`~evalkit.interop.harness_runs.write_harness_runs`'s (SLO, role,
    merges, ``replace``, ...)."""
    runs = read_aiperf(path)
    return write_harness_runs(runs, runs_dir, where=str(path), policy=policy, seed=seed,
                              **options)

