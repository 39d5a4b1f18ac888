"""Import a kubernetes-sigs inference-perf run: its per-request report becomes one run.

inference-perf writes its reports into ``storage.local_storage.path`` (each name after
``report_file_prefix``): ``config.yaml`` (the whole configuration), ``summary_lifecycle_
metrics.json``, ``stage_N_lifecycle_metrics.json`` and, with ``report.request_lifecycle.
per_request: true``, ``per_request_lifecycle_metrics.json``: a list with one entry per
request, ``start_time`` / ``end_time`` (seconds on the client's monotonic clock), ``info``
(``request_metrics.text.input_tokens``, ``response_metrics.output_tokens``, ``server_usage``,
``output_token_times``), ``computed_metrics`` (with ``per_request_fields.computed_metrics``:
``time_to_first_token``, ``request_latency``, ...) and ``error`` (``error_type``,
``error_msg``) or null.

The entries say neither the stage they ran in nor their scheduled time, and no report says
the version of inference-perf; so a configuration of more than one stage is refused (one
stage per run), latency is from the send (``arrival_s = sent_s``), and the version is given
on the command line.

Mapping (seconds from the first send):

==================  ==============================================================
``sent_s``          ``start_time``; ``arrival_s`` = ``sent_s``
``first_token_s``   ``start_time + computed_metrics.time_to_first_token``, else the
                    first of ``output_token_times``; null when not streamed
``end_s``           ``end_time``; null for a failed request
``prompt_tokens``   ``server_usage.prompt_tokens``, else ``request_metrics.text.
                    input_tokens`` (inference-perf's tokenizer)
``output_tokens``   ``server_usage.completion_tokens``, else ``response_metrics.
                    output_tokens``
``ok``              ``error`` is null
==================  ==============================================================
"""

from __future__ import annotations

import math
from pathlib import Path

from evalkit.errors import InputError
from evalkit.fileread import read_text_bounded
from evalkit.interop.harness_runs import (HarnessRun, config_sha256, load_label,
                                          nonneg_number, requests_frame, whole_number,
                                          write_harness_runs)
from evalkit.jsonio import read_json
from evalkit.limits import MAX_IMPORT_JSON_BYTES

__all__ = ["find_inference_perf_reports", "import_inference_perf", "read_inference_perf"]

TOOL = "inference-perf"
PER_REQUEST = "per_request_lifecycle_metrics.json"
CONFIG = "config.yaml"
FIX = ("pass the report directory inference-perf wrote (storage.local_storage.path) with "
       "report.request_lifecycle.per_request: true, unmodified")
MAX_CONFIG_BYTES = 256 << 10       # a configuration is a few KiB (PyYAML in Python is slow)


def find_inference_perf_reports(path) -> tuple[Path, Path]:
    """(per-request report, config.yaml) of the run at ``path``: its report directory or its
    per-request report (``[PREFIX]per_request_lifecycle_metrics.json``)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob(f"*{PER_REQUEST}"))
        if not found:
            raise InputError(f"no {PER_REQUEST} in the directory", file=str(path),
                             fix="rerun inference-perf with report: request_lifecycle: "
                                 "per_request: true (the per-request report is off by default)")
        if len(found) > 1:
            raise InputError(f"{len(found)} per-request reports in the directory ("
                             + ", ".join(p.name for p in found[:3]) + ")", file=str(path),
                             fix="pass one of them")
        path = found[0]
    elif not path.exists():
        raise InputError("file does not exist", file=str(path), fix="check the path")
    if not path.name.endswith(PER_REQUEST):
        raise InputError(f"not an inference-perf per-request report (*{PER_REQUEST})",
                         file=str(path), fix=FIX)
    prefix = path.name[: -len(PER_REQUEST)]
    config = path.with_name(prefix + CONFIG)
    if not config.exists():
        raise InputError(f"{config.name} is missing beside the per-request report: it holds "
                         "the configuration (load stages, API, streaming)", file=str(config),
                         fix="keep the whole report directory inference-perf wrote")
    return path, config


def _read_config(path: Path) -> dict:
    """config.yaml through PyYAML's safe loader, with aliases refused (an alias expands a
    small file into a huge document)."""
    try:
        import yaml
    except ImportError:
        raise InputError("reading inference-perf's config.yaml needs PyYAML", file=str(path),
                         fix="pip install pyyaml") from None

    class _NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.events.AliasEvent):
                raise InputError("the configuration uses a YAML alias", file=str(path),
                                 fix="inference-perf writes none; " + FIX)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise InputError(f"the key {key!r:.60} appears twice in one mapping",
                                     file=str(path), column=str(key)[:60],
                                     fix="readers disagree on which one wins; " + FIX)
                if isinstance(key, (str, int, float, bool)):
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    text = read_text_bounded(path, MAX_CONFIG_BYTES, "the inference-perf configuration",
                             action="cannot read the inference-perf configuration", fix=FIX)
    try:
        data = yaml.load(text, Loader=_NoAliases)     # noqa: S506 (a SafeLoader subclass)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"not valid YAML ({str(exc)[:160]})", file=str(path),
                         fix=FIX) from None
    except RecursionError:
        raise InputError("the configuration is nested too deeply", file=str(path),
                         fix=FIX) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping (inference-perf's config.yaml)", file=str(path),
                         fix=FIX)
    return data


def _stage(config: dict, where: str) -> tuple[str, dict]:
    """The load label (``constant@4``, ``concurrent@8``) of the configuration's one stage."""
    load = config.get("load")
    if not isinstance(load, dict) or not isinstance(load.get("stages"), list):
        raise InputError("the configuration has no load stages", file=where,
                         column="load.stages", fix=FIX)
    stages = load["stages"]
    if load.get("sweep"):
        raise InputError("a sweep generates its stages at run time; the per-request report "
                         "does not say which stage a request ran in", file=where,
                         column="load.sweep",
                         fix="run inference-perf once per load (one stage, no sweep) and "
                             "import each run")
    if len(stages) != 1 or not isinstance(stages[0], dict):
        raise InputError(f"{len(stages)} load stages: the per-request report does not say "
                         "which stage a request ran in", file=where, column="load.stages",
                         fix="run inference-perf once per load (one stage each) and import "
                             "each run")
    stage = stages[0]
    kind = str(load.get("type") or "load")
    for key in ("rate", "concurrency_level", "concurrent_sessions", "session_rate"):
        value = stage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return load_label(kind, value, where=where, column=f"load.stages[0].{key}"), stage
    return kind, stage


def _hashed_config(config: dict, where: str) -> tuple[dict, object]:
    """The configuration without where reports go (``storage``) and the random seed
    (``load.base_seed``, returned apart: repeated runs of one configuration share the hash)."""
    kept = {k: v for k, v in config.items() if k != "storage"}
    seed = None
    if isinstance(kept.get("load"), dict):
        seed = kept["load"].get("base_seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InputError(f"base_seed is {seed!r:.60}, expected an integer", file=where,
                             column="load.base_seed", fix=FIX)
        kept["load"] = {k: v for k, v in kept["load"].items() if k != "base_seed"}
    return kept, seed


def _get(obj, *keys):
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _count(entry: dict, paths: tuple, *, where: str, i: int):
    """(count, dotted key) of the first path present with a value, else (None, None)."""
    for keys in paths:
        value = _get(entry, *keys)
        if value is not None:
            column = ".".join(keys)
            return whole_number(value, where=where, column=f"[{i}].{column}", fix=FIX), column
    return None, None


_PROMPT = (("info", "response_metrics", "server_usage", "prompt_tokens"),
           ("info", "request_metrics", "text", "input_tokens"), ("info", "input_tokens"))
_OUTPUT = (("info", "response_metrics", "server_usage", "completion_tokens"),
           ("info", "response_metrics", "output_tokens"))


def _rows(entries: list, where: str, streaming: bool) -> tuple[list[dict], dict]:
    rows = []
    counts = {"fallback": 0, "failed_without_tokens": 0, "ttft_from_times": 0}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f"entry {i} is not an object", file=where, column=f"[{i}]",
                             fix=FIX)
        start = nonneg_number(entry.get("start_time"), where=where,
                              column=f"[{i}].start_time", fix=FIX)
        error = entry.get("error")
        if error is not None and not isinstance(error, dict):
            raise InputError(f"entry {i}: error is {error!r:.60}, expected an object or null",
                             file=where, column=f"[{i}].error", fix=FIX)
        ok = error is None
        prompt, prompt_key = _count(entry, _PROMPT, where=where, i=i)
        output, output_key = _count(entry, _OUTPUT, where=where, i=i)
        first = end = math.nan
        if ok:
            if prompt is None or output is None:
                raise InputError(f"entry {i}: a successful request without its "
                                 f"{'prompt' if prompt is None else 'output'} token count",
                                 file=where, column=f"[{i}].info", fix=FIX)
            end = nonneg_number(entry.get("end_time"), where=where, column=f"[{i}].end_time",
                                fix=FIX)
            if end < start:
                raise InputError(f"entry {i} ends before it starts", file=where,
                                 column=f"[{i}].end_time", fix=FIX)
            ttft = _get(entry, "computed_metrics", "time_to_first_token")
            times = _get(entry, "info", "response_metrics", "output_token_times")
            if ttft is not None:
                first = start + nonneg_number(ttft, where=where, fix=FIX,
                                              column=f"[{i}].computed_metrics."
                                                     "time_to_first_token")
            elif isinstance(times, list) and times:
                first = nonneg_number(times[0], where=where, fix=FIX,
                                      column=f"[{i}].info.response_metrics.output_token_times")
                counts["ttft_from_times"] += 1
            elif streaming:
                raise InputError(f"entry {i}: a streamed request without its first-token time",
                                 file=where, column=f"[{i}].computed_metrics",
                                 fix="rerun with report.request_lifecycle.per_request_fields."
                                     "computed_metrics: true (or info: true)")
            if not math.isnan(first) and not start - 1e-9 <= first <= end + 1e-9:
                raise InputError(f"entry {i}: the first token is not between start and end",
                                 file=where, column=f"[{i}].computed_metrics."
                                                    "time_to_first_token", fix=FIX)
            counts["fallback"] += (prompt_key != ".".join(_PROMPT[0])
                                   or output_key != ".".join(_OUTPUT[0]))
        else:
            if prompt is None or output is None:
                counts["failed_without_tokens"] += 1
            prompt, output = prompt or 0, output or 0
        message = None if ok else str(error.get("error_msg") or error.get("error_type")
                                      or "error")[:500]
        rows.append({"source_request_id": str(i), "arrival": start, "sent": start,
                     "first": first, "end": end, "prompt_tokens": prompt,
                     "output_tokens": output, "ok": ok, "error": message})
    return rows, counts


def read_inference_perf(path, *, tool_version: str) -> list[HarnessRun]:
    """The run at ``path`` (see :func:`find_inference_perf_reports`) as a one-element list
    (the shape of :func:`evalkit.interop.aiperf.read_aiperf`); ``tool_version`` is the
    inference-perf version, which its reports do not record."""
    report, config_path = find_inference_perf_reports(path)
    where = str(report)
    if not isinstance(tool_version, str) or not tool_version.strip():
        raise InputError("inference-perf's reports do not record its version", file=where,
                         column="--tool-version",
                         fix="pass --tool-version VERSION (`pip show inference-perf`)")
    config = _read_config(config_path)
    label, _ = _stage(config, str(config_path))
    streaming = _get(config, "api", "streaming") is True
    entries = read_json(report, limit=MAX_IMPORT_JSON_BYTES, what="the per-request report",
                        fix=FIX, nonfinite=True)
    if not isinstance(entries, list):
        raise InputError("expected a JSON list (one entry per request)", file=where, fix=FIX)
    if not entries:
        raise InputError("the report holds no requests", file=where,
                         fix="import a run that sent requests")
    rows, counts = _rows(entries, where, streaming)
    requests = requests_frame(rows, where=where, time_column="start_time", fix=FIX)
    hashed, seed = _hashed_config(config, str(config_path))
    notes = [f"imported from inference-perf {tool_version.strip()} (version given on the command "
             f"line) report {report.name} (configuration {config_path.name}), {label}",
             "arrival_s = sent_s: the per-request report keeps no scheduled times; latency is "
             "from the send"]
    if counts["fallback"]:
        notes.append(f"{counts['fallback']} successful requests without the server's usage: "
                     "token counts from inference-perf's tokenizer")
    if counts["ttft_from_times"]:
        notes.append(f"{counts['ttft_from_times']} first-token times from output_token_times "
                     "(no computed_metrics)")
    if not streaming:
        notes.append("not streamed (api.streaming false): first_token_s is null")
    if counts["failed_without_tokens"]:
        notes.append(f"{counts['failed_without_tokens']} failed requests without a token "
                     "count: recorded as 0 tokens (a failure is a violation whatever its "
                     "length)")
    measured = {"failed": int((~requests["ok"]).sum())}
    return [HarnessRun(tool=TOOL, tool_version=tool_version.strip(), source=where, label=label,
                       repetition=None, requests=requests, config_sha256=config_sha256(hashed),
                       tool_seed=seed, measured=measured, notes=notes)]


def import_inference_perf(path, runs_dir, *, tool_version: str, policy: str, seed: int,
                          **options) -> list[Path]:
    """Write the inference-perf run at ``path`` as one evalkit run; return its directory in a
    list.  ``options`` are :func:`~evalkit.interop.harness_runs.write_harness_runs`'s."""
    runs = read_inference_perf(path, tool_version=tool_version)
    return write_harness_runs(runs, runs_dir, where=str(path), policy=policy, seed=seed,
                              **options)
