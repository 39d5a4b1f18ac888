"""The runs of one side of a comparison: a run directory, a directory of harness result
files, or one result file.

Each run becomes a :class:`Unit`: its requests (evalkit ``requests`` columns), the SLO it was
recorded with (run directories; harness files carry none), and the keys that can pair it with
a run of the other side -- ``seed``, ``trace`` (the fingerprint of the arrivals actually
replayed) and ``repetition`` (the last integer in the file or directory name, ``run-3.json``).
Harness results are recognised by their content: a GuideLLM report (``benchmarks``), a vLLM
``bench serve`` result (``start_times`` and ``ttfts``), an AIPerf artifact directory or export
(``profile_export_aiperf.json`` + ``.jsonl``; ``profile_runs/run_NNNN/`` repetitions), an
inference-perf report directory (``*per_request_lifecycle_metrics.json``, whose version the
caller gives: its reports do not record it).  A side may also be a directory of such files or
report directories, one per repetition.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from evalkit.errors import InputError
from evalkit.interop.aiperf import AGGREGATE, RECORDS, read_aiperf
from evalkit.interop.guidellm import read_guidellm
from evalkit.interop.harness_runs import HarnessRun
from evalkit.interop.inference_perf import PER_REQUEST, read_inference_perf
from evalkit.interop.vllm_bench import _load_json, parse_vllm_result
from evalkit.runlog.design import arrival_fingerprint
from evalkit.runlog.io import list_runs, refused_error
from evalkit.runlog.validate import read_valid_run

__all__ = ["RESULT_SUFFIXES", "Unit", "load_side", "repetition_of"]

RESULT_SUFFIXES = (".json",)
_TRAILING_INT = re.compile(r"(\d+)(?!.*\d)")
SIDE_FIX = ("pass a runs directory (evalkit replay/sweep/import), or the results of GuideLLM "
            "(benchmarks.json), vLLM bench (--save-result --save-detailed), AIPerf (artifact "
            "directory) or inference-perf (report directory): one, or a directory of them")


@dataclass
class Unit:
    """One run of one side."""

    label: str                       # run id, or file name (#benchmark)
    path: str
    harness: str         # "evalkit runs" | "guidellm" | "vllm-bench" | "aiperf" | "inference-perf"
    requests: pd.DataFrame
    slo: dict | None
    seed: int | None
    repetition: int | None
    trace: str = ""
    provenance: dict = field(default_factory=dict)

    def key(self, name: str):
        return {"seed": self.seed, "trace": self.trace or None,
                "repetition": self.repetition}[name]


def repetition_of(name: str) -> int | None:
    """The repetition index a file or directory name carries: its last integer, else None."""
    found = _TRAILING_INT.search(Path(name).stem if "." in name else name)
    return int(found.group(1)) if found else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _int_or_none(value) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _finish(unit: Unit) -> Unit:
    unit.trace = arrival_fingerprint(unit.requests["arrival_s"].to_numpy(dtype=float))
    return unit


def _from_runs(root: Path) -> list[Unit]:
    listing = list_runs(root)
    if listing.refused:
        raise refused_error(listing.refused)
    if listing.unreadable:
        path, why = listing.unreadable[0]
        raise InputError(f"cannot read a run: {why}", file=str(path),
                         fix="give read access, or remove the directory")
    units = []
    for run_dir in listing.run_dirs:
        run = read_valid_run(run_dir)
        meta = run.meta
        units.append(_finish(Unit(
            label=run.run_id, path=str(run_dir), harness="evalkit runs", requests=run.requests,
            slo=meta.get("slo"), seed=_int_or_none(meta.get("seed")),
            repetition=repetition_of(run_dir.name),
            provenance={"run_id": run.run_id, "policy": meta.get("policy"),
                        "backend": meta.get("backend"), "complete": meta.get("complete")})))
    return units


def _from_harness_runs(runs: list[HarnessRun], name: str) -> list[Unit]:
    out = []
    for run in runs:
        label = Path(run.source).name if run.repetition is None else \
            f"{Path(run.source).parent.name}/{Path(run.source).name}"
        out.append(_finish(Unit(
            label=f"{name}:{label}" if len(runs) == 1 else label, path=run.source,
            harness=run.tool, requests=run.requests, slo=None,
            seed=_int_or_none(run.tool_seed),
            repetition=run.repetition if run.repetition is not None else repetition_of(name),
            provenance={"tool": run.tool, "version": run.tool_version,
                        "config_sha256": run.config_sha256, "load": run.label,
                        "notes": list(run.notes)})))
    return out


def _report_dir_kind(path: Path) -> str | None:
    """"aiperf" / "inference-perf" for a harness's report directory, else None."""
    if (path / AGGREGATE).exists() or (path / RECORDS).exists() or \
            (path / "profile_runs").is_dir():
        return "aiperf"
    if any(path.glob(f"*{PER_REQUEST}")):
        return "inference-perf"
    return None


def _from_report_dir(path: Path, kind: str, tool_version: str | None) -> list[Unit]:
    if kind == "aiperf":
        return _from_harness_runs(read_aiperf(path), path.name)
    return _from_harness_runs(read_inference_perf(path, tool_version=tool_version),
                              path.name)


def _harness_of(path: Path, data) -> str:
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
        return "guidellm"
    if isinstance(data, dict) and "start_times" in data and "ttfts" in data:
        return "vllm-bench"
    raise InputError("not a result file of a supported harness (neither a GuideLLM report "
                     "with 'benchmarks' nor a vLLM bench result with 'start_times' and "
                     "'ttfts')", file=str(path), column="benchmarks", fix=SIDE_FIX)


def _from_file(path: Path, benchmark: str | None, tool_version: str | None) -> list[Unit]:
    if path.name.endswith(PER_REQUEST):
        return _from_harness_runs(read_inference_perf(path, tool_version=tool_version),
                                  path.name)
    if path.suffix.lower() == ".jsonl":
        return _from_harness_runs(read_aiperf(path), path.name)
    data = _load_json(path)
    if isinstance(data, dict) and "aiperf_version" in data:
        return _from_harness_runs(read_aiperf(path), path.name)
    harness = _harness_of(path, data)
    prov = {"file": path.name, "sha256": _sha256(path), "tool": harness}
    if harness == "vllm-bench":
        requests, scalars = parse_vllm_result(path)
        prov["version"] = scalars.get("vllm_version") or scalars.get("version")
        return [_finish(Unit(label=path.name, path=str(path), harness=harness,
                             requests=requests, slo=None, seed=_int_or_none(scalars.get("seed")),
                             repetition=repetition_of(path.name), provenance=prov))]
    prov["version"] = (data.get("metadata") or {}).get("guidellm_version")
    benches = read_guidellm(path)
    labels = [b.label for b in benches]
    if benchmark is not None:
        benches = [b for b in benches if b.label == benchmark]
        if not benches:
            raise InputError(f"no benchmark {benchmark!r} in this report", file=str(path),
                             column="--benchmark", fix="use one of: " + ", ".join(labels))
    elif len(benches) > 1:
        raise InputError(f"the report holds {len(benches)} benchmarks ({', '.join(labels)}); "
                         "a comparison needs one configuration per file", file=str(path),
                         column="--benchmark", fix="choose one with --benchmark LABEL")
    b = benches[0]
    seed = _int_or_none((data.get("args") or {}).get("random_seed"))
    return [_finish(Unit(label=f"{path.name}#{b.label}", path=str(path), harness=harness,
                         requests=b.requests, slo=None, seed=seed,
                         repetition=repetition_of(path.name),
                         provenance={**prov, "benchmark": b.label}))]


def _is_runs_dir(root: Path) -> bool:
    if (root / "run.json").exists():
        return True
    for _here, _dirs, files in os.walk(root):
        if "run.json" in files:
            return True
    return False


def load_side(path, *, side: str, benchmark: str | None = None,
              tool_version: str | None = None) -> list[Unit]:
    """Every run of one side (``side``: "A" or "B", for messages), in name order.
    ``tool_version``: the inference-perf version (its reports do not record it)."""
    root = Path(path)
    if not root.exists():
        raise InputError(f"side {side} does not exist", file=str(root), fix=SIDE_FIX)
    if root.is_file():
        return _from_file(root, benchmark, tool_version)
    if not root.is_dir():
        raise InputError(f"side {side} is neither a file nor a directory", file=str(root),
                         fix=SIDE_FIX)
    if _is_runs_dir(root):
        return _from_runs(root)
    kind = _report_dir_kind(root)
    if kind is not None:
        return _from_report_dir(root, kind, tool_version)
    units = []
    for child in sorted(p for p in root.iterdir() if not p.name.startswith(".")):
        if child.is_file() and child.suffix.lower() in RESULT_SUFFIXES:
            units += _from_file(child, benchmark, tool_version)
        elif child.is_dir() and (kind := _report_dir_kind(child)) is not None:
            units += _from_report_dir(child, kind, tool_version)
    if not units:
        raise InputError(f"side {side} holds no runs (no run.json below it) and no harness "
                         "results (*.json files or AIPerf / inference-perf report "
                         "directories)", file=str(root), fix=SIDE_FIX)
    return units
