"""One job of a campaign: its trace, the recorded runs it reads, and its replay.

:func:`execute_job` runs one planned job of a sweep; it reads what it needs from the runs
directory, so it runs in any process, on any machine, that sees that directory.
:func:`resolve_inputs` is the one place a replay's inputs from recorded runs are worked
out -- the reference run's observed K (a matched-random draw, ``calibrated_offline``), the
matched-random wiring, and an oracle's request intervals (from the recorded no-sync run of
the same seed) -- for ``evalkit sweep`` and ``evalkit replay`` alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.jsonio import loads_json
from evalkit.replay import traces as T
from evalkit.replay.campaign import Campaign, Job
from evalkit.policies import policy_identity, resolve_policy
from evalkit.replay.run_order import start_record
from evalkit.replay.runner import k_observed, load_backend, run_one
from evalkit.replay.spec import ReplaySpec
from evalkit.runlog.execution_order import ATTEMPTS_DIR, kept_attempt_name, recorded_attempts
from evalkit.runlog.io import read_meta, read_table

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class JobOutcome:
    run_id: str
    status: str              # "ran" | "skipped" | "failed" | "blocked"
    message: str = ""
    seconds: float = 0.0


# ----------------------------------------------------------------------------- traces

def resolve_path(raw: str, camp: Campaign) -> Path:
    """A trace path: as given if absolute, else next to the campaign file, else the repo root."""
    p = Path(raw)
    if p.is_absolute():
        return p
    tried = []
    for base in ([camp.path.parent] if camp.path else []) + [REPO_ROOT, Path.cwd()]:
        cand = (base / p).resolve()
        tried.append(str(cand))
        if cand.exists():
            return cand
    raise InputError(f"trace file {raw!r} not found (tried {', '.join(tried)})",
                     file=str(camp.path) if camp.path else None, column="trace.path",
                     fix="give a path relative to the campaign file or the repository root")


@lru_cache(maxsize=4)
def _load_file_trace(path: str, fmt: str, sort: bool):
    if fmt == "parquet":
        return T.read_trace(path, sort=sort)
    return T.import_trace(path, fmt, sort=sort)


_TRACES: OrderedDict = OrderedDict()
_TRACES_MAX = 8


def build_trace(camp: Campaign, seed: int):
    """The request trace of one seed (generator traces are seeded; file traces are shared).

    Cached per process by (trace spec, campaign file, seed): a sweep runs every job of a
    seed on the same trace, so a worker builds it once.  Callers must not modify it.
    """
    key = (json.dumps(camp.trace, sort_keys=True, default=str), str(camp.path), int(seed))
    hit = _TRACES.get(key)
    if hit is not None:
        _TRACES.move_to_end(key)
        return hit
    trace = _build_trace(camp, seed)
    _TRACES[key] = trace
    while len(_TRACES) > _TRACES_MAX:
        _TRACES.popitem(last=False)
    return trace


def _build_trace(camp: Campaign, seed: int):
    spec = dict(camp.trace)
    if "generator" in spec:
        kind = spec.pop("generator")
        lengths = None
        prompt, output = spec.pop("prompt_tokens", None), spec.pop("output_tokens", None)
        name = spec.pop("name", None)
        if prompt is not None or output is not None:
            lengths = T.Lengths(
                T.parse_length(str(prompt)) if prompt is not None else T.DEFAULT_LENGTHS.prompt,
                T.parse_length(str(output)) if output is not None else T.DEFAULT_LENGTHS.output)
        return T.generate(kind, seed=seed, lengths=lengths,
                          name=f"{name}-seed{seed}" if name else None, **spec)
    path = resolve_path(spec["path"], camp)
    fmt = spec.get("format") or ("parquet" if path.suffix in (".parquet", ".pq") else None)
    if fmt is None:
        raise InputError(f"cannot tell the format of {path.name}", column="trace.format",
                         file=str(camp.path) if camp.path else None,
                         fix='add format = "azure" | "burstgpt" | "mooncake" | "vllm-bench"')
    trace = _load_file_trace(str(path), fmt, bool(spec.get("sort", False)))
    stride = float(spec.get("seed_stride_s", 0.0)) * int(seed)
    if "start_s" in spec or "end_s" in spec or stride:
        # seed_stride_s: each seed replays its own window of the file (its own trace
        # realisation); without it every seed replays the same requests and counts once
        end = spec.get("end_s")
        trace = T.slice_window(trace, spec.get("start_s", 0.0) + stride,
                               float(trace.arrival_s[-1]) + 1.0 if end is None else end + stride)
    if "time_scale" in spec:
        trace = T.time_scale(trace, spec["time_scale"])
    if "name" in spec:                  # a copy: the loaded trace is cached and shared
        trace = dataclasses.replace(trace, name=str(spec["name"]))
    return trace


# ----------------------------------------------------------------------------- inputs

class MissingInput(InputError):
    """A recorded run a replay reads (reference or no-sync run) is missing or failed."""


def reference_k(run_dir: Path, name: str | None = None) -> tuple[int, dict]:
    """The observed K of a complete recorded run, and its run.json.

    ``name``: how messages call the run (default: the directory name).
    Raises :class:`MissingInput` when the run is missing or incomplete.
    """
    run_dir = Path(run_dir)
    name = name or run_dir.name
    if not (run_dir / "run.json").exists():
        raise MissingInput(f"reference run {name} is missing", file=str(run_dir),
                           fix="run the reference first (its run directory holds run.json)")
    meta = read_meta(run_dir)
    if not meta.get("complete"):
        raise MissingInput(f"reference run {name} failed: {str(meta.get('error', ''))[:200]}",
                           file=str(run_dir), fix="rerun the reference first")
    if "k_observed" in meta:
        return int(meta["k_observed"]), meta
    return k_observed(read_table(run_dir, "requests"), read_table(run_dir, "merges"),
                      float(meta["horizon_s"]), float(meta["merge_duration_s"])), meta


def oracle_intervals(run_dir: Path, name: str | None = None) -> tuple[pd.DataFrame, dict]:
    """The request intervals (arrival_s, end_s; a request that never ended: +inf) of a
    complete recorded no-sync run, and its run.json.  Shape: one row per request.

    Raises :class:`MissingInput` when the run is missing or incomplete.
    """
    run_dir = Path(run_dir)
    name = name or run_dir.name
    meta = read_meta(run_dir) if (run_dir / "run.json").exists() else None
    if meta is None or not meta.get("complete"):
        raise MissingInput(f"no-sync run {name} is missing or failed", file=str(run_dir),
                           fix="run the no-sync run of this seed first")
    req = read_table(run_dir, "requests", columns=["arrival_s", "end_s"])
    req["end_s"] = req["end_s"].fillna(np.inf)
    return req, meta


def resolve_inputs(spec: ReplaySpec, runs_dir, *, k_from: str | Path | None = None,
                   intervals_from: str | Path | None = None,
                   trace=None) -> tuple[ReplaySpec, dict]:
    """``spec`` completed from the recorded runs it depends on, and the run.json
    ``settings.requested`` entries that say where they came from.

    ``k_from``: the run (a name inside ``runs_dir``, or a path) whose observed K becomes
    ``spec.reference_k``; a matched-random spec is wired to it (``matched_to``: that run's
    policy label, unless already set; ``draw`` 0 unless set).  ``intervals_from``: the
    no-sync run whose request intervals an oracle policy sees (``spec.future_requests``);
    it must have replayed ``trace`` (when given) with ``spec.seed``.
    Raises :class:`MissingInput` when one of them is missing or failed, and
    :class:`~evalkit.errors.InputError` when the no-sync run is of another trace or seed.
    """
    runs_dir = Path(runs_dir)
    extra: dict = {}
    if k_from is not None:
        k, meta = reference_k(runs_dir / k_from, str(k_from))
        spec = dataclasses.replace(spec, reference_k=k, reference_run_id=str(meta["run_id"]))
        if spec.role == "matched_random":
            spec = dataclasses.replace(
                spec, matched_to=spec.matched_to if spec.matched_to is not None
                else str(meta["policy"]), draw=0 if spec.draw is None else spec.draw)
    if intervals_from is not None:
        iv, meta = oracle_intervals(runs_dir / intervals_from, str(intervals_from))
        _check_same_replay(meta, spec, trace, runs_dir / intervals_from)
        spec = dataclasses.replace(spec, future_requests=iv)
        extra["oracle_intervals_from"] = str(meta["run_id"])
    return spec, extra


def seed_probe(runs_dir, spec: ReplaySpec, trace) -> dict | None:
    """The capacity probe the earliest-started complete run of ``spec.seed`` (same trace
    realisation, another run) recorded in ``runs_dir``, for a backend that measures one
    (its module's ``recorded_probe(meta)``); None otherwise.  Every run of a seed then
    carries one measurement, also a run re-done in a later sweep on a fresh rig."""
    reader = getattr(load_backend(spec.backend), "recorded_probe", None)
    runs_dir = Path(runs_dir)
    if reader is None or not runs_dir.is_dir():
        return None
    found = []
    for run_json in sorted(runs_dir.glob("*/run.json")):
        if run_json.parent.name.startswith(".") or run_json.parent.name == spec.run_id:
            continue
        try:
            meta = read_meta(run_json.parent)
        except (InputError, OSError, ValueError):
            continue                    # a damaged run is the sweep's business, not the probe's
        if meta.get("seed") != spec.seed or (
                trace is not None and meta.get("trace_realisation") != trace.sha256):
            continue
        probe = reader(meta)
        if probe is not None:
            order = meta.get("run_order") if isinstance(meta.get("run_order"), dict) else {}
            found.append((str(order.get("started_at") or meta.get("created_at") or ""),
                          probe["run_id"], probe))
    return min(found, key=lambda f: f[:2])[2] if found else None


def _check_same_replay(meta: dict, spec: ReplaySpec, trace, run_dir: Path) -> None:
    """The no-sync run an oracle reads replayed this trace with this seed."""
    problems = []
    if meta.get("role") != "no_sync":
        problems.append(("role", f"its role is {meta.get('role')!r}, not 'no_sync'"))
    if meta.get("seed") is not None and int(meta["seed"]) != int(spec.seed):
        problems.append(("seed", f"it ran seed {meta['seed']}, this replay seed {spec.seed}"))
    sha = meta.get("trace_realisation")
    if trace is not None and sha is not None and sha != trace.sha256:
        problems.append(("trace_realisation", f"it replayed trace {str(sha)[:12]}, this "
                                              f"replay trace {str(trace.sha256)[:12]}"))
    if problems:
        key, why = problems[0]
        raise InputError(f"no-sync run {run_dir.name} cannot give this replay's oracle "
                         f"intervals: {why}", file=str(run_dir / "run.json"), column=key,
                         fix="pass the no-sync run recorded with the same trace and seed")


# ----------------------------------------------------------------------------- jobs

def job_fingerprint(camp: Campaign, job: Job) -> str:
    pe = job.policy
    payload = [camp.fingerprint(), job.kind, pe.name if pe else None,
               pe.params if pe else None]
    if pe is not None:
        ident = policy_identity(resolve_policy(pe.name))
        if not ident["builtin"]:            # a changed plugin redoes its runs and draws
            payload.append(ident)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _is_done(run_dir: Path, fingerprint: str, plan_hash: str | None = None) -> bool:
    try:
        meta = loads_json((run_dir / "run.json").read_bytes(), what="run.json")
    except (OSError, ValueError):
        return False
    req = (meta.get("settings") or {}).get("requested") or {}
    return (bool(meta.get("complete")) and req.get("campaign_fingerprint") == fingerprint
            and (plan_hash is None or meta.get("plan_sha256") == plan_hash))


def _portable_path(path) -> str:
    """The campaign file as run.json records it: relative to the working directory when it
    lies below it, else its name (no absolute machine paths in run logs)."""
    p = Path(path)
    try:
        return p.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return p.name


def job_spec(camp: Campaign, job: Job) -> tuple[ReplaySpec, str, dict, str]:
    """The spec of a planned job before its inputs are resolved, with its policy name,
    parameters and label (and, under a challenged plan, the RNG seed the plan derived)."""
    planned = (camp.policy_seeds or {}).get(job.run_id)
    if job.kind == "no_sync":
        return (camp.spec(job.run_id, job.seed, role="no_sync", policy_seed=planned),
                "no_sync", {}, "no_sync")
    if job.kind == "policy":
        params = {k: v for k, v in job.policy.params.items() if k != "k_from"}
        if job.policy.name == "calibrated_offline":
            params["k_from"] = job.policy.params.get("k_from")
        return (camp.spec(job.run_id, job.seed, role="policy", policy_seed=planned),
                job.policy.name, params, job.policy.label)
    spec = camp.spec(job.run_id, job.seed, role="matched_random", draw=job.draw,
                     matched_to=job.policy.label, policy_seed=planned)
    return spec, "matched_random", {}, "matched_random"


def execute_job(camp: Campaign, job: Job, runs_dir, *, on_start=None) -> JobOutcome:
    """Run one job unless it is already complete; never raises for a single job's failure.
    ``camp.plan_sha256``: the runs directory's plan (:mod:`evalkit.runlog.plan`), stamped
    into run.json.  ``on_start(marker)``: called with the run's start marker once it is
    written (a store copies it where a killed worker's successor finds it)."""
    plan_hash = camp.plan_sha256
    t0 = time.perf_counter()
    runs_dir = Path(runs_dir)
    fp = job_fingerprint(camp, job)
    if _is_done(runs_dir / job.run_id, fp, plan_hash):
        return JobOutcome(job.run_id, "skipped")
    try:
        spec, policy, params, label = job_spec(camp, job)
        trace = build_trace(camp, job.seed)
        try:
            spec, extra = resolve_inputs(spec, runs_dir, k_from=job.k_from_run,
                                         intervals_from=job.intervals_from_run, trace=trace)
        except MissingInput as exc:
            return JobOutcome(job.run_id, "blocked", exc.message, time.perf_counter() - t0)
        spec = dataclasses.replace(spec, seed_probe=seed_probe(runs_dir, spec, trace))
        extra["campaign_fingerprint"] = fp
        if plan_hash is not None:
            extra["plan_sha256"] = plan_hash
        extra["campaign"] = _portable_path(camp.path) if camp.path else None
        meta = _order_meta(job, keep_failed_attempts(runs_dir, job.run_id))
        marker = _mark_started(runs_dir, job.run_id, meta)
        if marker is not None and on_start is not None:
            on_start(marker)
        try:
            res = run_one(spec, trace, policy, runs_dir, policy_params=params,
                          policy_label=label, extra_requested=extra, extra_meta=meta)
        except InputError as exc:       # refused before a run.json: the marker keeps why
            _note_failure(marker, exc.message)
            raise
        if marker is not None:      # written, complete or not: the run.json is the record now
            _clear_marker(marker)
    except InputError as exc:
        return JobOutcome(job.run_id, "failed", exc.format(), time.perf_counter() - t0)
    if not res.complete:
        return JobOutcome(job.run_id, "failed", res.error or "incomplete",
                          time.perf_counter() - t0)
    return JobOutcome(job.run_id, "ran", f"K={res.k_observed}", time.perf_counter() - t0)


def _order_meta(job: Job, attempts: list[dict] | None = None) -> dict | None:
    """``run_order`` for run.json: the job's slot and, measured now, its start and host load;
    ``attempts``: the failed earlier attempts at this slot (:func:`keep_failed_attempts`)."""
    if job.order is None:
        return None
    return {"run_order": {**job.order, **start_record(),
                          **({"attempts": attempts} if attempts else {})}}


INTERRUPTED = "interrupted: the sweep stopped before the run was written"


def marker_name(run_id: str) -> str:
    """The start marker's file name inside ``<runs>/.attempts/``."""
    return f"{run_id}.started.json"


def _marker(runs_dir: Path, run_id: str) -> Path:
    return Path(runs_dir) / ATTEMPTS_DIR / marker_name(run_id)


def _mark_started(runs_dir: Path, run_id: str, meta: dict | None) -> Path | None:
    """A marker of this attempt (its slot, start and earlier attempts) written before the run
    starts and removed once its run.json is written: a sweep killed mid-run leaves it, and the
    re-run records that attempt (:func:`keep_failed_attempts`)."""
    order = (meta or {}).get("run_order")
    if order is None:
        return None
    marker = _marker(runs_dir, run_id)
    text = json.dumps({k: order.get(k) for k in ("position", "started_at", "attempts")})
    for _ in range(3):          # another job may remove the emptied folder in between
        try:
            marker.parent.mkdir(exist_ok=True)
            marker.write_text(text)
            return marker
        except FileNotFoundError:
            continue
        except OSError:         # a read-only or remote folder: the run is still recorded
            return None
    return None


def _clear_marker(marker: Path) -> None:
    """Remove the marker, and its folder once nothing else is kept there."""
    with contextlib.suppress(OSError):
        marker.unlink(missing_ok=True)
        marker.parent.rmdir()           # fails while kept attempts or other markers are there


def _note_failure(marker: Path | None, error: str) -> None:
    if marker is None:
        return
    with contextlib.suppress(OSError, ValueError, InputError):
        started = loads_json(marker.read_text())
        marker.write_text(json.dumps({**started, "error": error.strip().splitlines()[0][:300]}))


def keep_failed_attempts(runs_dir: Path, run_id: str) -> list[dict]:
    """The failed attempts at a run that is about to be re-done, so the audit can place the
    re-run at the slot where it first started: those the failed attempt knew of, then the
    failed attempt itself -- from its incomplete run.json (slot, start, end, error and the
    run.json's sha256; the file is kept as ``<runs>/.attempts/<run_id>.<n>.run.json``), or,
    when the sweep was killed before writing it, from the marker it left (slot and start,
    error :data:`INTERRUPTED`).  Empty when nothing, or a complete (stale) run, is there."""
    marker = _marker(runs_dir, run_id)
    attempts = _attempts_from_run(runs_dir, run_id)
    if attempts is None:
        attempts = _attempts_from_marker(marker)
    _clear_marker(marker)
    return attempts


def _attempts_from_marker(marker: Path) -> list[dict]:
    try:
        started = loads_json(marker.read_text())
    except (OSError, UnicodeDecodeError, ValueError, InputError):
        return []
    if not isinstance(started, dict):
        return []
    earlier = recorded_attempts(started)
    return earlier + [{"position": started.get("position"),
                       "started_at": started.get("started_at"), "written_at": None,
                       "error": started.get("error") or INTERRUPTED,
                       "run_json_sha256": None}]


def _attempts_from_run(runs_dir: Path, run_id: str) -> list[dict] | None:
    """None when no run.json is there; [] for a complete or unreadable one."""
    path = Path(runs_dir) / run_id / "run.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return []
    try:
        meta = loads_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, InputError):
        return []
    if not isinstance(meta, dict) or meta.get("complete") is not False:
        return []
    order = meta.get("run_order") if isinstance(meta.get("run_order"), dict) else {}
    earlier = recorded_attempts(order)
    error = str(meta.get("error") or "").strip().splitlines()
    kept = Path(runs_dir) / ATTEMPTS_DIR / kept_attempt_name(run_id, len(earlier) + 1)
    with contextlib.suppress(OSError):      # the record in the re-run is what counts
        kept.parent.mkdir(exist_ok=True)
        kept.write_bytes(raw)
    return earlier + [{"position": order.get("position"), "started_at": order.get("started_at"),
                       "written_at": meta.get("created_at"),
                       "error": error[0][:300] if error else None,
                       "run_json_sha256": hashlib.sha256(raw).hexdigest()}]
