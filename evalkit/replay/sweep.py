"""Execute a campaign: build traces, check everything, then run the job plan.

Structure (so other executors can be added): :func:`plan_campaign` gives jobs with
dependencies; :func:`run_campaign` submits every job whose dependencies have finished to an
*executor* — any object with ``submit(fn, *args) -> concurrent.futures.Future`` and
``shutdown()`` (:class:`SerialExecutor`, :class:`PoolExecutor`); a job is executed by
:func:`execute_job`, which reads what it needs (a reference run's K, the no-sync request
intervals) from the runs directory, so it can run in any process that sees that directory.

Resumable: a complete run whose recorded campaign fingerprint matches is skipped; an
incomplete or stale one is redone.  Each run is written atomically by the runner.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.replay.campaign import Campaign, Job, load_campaign, plan_campaign
from evalkit.replay.runner import check_trace, run_one
from evalkit.runlog.io import read_meta, read_table

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

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0 and self.count("blocked") == 0

    def format(self) -> str:
        lines = [f"{len(self.outcomes)} jobs in {self.seconds:.1f} s: {self.count('ran')} ran, "
                 f"{self.count('skipped')} skipped (already complete), "
                 f"{self.count('failed')} failed, {self.count('blocked')} blocked"
                 f" -> {self.runs_dir}"]
        for o in self.outcomes:
            if o.status in ("failed", "blocked"):
                lines.append(f"  {o.status}: {o.run_id}: {o.message.splitlines()[0]}")
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


def build_trace(camp: Campaign, seed: int):
    """The request trace of one seed (generator traces are seeded; file traces are shared)."""
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
    if "start_s" in spec or "end_s" in spec:
        trace = T.slice_window(trace, spec.get("start_s", 0.0),
                               spec.get("end_s", float(trace.arrival_s[-1]) + 1.0))
    if "time_scale" in spec:
        trace = T.time_scale(trace, spec["time_scale"])
    if "name" in spec:
        trace.name = str(spec["name"])
    return trace


# ----------------------------------------------------------------------------- jobs

def job_fingerprint(camp: Campaign, job: Job) -> str:
    pe = job.policy
    payload = [camp.fingerprint(), job.kind, pe.name if pe else None,
               pe.params if pe else None]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _is_done(run_dir: Path, fingerprint: str) -> bool:
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return False
    req = (meta.get("settings") or {}).get("requested") or {}
    return bool(meta.get("complete")) and req.get("campaign_fingerprint") == fingerprint


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


def execute_job(camp: Campaign, job: Job, runs_dir) -> JobOutcome:
    """Run one job unless it is already complete; never raises for a single job's failure."""
    t0 = time.perf_counter()
    runs_dir = Path(runs_dir)
    fp = job_fingerprint(camp, job)
    if _is_done(runs_dir / job.run_id, fp):
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
        extra["campaign"] = str(camp.path) if camp.path else None
        trace = build_trace(camp, job.seed)
        res = run_one(spec, trace, policy, runs_dir, policy_params=params, policy_label=label,
                      extra_requested=extra)
    except InputError as exc:
        return JobOutcome(job.run_id, "failed", exc.format(), time.perf_counter() - t0)
    if not res.complete:
        return JobOutcome(job.run_id, "failed", res.error or "incomplete",
                          time.perf_counter() - t0)
    return JobOutcome(job.run_id, "ran", f"K={res.k_observed}", time.perf_counter() - t0)


# ----------------------------------------------------------------------------- executors

class SerialExecutor:
    """Runs each job in this process when it is submitted."""

    def submit(self, fn, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:        # noqa: BLE001 - surfaced by the scheduler
            fut.set_exception(exc)
        return fut

    def shutdown(self) -> None:
        pass


_WORKER_CAMPAIGN: Campaign | None = None


def _init_worker(camp: Campaign) -> None:
    global _WORKER_CAMPAIGN
    _WORKER_CAMPAIGN = camp


def _worker_job(job: Job, runs_dir: str) -> JobOutcome:
    return execute_job(_WORKER_CAMPAIGN, job, runs_dir)


class PoolExecutor:
    """A local process pool; the campaign is sent once per worker."""

    def __init__(self, camp: Campaign, n_jobs: int):
        import multiprocessing as mp

        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.pool = cf.ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx,
                                           initializer=_init_worker, initargs=(camp,))

    def submit(self, fn, *args) -> cf.Future:
        if fn is execute_job:                 # drop the campaign argument: workers hold it
            return self.pool.submit(_worker_job, args[1], str(args[2]))
        return self.pool.submit(fn, *args)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def make_executor(camp: Campaign, n_jobs: int):
    return SerialExecutor() if n_jobs <= 1 else PoolExecutor(camp, n_jobs)


# ----------------------------------------------------------------------------- campaign

def preflight(camp: Campaign, jobs: list[Job]) -> None:
    """Check every seed's trace against the horizon before anything is written."""
    for seed in sorted({j.seed for j in jobs}):
        trace = build_trace(camp, seed)
        check_trace(trace, camp.spec("preflight", seed), source=str(camp.path or trace.name))


def _clean_temporaries(runs_dir: Path, jobs: list[Job]) -> None:
    ids = {j.run_id for j in jobs}
    for p in runs_dir.glob(".*.tmp-*"):
        if p.name[1:].split(".tmp-")[0] in ids:
            shutil.rmtree(p, ignore_errors=True)


def run_campaign(campaign, runs_dir, *, n_jobs: int = 1, executor=None,
                 progress: bool | None = None, jobs: list[Job] | None = None) -> SweepSummary:
    """Run (or resume) a campaign into ``runs_dir``; returns what ran, was skipped or failed."""
    from tqdm.auto import tqdm

    camp = campaign if isinstance(campaign, Campaign) else load_campaign(campaign)
    jobs = plan_campaign(camp) if jobs is None else jobs
    preflight(camp, jobs)
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    _clean_temporaries(runs_dir, jobs)
    t0 = time.perf_counter()
    ex = executor or make_executor(camp, n_jobs)
    summary = SweepSummary(runs_dir=runs_dir)
    pending = {j.run_id: j for j in jobs}
    finished: set[str] = set()
    running: dict[cf.Future, Job] = {}
    bar = tqdm(total=len(jobs), desc=f"sweep {camp.regime}", unit="run",
               disable=(not sys.stderr.isatty()) if progress is None else not progress)
    try:
        while pending or running:
            ready = [j for j in pending.values()
                     if all(d in finished or d not in pending and d not in
                            {r.run_id for r in running.values()} for d in j.depends_on)]
            for job in ready:
                del pending[job.run_id]
                running[ex.submit(execute_job, camp, job, runs_dir)] = job
            if not running:
                break
            done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                try:
                    outcome = fut.result()
                except Exception as exc:          # a crash outside the job's own handling
                    outcome = JobOutcome(job.run_id, "failed", f"{type(exc).__name__}: {exc}")
                summary.outcomes.append(outcome)
                finished.add(job.run_id)
                bar.update(1)
    finally:
        bar.close()
        ex.shutdown()
    order = {j.run_id: i for i, j in enumerate(jobs)}
    summary.outcomes.sort(key=lambda o: order.get(o.run_id, 0))
    summary.seconds = time.perf_counter() - t0
    return summary
