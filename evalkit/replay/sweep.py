"""Execute a campaign: build traces, check everything, then run the job plan.

Structure: :func:`plan_campaign` gives jobs with dependencies (optionally one shard of
them, :func:`~evalkit.replay.campaign.shard_jobs`); :func:`run_campaign` submits every job
whose dependencies have finished to an *executor* — any object with
``submit(fn, *args) -> concurrent.futures.Future`` and ``shutdown()`` (serial, process pool
or Ray: :mod:`evalkit.replay.executors`); a job is executed by :func:`execute_job`, which
reads what it needs (a reference run's K, the no-sync request intervals) from the runs
directory, so it can run in any process, on any machine, that sees that directory.

Resumable: a complete run whose recorded campaign fingerprint matches, and which passes
:func:`~evalkit.runlog.validate.validate_run`, is skipped; an incomplete or stale one is
redone; a damaged one (a truncated table, a broken run.json) is moved aside to
``.<run_id>.damaged-<time>`` -- never deleted -- and redone.  Each run is written
atomically by the runner.  A sweep holds a lock on its runs directory
(:mod:`evalkit.replay.storelock`) and, on start, cleans what a killed sweep left behind:
``.<id>.tmp-*`` (unfinished writes) are removed and an ``.<id>.old-*`` whose replacement
never landed is renamed back.  :func:`check_campaign` (``evalkit sweep --check``) lists
what is still missing, checking every existing run the same way; it writes nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.fsutil import fsync_dir, map_ordered
from evalkit.replay.campaign import Campaign, Job, Shard, load_campaign, plan_campaign, shard_jobs
from evalkit.replay.executors import (PoolExecutor, RayExecutor,  # noqa: F401 - re-exported
                                      SerialExecutor, make_executor)
from evalkit.replay.runner import check_trace, run_one
from evalkit.replay.storelock import StoreLock, current_holders
from evalkit.runlog.io import UnreadableRun, leftover_kind, read_meta, read_table
from evalkit.runlog.io import LINK_FIX, run_link_trouble

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class JobOutcome:
    run_id: str
    status: str              # "ran" | "skipped" | "failed" | "blocked"
    message: str = ""
    seconds: float = 0.0


@dataclass
class SweepSummary:
    outcomes: list[JobOutcome] = field(default_factory=list)
    seconds: float = 0.0
    runs_dir: Path | None = None
    shard: Shard | None = None
    notes: list[str] = field(default_factory=list)   # lock take-over, clean-up, repairs

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0 and self.count("blocked") == 0

    def format(self) -> str:
        part = f"shard {self.shard}: " if self.shard else ""
        lines = [f"{part}{len(self.outcomes)} jobs in {self.seconds:.1f} s: "
                 f"{self.count('ran')} ran, "
                 f"{self.count('skipped')} skipped (already complete), "
                 f"{self.count('failed')} failed, {self.count('blocked')} blocked"
                 f" -> {self.runs_dir}"]
        lines += [f"  note: {n}" for n in self.notes]
        for o in self.outcomes:
            if o.status in ("failed", "blocked"):
                first = o.message.splitlines()[0] if o.message else ""
                lines.append(f"  {o.status}: {o.run_id}: {first}")
        return "\n".join(lines)


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
    from evalkit.replay.traces import import_trace, read_trace

    if fmt == "parquet":
        return read_trace(path, sort=sort)
    return import_trace(path, fmt, sort=sort)


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
    from evalkit.replay import traces as T

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


# ----------------------------------------------------------------------------- jobs

def job_fingerprint(camp: Campaign, job: Job) -> str:
    pe = job.policy
    payload = [camp.fingerprint(), job.kind, pe.name if pe else None,
               pe.params if pe else None]
    if pe is not None:
        from evalkit.replay.policies import policy_identity, resolve_policy
        ident = policy_identity(resolve_policy(pe.name))
        if not ident["builtin"]:            # a changed plugin redoes its runs and draws
            payload.append(ident)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _is_done(run_dir: Path, fingerprint: str, plan_hash: str | None = None) -> bool:
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return False
    req = (meta.get("settings") or {}).get("requested") or {}
    return (bool(meta.get("complete")) and req.get("campaign_fingerprint") == fingerprint
            and (plan_hash is None or meta.get("plan_sha256") == plan_hash))


def _reference_k(runs_dir: Path, run_id: str) -> tuple[int | None, str]:
    d = runs_dir / run_id
    if not (d / "run.json").exists():
        return None, f"reference run {run_id} is missing"
    meta = read_meta(d)
    if not meta.get("complete"):
        return None, f"reference run {run_id} failed: {str(meta.get('error', ''))[:200]}"
    if "k_observed" in meta:
        return int(meta["k_observed"]), ""
    from evalkit.replay.runner import k_observed

    return k_observed(read_table(d, "requests"), read_table(d, "merges"),
                      float(meta["horizon_s"]), float(meta["merge_duration_s"])), ""


def _intervals(runs_dir: Path, run_id: str) -> tuple[pd.DataFrame | None, str]:
    d = runs_dir / run_id
    if not (d / "run.json").exists() or not read_meta(d).get("complete"):
        return None, f"no-sync run {run_id} is missing or failed"
    req = read_table(d, "requests", columns=["arrival_s", "end_s"])
    req["end_s"] = req["end_s"].fillna(np.inf)
    return req, ""


def _portable_path(path) -> str:
    """The campaign file as run.json records it: relative to the working directory when it
    lies below it, else its name (no absolute machine paths in run logs)."""
    p = Path(path)
    try:
        return p.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return p.name


def execute_job(camp: Campaign, job: Job, runs_dir) -> JobOutcome:
    """Run one job unless it is already complete; never raises for a single job's failure.
    ``camp.plan_sha256``: the runs directory's plan (:mod:`evalkit.runlog.plan`), stamped
    into run.json."""
    plan_hash = camp.plan_sha256
    t0 = time.perf_counter()
    runs_dir = Path(runs_dir)
    fp = job_fingerprint(camp, job)
    if _is_done(runs_dir / job.run_id, fp, plan_hash):
        return JobOutcome(job.run_id, "skipped")
    try:
        extra = {}
        if job.kind == "no_sync":
            spec = camp.spec(job.run_id, job.seed, role="no_sync")
            policy, params, label = "no_sync", {}, "no_sync"
        elif job.kind == "policy":
            spec = camp.spec(job.run_id, job.seed, role="policy")
            params = {k: v for k, v in job.policy.params.items() if k != "k_from"}
            policy, label = job.policy.name, job.policy.label
            if job.policy.name == "calibrated_offline":
                params["k_from"] = job.policy.params.get("k_from")
            if job.k_from_run:
                k, why = _reference_k(runs_dir, job.k_from_run)
                if k is None:
                    return JobOutcome(job.run_id, "blocked", why, time.perf_counter() - t0)
                spec.reference_k, spec.reference_run_id = k, job.k_from_run
            if job.intervals_from_run:
                iv, why = _intervals(runs_dir, job.intervals_from_run)
                if iv is None:
                    return JobOutcome(job.run_id, "blocked", why, time.perf_counter() - t0)
                spec.future_requests = iv
                extra["oracle_intervals_from"] = job.intervals_from_run
        else:
            k, why = _reference_k(runs_dir, job.k_from_run)
            if k is None:
                return JobOutcome(job.run_id, "blocked", why, time.perf_counter() - t0)
            spec = camp.spec(job.run_id, job.seed, role="matched_random", draw=job.draw,
                             matched_to=job.policy.label, reference_k=k,
                             reference_run_id=job.k_from_run)
            policy, params, label = "matched_random", {}, "matched_random"
        extra["campaign_fingerprint"] = fp
        if plan_hash is not None:
            extra["plan_sha256"] = plan_hash
        extra["campaign"] = _portable_path(camp.path) if camp.path else None
        trace = build_trace(camp, job.seed)
        res = run_one(spec, trace, policy, runs_dir, policy_params=params, policy_label=label,
                      extra_requested=extra, extra_meta=_order_meta(job))
    except InputError as exc:
        return JobOutcome(job.run_id, "failed", exc.format(), time.perf_counter() - t0)
    if not res.complete:
        return JobOutcome(job.run_id, "failed", res.error or "incomplete",
                          time.perf_counter() - t0)
    return JobOutcome(job.run_id, "ran", f"K={res.k_observed}", time.perf_counter() - t0)


def _order_meta(job: Job) -> dict | None:
    """``run_order`` for run.json: the job's slot and, measured now, its start and host load."""
    if job.order is None:
        return None
    from evalkit.replay.run_order import start_record

    return {"run_order": {**job.order, **start_record()}}


# ----------------------------------------------------------------------------- campaign

def preflight(camp: Campaign, jobs: list[Job]) -> None:
    """Check every seed's trace against the horizon before anything is written."""
    for seed in sorted({j.seed for j in jobs}):
        trace = build_trace(camp, seed)
        check_trace(trace, camp.spec("preflight", seed), source=str(camp.path or trace.name))


def scan_leftovers(runs_dir: Path) -> dict[str, list[tuple[str, Path]]]:
    """Hidden leftovers directly in ``runs_dir`` by run id: ``[(tag, path)]``, tag in
    ``tmp`` | ``old`` | ``damaged``."""
    out: dict[str, list[tuple[str, Path]]] = {}
    try:
        with os.scandir(runs_dir) as it:
            names = [e.name for e in it if e.name.startswith(".")]
    except FileNotFoundError:
        return out
    for name in sorted(names):
        kind = leftover_kind(name)
        if kind is not None:
            out.setdefault(kind[0], []).append((kind[1], runs_dir / name))
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def clean_leftovers(runs_dir: Path, run_ids) -> list[str]:
    """Undo what a killed sweep left for ``run_ids`` (call with the store locked).

    ``.<id>.old-*`` without ``<id>``: the run was moved aside and its replacement never
    landed -- renamed back.  ``.<id>.old-*`` beside ``<id>``: the replacement landed; the
    old copy is removed, as the writer would have.  ``.<id>.tmp-*``: an unfinished write,
    never published -- removed.  ``.<id>.damaged-*`` copies are kept.  Returns notes.
    """
    notes = []
    leftovers = scan_leftovers(runs_dir)
    removed = 0
    for run_id in sorted(set(run_ids) & set(leftovers)):
        items = leftovers[run_id]
        olds = sorted((p for tag, p in items if tag == "old"), key=_mtime, reverse=True)
        target = runs_dir / run_id
        if olds and not target.exists():
            olds[0].rename(target)
            fsync_dir(runs_dir)
            notes.append(f"restored {run_id} from {olds[0].name} (a killed sweep had moved it "
                         "aside and its replacement never landed)")
            olds = olds[1:]
        for path in olds + [p for tag, p in items if tag == "tmp"]:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    if removed:
        notes.append(f"removed {removed} unfinished write(s) left by an interrupted sweep")
    return notes


def move_aside(run_dir: Path) -> Path:
    """Rename a damaged run to ``.<id>.damaged-<UTC time>-<hex>`` (hidden: never read)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = run_dir.parent / f".{run_dir.name}.damaged-{stamp}-{uuid.uuid4().hex[:4]}"
    run_dir.rename(dest)
    fsync_dir(run_dir.parent)
    return dest


def run_campaign(campaign, runs_dir, *, n_jobs: int | None = 1, executor=None,
                 progress: bool | None = None, jobs: list[Job] | None = None,
                 shard: Shard | None = None, executor_kind: str = "local",
                 address: str | None = None, cpus_per_task: float | None = None,
                 gpus_per_task: float | None = None) -> SweepSummary:
    """Run (or resume) a campaign into ``runs_dir``; returns what ran, was skipped or failed.

    ``jobs``: a filtered plan (default: the whole plan); ``shard``: only that part of it
    (:func:`~evalkit.replay.campaign.shard_jobs`).  ``executor``: any object with
    ``submit``/``shutdown``, else one made by :func:`~evalkit.replay.executors.make_executor`
    from ``executor_kind``, ``n_jobs``, ``address`` and the per-task resources.
    Raises :class:`~evalkit.errors.StoreLocked` when another sweep works on ``runs_dir``.
    """
    from tqdm.auto import tqdm

    camp = campaign if isinstance(campaign, Campaign) else load_campaign(campaign)
    jobs = plan_campaign(camp) if jobs is None else jobs
    if shard is not None:
        jobs = shard_jobs(jobs, shard)
    preflight(camp, jobs)
    t0 = time.perf_counter()
    runs_dir = Path(runs_dir)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise InputError("--out exists and is not a directory", file=str(runs_dir),
                         fix="pass a runs directory (it is created if missing)")
    summary = SweepSummary(runs_dir=runs_dir, shard=shard)
    from evalkit.runlog.plan import directory_plan, plan_sha256, publish_plan

    plan, fresh = directory_plan(camp, runs_dir)
    camp = dataclasses.replace(camp, plan_sha256=plan_sha256(plan))
    # the executor first: a missing extra or an unreachable cluster writes nothing
    ex = executor or make_executor(camp, n_jobs, kind=executor_kind, address=address,
                                   cpus_per_task=cpus_per_task, gpus_per_task=gpus_per_task)
    try:
        with StoreLock(runs_dir, shard) as lock:
            summary.notes += lock.notes
            summary.notes.append(publish_plan(plan, fresh, runs_dir))
            plan_hash = camp.plan_sha256
            summary.notes += clean_leftovers(runs_dir, [j.run_id for j in jobs])
            states = existing_states(camp, jobs, runs_dir, plan_hash=plan_hash)
            bar = tqdm(total=len(jobs), desc=f"sweep {camp.regime}", unit="run",
                       disable=(not sys.stderr.isatty()) if progress is None else not progress)
            try:
                _schedule(camp, jobs, runs_dir, ex, summary, bar, states, plan_hash)
            finally:
                bar.close()
    finally:
        ex.shutdown()
    order = {j.run_id: i for i, j in enumerate(jobs)}
    summary.outcomes.sort(key=lambda o: order.get(o.run_id, 0))
    summary.seconds = time.perf_counter() - t0
    return summary


def _blocked_by(job: Job, dep: str, outcome: JobOutcome) -> JobOutcome:
    what = ("reference run" if dep == job.k_from_run else
            "no-sync run" if dep == job.intervals_from_run else "dependency")
    first = (outcome.message or "").splitlines()[0] if outcome.message else ""
    skip = "; its matched-random draws are skipped" if job.kind == "matched_random" else ""
    return JobOutcome(job.run_id, "blocked",
                      f"{what} {dep} {outcome.status}{': ' + first if first else ''}{skip}")


def _schedule(camp: Campaign, jobs: list[Job], runs_dir: Path, ex, summary: SweepSummary,
              bar, states: dict[str, "RunState"] | None = None,
              plan_hash: str | None = None) -> None:
    """Submit each job once its dependencies in ``jobs`` have finished, in the randomised,
    blocked execution order of :mod:`evalkit.replay.run_order` (earliest first, from the
    open blocks only).

    A job whose dependency failed or was blocked is reported blocked without being submitted;
    one already complete with this campaign's fingerprint (and valid) is skipped without being
    submitted; a damaged one is moved aside and redone; an unreadable one fails (fix the
    permissions and resume).  ``states``: :func:`existing_states` (computed here if None).
    Dependencies outside ``jobs`` (another shard, an earlier sweep) are read from disk by
    :func:`execute_job`.
    """
    import heapq

    from evalkit.replay.executors import WorkerLost

    from evalkit.replay import run_order

    jobs, window = run_order.ordered_jobs(camp, jobs)
    index = {j.run_id: i for i, j in enumerate(jobs)}
    waiting = {j.run_id: {d for d in j.depends_on if d in index} for j in jobs}
    dependents: dict[str, list[str]] = {}
    for rid, deps in waiting.items():
        for d in deps:
            dependents.setdefault(d, []).append(rid)
    ready = [index[r] for r, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    outcomes: dict[str, JobOutcome] = {}
    running: dict[cf.Future, Job] = {}
    cap = getattr(ex, "max_in_flight", None)

    def finish(outcome: JobOutcome) -> None:
        outcomes[outcome.run_id] = outcome
        window.finished(outcome.run_id)
        summary.outcomes.append(outcome)
        bar.update(1)
        for rid in dependents.get(outcome.run_id, ()):
            waiting[rid].discard(outcome.run_id)
            if not waiting[rid]:
                heapq.heappush(ready, index[rid])

    while ready or running:
        while ready and (cap is None or len(running) < cap) \
                and window.is_open(jobs[ready[0]].run_id):
            job = jobs[heapq.heappop(ready)]
            bad = [d for d in job.depends_on
                   if d in outcomes and outcomes[d].status in ("failed", "blocked")]
            if bad:
                finish(_blocked_by(job, bad[0], outcomes[bad[0]]))
                continue
            state = (states or {}).get(job.run_id) or run_state(camp, job, runs_dir,
                                                                 plan_hash=plan_hash)
            if state.state == "complete":
                finish(JobOutcome(job.run_id, "skipped"))
            elif state.state == "unreadable":
                finish(JobOutcome(job.run_id, "failed",
                                  f"the existing run cannot be read ({state.detail}); it is "
                                  "left as it is: fix its permissions and resume"))
            else:
                if state.state == "damaged":
                    moved = move_aside(runs_dir / job.run_id)
                    summary.notes.append(f"{job.run_id} was damaged ({state.detail}); moved "
                                         f"aside to {moved.name} and re-run")
                running[ex.submit(execute_job, camp, job, runs_dir)] = job
        if not running:
            continue
        done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
        for fut in done:
            job = running.pop(fut)
            try:
                outcome = fut.result()
            except WorkerLost:                # the pool is gone: stop, naming the run (exit 2)
                raise
            except Exception as exc:          # a crash outside the job's own handling
                outcome = JobOutcome(job.run_id, "failed", f"{type(exc).__name__}: {exc}")
            finish(outcome)


# ----------------------------------------------------------------------------- check

@dataclass
class RunState:
    run_id: str
    # "complete" | "missing" | "incomplete" | "stale" | "damaged" | "unreadable" | "interrupted"
    state: str
    detail: str = ""


@dataclass
class CheckReport:
    """What ``evalkit sweep --check`` found for each planned run (of one shard, if given)."""

    states: list[RunState]
    runs_dir: Path
    shard: Shard | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[RunState]:
        return [s for s in self.states if s.state != "complete"]

    @property
    def complete(self) -> bool:
        return not self.missing

    def format(self) -> str:
        part = f"shard {self.shard}: " if self.shard else ""
        n, bad = len(self.states), self.missing
        lines = [f"{part}{n - len(bad)} of {n} runs complete in {self.runs_dir}"
                 + (f"; {len(bad)} to run:" if bad else "")]
        for s in bad:
            lines.append(f"  {s.state:<11} {s.run_id}" + (f"  ({s.detail})" if s.detail else ""))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _first_line(text: str, limit: int = 200) -> str:
    lines = str(text or "").splitlines()
    return lines[0][:limit] if lines else ""


def run_state(camp: Campaign, job: Job, runs_dir: Path, *, deep: bool = True,
              leftovers: dict | None = None, plan_hash: str | None = None) -> RunState:
    """The state of one planned run on disk.  ``deep``: validate a complete run's files too
    (a truncated table makes it ``damaged``); ``leftovers``: :func:`scan_leftovers`;
    ``plan_hash``: a run not stamped with this plan is ``stale``."""
    d = runs_dir / job.run_id
    link = run_link_trouble(runs_dir, d)      # same rule as every listing (runlog.io)
    if link is not None:
        return RunState(job.run_id, "unreadable", f"{link}; {LINK_FIX}")
    try:
        present = d.exists()
    except OSError as exc:
        return RunState(job.run_id, "unreadable", exc.strerror or str(exc))
    if not present:
        olds = [p for tag, p in (leftovers if leftovers is not None
                                 else scan_leftovers(runs_dir)).get(job.run_id, [])
                if tag == "old"]
        if olds:
            return RunState(job.run_id, "interrupted",
                            f"moved aside as {olds[0].name} by a killed sweep; resume "
                            "restores it")
        return RunState(job.run_id, "missing")
    try:
        meta = read_meta(d)
    except UnreadableRun as exc:
        return RunState(job.run_id, "unreadable", exc.message)
    except InputError as exc:
        return RunState(job.run_id, "damaged", _first_line(exc.message))
    if not meta.get("complete"):
        return RunState(job.run_id, "incomplete", _first_line(meta.get("error")))
    req = (meta.get("settings") or {}).get("requested") or {}
    if req.get("campaign_fingerprint") != job_fingerprint(camp, job):
        return RunState(job.run_id, "stale", "written under different campaign settings")
    if plan_hash is not None and meta.get("plan_sha256") != plan_hash:
        return RunState(job.run_id, "stale", "not written under this runs directory's plan")
    if deep:
        from evalkit.runlog.validate import validate_run

        errors = [p for p in validate_run(d) if p.severity == "error" and p.kind != "scale"]
        unreadable = [p for p in errors if p.kind == "unreadable"]
        if unreadable:
            return RunState(job.run_id, "unreadable",
                            f"{Path(unreadable[0].file or d).name}: {unreadable[0].message}")
        if errors:
            where = Path(errors[0].file).name + ": " if errors[0].file else ""
            return RunState(job.run_id, "damaged", where + _first_line(errors[0].message))
    return RunState(job.run_id, "complete")


def existing_states(camp: Campaign, jobs: list[Job], runs_dir: Path, *,
                    threads: int | None = None,
                    plan_hash: str | None = None) -> dict[str, RunState]:
    """:func:`run_state` of every job (validating existing runs a few threads at a time)."""
    leftovers = scan_leftovers(runs_dir)
    states = map_ordered(lambda j: run_state(camp, j, runs_dir, leftovers=leftovers,
                                             plan_hash=plan_hash), jobs, threads)
    return {st.run_id: st for st in states}


def check_campaign(campaign, runs_dir, *, jobs: list[Job] | None = None,
                   shard: Shard | None = None) -> CheckReport:
    """The state of every planned run (missing, incomplete, stale, damaged, unreadable,
    interrupted or complete), validating each existing run; writes nothing."""
    camp = campaign if isinstance(campaign, Campaign) else load_campaign(campaign)
    jobs = plan_campaign(camp) if jobs is None else jobs
    if shard is not None:
        jobs = shard_jobs(jobs, shard)
    runs_dir = Path(runs_dir)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise InputError("--out exists and is not a directory", file=str(runs_dir),
                         fix="pass the runs directory of the sweep")
    from evalkit.runlog.plan import plan_sha256, read_plan

    plan = read_plan(runs_dir) if runs_dir.is_dir() else None
    states = existing_states(camp, jobs, runs_dir,
                             plan_hash=plan_sha256(plan) if plan is not None else None)
    notes = [f"a sweep is running on this directory: {h.describe()}"
             for h in current_holders(runs_dir)]
    return CheckReport([states[j.run_id] for j in jobs], runs_dir, shard, notes)
