"""Execute a campaign: build traces, check everything, then run the job plan.

Structure: :func:`plan_campaign` gives jobs with dependencies (optionally one shard of
them, :func:`~evalkit.replay.campaign.shard_jobs`); :func:`run_campaign` submits every job
whose dependencies have finished to an *executor* -- any object with
``submit(fn, *args) -> concurrent.futures.Future`` and ``shutdown()`` (serial, process pool
or Ray: :mod:`evalkit.replay.executors`); a job is executed by
:func:`~evalkit.replay.job.execute_job`, which reads what it needs (a reference run's K, the
no-sync request intervals) from the runs directory, so it can run in any process, on any
machine, that sees that directory.

Resumable: a complete run whose recorded campaign fingerprint matches, and which passes
:func:`~evalkit.runlog.validate.validate_run`, is skipped; an incomplete or stale one is
redone; a damaged one (a truncated table, a broken run.json) is moved aside to
``.<run_id>.damaged-<time>`` -- never deleted -- and redone.  Each run is written
atomically by the runner.  A sweep holds a lock on its runs directory
(:mod:`evalkit.replay.storelock`) and, on start, cleans what a killed sweep left behind
(:mod:`evalkit.replay.store`).  :func:`check_campaign` (``evalkit sweep --check``) lists
what is still missing, checking every existing run the same way; it writes nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import heapq
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from evalkit.errors import InputError, StoreLocked
from evalkit.limits import MAX_PLAN_BYTES
from evalkit.progress import Ticker
from evalkit.replay import run_order
from evalkit.replay.campaign import Campaign, Job, Shard, load_campaign, plan_campaign, shard_jobs
from evalkit.replay.executors import WorkerLost, make_executor
from evalkit.replay.job import JobOutcome, build_trace, execute_job
from evalkit.replay.runner import check_trace, load_backend
from evalkit.replay.store import (RunState, clean_leftovers, execute_job_in_store,
                                  existing_states, move_aside, publish_store_plan, run_state,
                                  store_states)
from evalkit.replay.plan import directory_plan, follow_plan
from evalkit.replay.storelock import LeaseLock, StoreLock, current_holders, lease_holders
from evalkit.runlog.plan import PLAN_FILE, plan_sha256, publish_plan, read_plan
from evalkit.runlog.store_url import PLAN_KEY, is_store_url, local_path, open_store


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


# ----------------------------------------------------------------------------- campaign

def preflight(camp: Campaign, jobs: list[Job]) -> None:
    """Check the backend's settings and every seed's trace against the horizon before
    anything is written."""
    check_config = getattr(load_backend(camp.backend), "check_config", None)
    if check_config is not None:
        try:
            check_config(dict(camp.backend_config))
        except InputError as exc:       # name the campaign file the setting is in
            raise InputError(exc.message, file=exc.file or camp.path, column=exc.column,
                             fix=exc.fix) from None
    for seed in sorted({j.seed for j in jobs}):
        trace = build_trace(camp, seed)
        check_trace(trace, camp.spec("preflight", seed), source=str(camp.path or trace.name))


def run_campaign(campaign, runs_dir, *, n_jobs: int | None = 1, executor=None,
                 progress: bool | None = None, jobs: list[Job] | None = None,
                 shard: Shard | None = None, executor_kind: str = "local",
                 address: str | None = None, cpus_per_task: float | None = None,
                 gpus_per_task: float | None = None, job_fn=None,
                 protocol=None) -> SweepSummary:
    """Run (or resume) a campaign into ``runs_dir``; returns what ran, was skipped or failed.

    ``jobs``: a filtered plan (default: the whole plan); ``shard``: only that part of it
    (:func:`~evalkit.replay.campaign.shard_jobs`).  ``executor``: any object with
    ``submit``/``shutdown``, else one made by :func:`~evalkit.replay.executors.make_executor`
    from ``executor_kind``, ``n_jobs``, ``address`` and the per-task resources.
    ``runs_dir``: a folder, or a run store URL (``s3://BUCKET/PREFIX``,
    :mod:`evalkit.runlog.store_url`).  ``job_fn(camp, job, target)``: what runs one job
    (default :func:`execute_job`, or :func:`execute_job_in_store` for a store URL).
    ``protocol``: the loaded protocol a fresh plan is frozen under
    (:func:`evalkit.audit.protocol.load_protocol`; see
    :func:`~evalkit.replay.plan.directory_plan`); without one, ``runs_dir`` must hold a plan
    already (else an InputError).
    Raises :class:`~evalkit.errors.StoreLocked` when another sweep works on ``runs_dir``.
    """
    camp = campaign if isinstance(campaign, Campaign) else load_campaign(campaign)
    jobs = plan_campaign(camp) if jobs is None else jobs
    if shard is not None:
        jobs = shard_jobs(jobs, shard)
    preflight(camp, jobs)
    t0 = time.perf_counter()
    store = open_store(runs_dir) if is_store_url(runs_dir) else None
    if store is None:
        runs_dir = local_path(runs_dir)
        if runs_dir.exists() and not runs_dir.is_dir():
            raise InputError("--out exists and is not a directory", file=str(runs_dir),
                             fix="pass a runs directory (it is created if missing)")
    summary = SweepSummary(runs_dir=runs_dir if store is None else store.url, shard=shard)
    with contextlib.ExitStack() as stack:
        # an object store is read through a private local copy of its plan and runs
        local = runs_dir if store is None else _local_copy(store, stack)
        plan, fresh = directory_plan(camp, local, protocol)
        camp = dataclasses.replace(follow_plan(camp, plan), plan_sha256=plan_sha256(plan))
        job_fn = job_fn or (execute_job if store is None else execute_job_in_store)
        # the executor first: a missing extra or an unreachable cluster writes nothing
        ex = executor or make_executor(camp, n_jobs, kind=executor_kind, address=address,
                                       cpus_per_task=cpus_per_task,
                                       gpus_per_task=gpus_per_task, worker=job_fn)
        try:
            lock = StoreLock(runs_dir, shard) if store is None else LeaseLock(store, shard)
            with lock:
                summary.notes += lock.notes
                plan_hash = camp.plan_sha256
                ids = [j.run_id for j in jobs]
                if store is None:
                    summary.notes.append(publish_plan(plan, fresh, runs_dir))
                    summary.notes += clean_leftovers(runs_dir, ids)
                    states = existing_states(camp, jobs, runs_dir, plan_hash=plan_hash)
                    target, move = runs_dir, lambda rid: move_aside(runs_dir / rid).name
                else:
                    summary.notes.append(publish_store_plan(store, plan, fresh, local))
                    view = store.snapshot(local, run_ids=set(ids))
                    summary.notes += store.clean_leftovers(ids, view.entries)
                    states = store_states(camp, jobs, view, plan_hash=plan_hash)
                    target = store.url
                    move = lambda rid: store.move_aside(rid, view.entries[rid].manifest)  # noqa: E731
                # no terminal (a CI log): a status line every few seconds instead of a bar
                bar = (Ticker(f"sweep {camp.regime}", len(jobs), "run")
                       if progress is None and not sys.stderr.isatty()
                       else tqdm(total=len(jobs), desc=f"sweep {camp.regime}", unit="run",
                                 disable=progress is False))
                try:
                    _schedule(camp, jobs, local, ex, summary, bar, states, plan_hash,
                              job_fn=job_fn, target=target, move=move,
                              lost=getattr(lock, "lost", None), shard=shard)
                finally:
                    bar.close()
        finally:
            ex.shutdown()
    order = {j.run_id: i for i, j in enumerate(jobs)}
    summary.outcomes.sort(key=lambda o: order.get(o.run_id, 0))
    summary.seconds = time.perf_counter() - t0
    return summary


def _local_copy(store, stack: contextlib.ExitStack) -> Path:
    """A private temporary folder (removed with ``stack``) holding the store's plan."""
    local = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evalkit-store-"))
                 ) / store.name
    local.mkdir()
    raw = store.get_bytes(PLAN_KEY, MAX_PLAN_BYTES)
    if raw is not None:
        (local / PLAN_FILE).write_bytes(raw)
    return local


def _blocked_by(job: Job, dep: str, outcome: JobOutcome) -> JobOutcome:
    what = ("reference run" if dep == job.k_from_run else
            "no-sync run" if dep == job.intervals_from_run else "dependency")
    first = (outcome.message or "").splitlines()[0] if outcome.message else ""
    skip = "; its matched-random draws are skipped" if job.kind == "matched_random" else ""
    return JobOutcome(job.run_id, "blocked",
                      f"{what} {dep} {outcome.status}{': ' + first if first else ''}{skip}")


def _schedule(camp: Campaign, jobs: list[Job], runs_dir: Path, ex, summary: SweepSummary,
              bar, states: dict[str, "RunState"] | None = None,
              plan_hash: str | None = None, *, job_fn=execute_job, target=None,
              move=None, lost=None, shard: Shard | None = None) -> None:
    """Submit each job once its dependencies in ``jobs`` have finished, in the randomised,
    blocked execution order of :mod:`evalkit.replay.run_order` (earliest first, from the
    open blocks only).

    A job whose dependency failed or was blocked is reported blocked without being submitted;
    one already complete with this campaign's fingerprint (and valid) is skipped without being
    submitted; a damaged one is moved aside and redone; an unreadable one fails (fix the
    permissions and resume).  ``states``: :func:`existing_states` (computed here if None).
    Dependencies outside ``jobs`` (another shard, an earlier sweep) are read from disk by
    :func:`execute_job`.  ``job_fn(camp, job, target)`` runs a job (default
    :func:`execute_job` into ``runs_dir``); ``move(run_id)`` moves a damaged run aside and
    names where it went; ``lost``: an event set when the store's lease was taken over
    (:class:`~evalkit.replay.storelock.LeaseLock`): no job is started after it.
    """
    target = runs_dir if target is None else target
    move = move or (lambda rid: move_aside(runs_dir / rid).name)
    jobs, window = run_order.ordered_jobs(camp, jobs, shard)
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
            if lost is not None and lost.is_set():
                raise StoreLocked(
                    "this sweep lost its lease on the run store (it was not renewed in "
                    "time and another sweep took it over); no further run was started",
                    file=str(target),
                    fix="let the other sweep finish, then check with --check and resume; "
                        "runs already published are whole")
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
                    moved = move(job.run_id)
                    summary.notes.append(f"{job.run_id} was damaged ({state.detail}); moved "
                                         f"aside to {moved} and re-run")
                running[ex.submit(job_fn, camp, job, target)] = job
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


def check_campaign(campaign, runs_dir, *, jobs: list[Job] | None = None,
                   shard: Shard | None = None) -> CheckReport:
    """The state of every planned run (missing, incomplete, stale, damaged, unreadable,
    interrupted or complete), validating each existing run; writes nothing."""
    camp = campaign if isinstance(campaign, Campaign) else load_campaign(campaign)
    jobs = plan_campaign(camp) if jobs is None else jobs
    if shard is not None:
        jobs = shard_jobs(jobs, shard)
    if is_store_url(runs_dir):
        store = open_store(runs_dir)
        with contextlib.ExitStack() as stack:
            view = store.snapshot(_local_copy(store, stack), run_ids={j.run_id for j in jobs})
            plan = read_plan(view.root)
            states = store_states(camp, jobs, view,
                                  plan_hash=plan_sha256(plan) if plan is not None else None)
        notes = [f"a sweep holds this run store: {lease.describe()}"
                 for lease in lease_holders(store)]
        return CheckReport([states[j.run_id] for j in jobs], store.url, shard, notes)
    runs_dir = local_path(runs_dir)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise InputError("--out exists and is not a directory", file=str(runs_dir),
                         fix="pass the runs directory of the sweep")
    plan = read_plan(runs_dir) if runs_dir.is_dir() else None
    states = existing_states(camp, jobs, runs_dir,
                             plan_hash=plan_sha256(plan) if plan is not None else None)
    notes = [f"a sweep is running on this directory: {h.describe()}"
             for h in current_holders(runs_dir)]
    return CheckReport([states[j.run_id] for j in jobs], runs_dir, shard, notes)
