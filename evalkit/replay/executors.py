"""Executors for :func:`evalkit.replay.sweep.run_campaign` (they know the job, not the sweep).

An executor is any object with ``submit(fn, *args) -> concurrent.futures.Future`` and
``shutdown()``; the scheduler calls ``submit(execute_job, campaign, job, runs_dir)`` only for
jobs whose dependencies have finished.  The pool and Ray executors are built with the
function that runs a job (``worker``, default :func:`evalkit.replay.job.execute_job`):
``submit(worker, campaign, job, runs_dir)`` sends the job without the campaign, which
each worker holds.  An optional ``max_in_flight`` attribute caps how many
jobs the scheduler keeps submitted at once.

- :class:`SerialExecutor`: in this process.
- :class:`PoolExecutor`: a local process pool (the campaign is sent once per worker).
- :class:`RayExecutor`: one Ray task per job with its own CPU/GPU request.  With a local
  runs directory, tasks write run directories straight into it, so it must be on storage
  every Ray node sees (NFS, Lustre, ...) under the same path.  With an object-store URL
  (``s3://...``) a task writes its run in a private staging folder of its own node and
  publishes it to the store (:func:`evalkit.replay.store.execute_job_in_store`): the nodes
  share no folder.  evalkit must be installed on every node.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import importlib
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from evalkit.errors import InputError
from evalkit.replay.job import execute_job
from evalkit.policies import get_policy
from evalkit.replay.runner import load_backend
from evalkit.runlog.store_url import is_store_url

RAY_EXTRA = "pip install 'evalkit[ray]'"


class SerialExecutor:
    """Runs each job in this process when it is submitted."""

    max_in_flight = 1           # one at a time, so the scheduler keeps the execution order

    def submit(self, fn, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:        # noqa: BLE001 - surfaced by the scheduler
            fut.set_exception(exc)
        return fut

    def shutdown(self) -> None:
        pass


_WORKER_CAMPAIGN = None
_WORKER_FN = None
_WORKER_STATUS: str | None = None
PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


class WorkerLost(InputError):
    """A pool worker died under a job (the OOM killer, ``kill -9``): an environment
    failure, not a bug -- the run it was writing was never published; resume reruns it."""


def _die_with_parent(parent_pid: int, pdeathsig: bool) -> None:
    """End this worker as soon as the sweep that forked it is gone (SIGKILL, SIGTERM, OOM).

    Linux: the kernel sends SIGKILL on the parent's death (``PR_SET_PDEATHSIG``; only when
    the parent's main thread forked us -- the signal follows the forking thread).
    Everywhere: a daemon thread polls ``getppid()`` and kills this process when the parent
    has changed (re-parented to init or a subreaper).
    """
    if pdeathsig and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:          # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)

    def watch():
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="evalkit-parent-watch", daemon=True).start()


def _init_worker(camp, worker, parent_pid: int | None = None, status_dir: str | None = None,
                 pdeathsig: bool = False) -> None:
    global _WORKER_CAMPAIGN, _WORKER_FN, _WORKER_STATUS
    _WORKER_CAMPAIGN, _WORKER_FN = camp, worker
    _WORKER_STATUS = status_dir
    if parent_pid is not None:
        _die_with_parent(parent_pid, pdeathsig)


def _note_running(run_id: str) -> None:
    """Record which run this worker is on, for the message when it dies under it."""
    if _WORKER_STATUS is None:
        return
    with contextlib.suppress(OSError):
        Path(_WORKER_STATUS, str(os.getpid())).write_text(run_id)


def _worker_job(job, runs_dir: str):
    _note_running(job.run_id)
    try:
        return _WORKER_FN(_WORKER_CAMPAIGN, job, runs_dir)
    finally:
        _note_running("")


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"was killed by signal {-code}"


class PoolExecutor:
    """A local process pool; the campaign is sent once per worker.

    ``worker(camp, job, runs_dir)`` runs a job (default :func:`execute_job`); a ``submit`` of
    it sends only the job.  Workers die with the sweep (:func:`_die_with_parent`).  A worker
    that dies under a job breaks the pool: every job still in it fails with
    :class:`WorkerLost` naming the run the dead worker was on, and so does any later
    ``submit``.
    """

    def __init__(self, camp, n_jobs: int, *, worker=execute_job):
        self.worker = worker
        warm_imports(camp)                  # forked workers inherit the loaded modules
        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self._status = tempfile.mkdtemp(prefix="evalkit-workers-")
        # workers are forked by the first submit, from the thread that made this executor
        pdeathsig = threading.current_thread() is threading.main_thread()
        self.pool = cf.ProcessPoolExecutor(
            max_workers=n_jobs, mp_context=ctx, initializer=_init_worker,
            initargs=(camp, worker, os.getpid(), self._status, pdeathsig))
        self._procs: dict = {}
        self._lost: WorkerLost | None = None
        # a short queue keeps workers busy while jobs still run roughly in plan (seed)
        # order, so each worker's trace cache is hit
        self.max_in_flight = 2 * n_jobs

    def submit(self, fn, *args) -> cf.Future:
        if self._lost is not None:
            raise self._lost
        run_id = args[1].run_id if fn is self.worker else None
        try:
            if fn is self.worker:             # drop the campaign argument: workers hold it
                inner = self.pool.submit(_worker_job, args[1], str(args[2]))
            else:
                inner = self.pool.submit(fn, *args)
        except cf.process.BrokenProcessPool:
            raise self._worker_lost() from None
        self._procs.update(getattr(self.pool, "_processes", None) or {})
        outer: cf.Future = cf.Future()

        def relay(done: cf.Future) -> None:   # in the pool's manager thread
            if done.cancelled():              # shutdown(cancel_futures=True)
                outer.cancel()
                return
            exc = done.exception()
            if isinstance(exc, cf.process.BrokenProcessPool):
                # now, before the pool terminates the surviving workers: only the dead one
                # has an exit code yet
                outer.set_exception(self._worker_lost(run_id))
            elif exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(done.result())

        inner.add_done_callback(relay)
        return outer

    def _worker_lost(self, run_id: str | None = None) -> WorkerLost:
        if self._lost is not None:
            return self._lost
        dead = []
        # the pool saw the worker's pipe close; it may not be reapable for a moment yet
        deadline = time.monotonic() + 2.0
        while not dead and time.monotonic() < deadline:
            for pid, proc in list(self._procs.items()):
                code = proc.exitcode
                if code is not None:
                    try:
                        on = Path(self._status, str(pid)).read_text()
                    except OSError:
                        on = None
                    dead.append((pid, code, on))
            if not dead:
                time.sleep(0.01)
        if dead:
            pid, code, on = dead[0]
            what = f"worker process {pid} {_signal_name(code)}"
            where = f" while running {on}" if on else ""
        else:
            what = "a worker process died"
            where = f" (run {run_id} was in the pool)" if run_id else ""
        hint = " (the out-of-memory killer, or kill -9)" if dead and dead[0][1] == -9 else ""
        self._lost = WorkerLost(
            f"{what}{hint}{where}; that run was not written and the sweep stopped",
            column="--jobs",
            fix="resume with the same command (finished runs are kept, the rest is rerun); "
                "if memory ran out, use fewer --jobs")
        return self._lost

    def shutdown(self) -> None:
        try:
            self.pool.shutdown(wait=True, cancel_futures=True)
        finally:
            shutil.rmtree(self._status, ignore_errors=True)


def warm_imports(camp) -> None:
    """Import the backend and policy modules once, before workers are forked."""
    load_backend(camp.backend)
    for pe in camp.policies:
        get_policy(pe.name, **pe.params)
    with contextlib.suppress(ImportError):  # planned policies import it lazily in reset()
        importlib.import_module("evalkit.stats")


# ----------------------------------------------------------------------------- Ray

def import_ray():
    try:
        import ray
    except ImportError as exc:
        raise InputError(f"--executor ray needs Ray, which is not installed ({exc})",
                         column="--executor", fix=f"{RAY_EXTRA}, or use --executor local"
                         ) from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of a Ray address (``ray://host:port`` too); None for ``auto``/local."""
    a = address.strip()
    if a in ("auto", "local", ""):
        return None
    default = 10001 if a.startswith("ray://") else 6379
    a = a.split("://", 1)[-1].rstrip("/")
    host, _, port = a.rpartition(":")
    if not host:
        return a, default
    if not port.isdigit():
        raise InputError(f"malformed Ray address {address!r}", column="--address",
                         fix="write --address HOST:PORT (e.g. 10.0.0.5:6379) or ray://HOST:10001")
    return host.strip("[]"), int(port)


def connect_ray(address: str | None, *, timeout_s: float = 5.0) -> bool:
    """Connect to the Ray cluster at ``address`` (None: start a local instance).

    Returns True when this call started (or connected) Ray and so should shut it down.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    fix = ("start the cluster (`ray start --head` on the head node), check HOST:PORT "
           "(the GCS port, 6379 by default; ray:// client addresses use 10001), or leave "
           "--address out to start a local Ray instance")
    if address is not None:
        hp = _host_port(address)
        if hp is not None:                  # fail fast instead of Ray's long retry loop
            try:
                socket.create_connection(hp, timeout=timeout_s).close()
            except OSError as exc:
                raise InputError(f"cannot reach the Ray cluster at {address!r} ({exc})",
                                 column="--address", fix=fix) from None
    try:
        if address is None:
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        raise InputError(f"cannot connect to Ray at {address or 'a new local instance'!r}: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                         column="--address", fix=fix) from None
    return True


class RayExecutor:
    """One Ray task per job, each asking for ``cpus_per_task`` CPUs and ``gpus_per_task`` GPUs.

    Ray schedules tasks onto nodes by those resources; ``max_in_flight`` (``--jobs``) caps
    the tasks submitted at once (None: every job whose dependencies have finished).
    ``worker(camp, job, runs_dir)`` runs a job (default :func:`execute_job`); the campaign
    is put into Ray's object store once.  ``max_retries``: how often Ray reruns a task whose
    worker process died (None: Ray's default; 0: the job fails and a resume reruns it).
    """

    def __init__(self, camp, *, address: str | None = None, cpus_per_task: float = 1.0,
                 gpus_per_task: float = 0.0, max_in_flight: int | None = None,
                 worker=execute_job, max_retries: int | None = None):
        if cpus_per_task < 0 or gpus_per_task < 0:
            raise InputError("resources per task must be >= 0", column="--cpus-per-task",
                             fix="e.g. --cpus-per-task 1 --gpus-per-task 1")
        ray = import_ray()
        self._ray, self._refs = ray, []
        self._owns = connect_ray(address)
        self._check_resources(cpus_per_task, gpus_per_task)
        self._put_campaign(camp)
        self.worker = worker
        retries = {} if max_retries is None else {"max_retries": max_retries}
        self._task = ray.remote(worker).options(num_cpus=cpus_per_task,
                                                  num_gpus=gpus_per_task, **retries)
        self.max_in_flight = max_in_flight

    def _put_campaign(self, camp) -> None:
        self._camp = camp
        if camp.path is not None:           # trace paths resolve next to it on every node
            camp = dataclasses.replace(camp, path=Path(camp.path).resolve())
        self._camp_ref = self._ray.put(camp)

    def _check_resources(self, cpus: float, gpus: float) -> None:
        total = self._ray.cluster_resources()
        for name, want in (("CPU", cpus), ("GPU", gpus)):
            have = float(total.get(name, 0.0))
            if want > have:
                self.shutdown()
                raise InputError(f"each task asks for {want:g} {name}s but the Ray cluster "
                                 f"has {have:g}", column=f"--{name.lower()}s-per-task",
                                 fix=f"lower --{name.lower()}s-per-task or add nodes with "
                                     f"{name}s")

    def submit(self, fn, *args) -> cf.Future:
        if fn is self.worker:
            if args[0] is not self._camp:   # e.g. stamped with the plan's hash by the sweep
                self._put_campaign(args[0])
            target = args[2] if is_store_url(args[2]) else str(Path(args[2]).resolve())
            ref = self._task.remote(self._camp_ref, args[1], target)
        else:
            ref = self._ray.remote(fn).remote(*args)
        self._refs.append(ref)
        return ref.future()

    def shutdown(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            for ref in self._refs:          # after an interrupt: stop what is still queued
                with contextlib.suppress(Exception):  # noqa: BLE001 - finished or already gone
                    ray.cancel(ref)
        self._refs = []
        if self._owns and ray.is_initialized():
            ray.shutdown()
        self._owns = False


def make_executor(camp, n_jobs: int | None = 1, *, kind: str = "local", address: str | None = None,
                  cpus_per_task: float | None = None, gpus_per_task: float | None = None,
                  worker=execute_job):
    """The executor ``evalkit sweep --executor KIND`` uses.

    ``n_jobs``: local worker processes (None: 1), or for Ray the most tasks in flight
    (None: no cap; Ray queues tasks by their resource requests).  ``worker``: the function
    that runs a job (:class:`PoolExecutor`).
    """
    if kind == "ray":
        return RayExecutor(camp, address=address,
                           cpus_per_task=1.0 if cpus_per_task is None else cpus_per_task,
                           gpus_per_task=0.0 if gpus_per_task is None else gpus_per_task,
                           max_in_flight=n_jobs, worker=worker)
    if kind != "local":
        raise InputError(f"unknown executor {kind!r}", column="--executor",
                         fix="use --executor local or --executor ray")
    for opt, val in (("--address", address), ("--cpus-per-task", cpus_per_task),
                     ("--gpus-per-task", gpus_per_task)):
        if val is not None:
            raise InputError(f"{opt} applies to --executor ray only", column=opt,
                             fix=f"add --executor ray or drop {opt}")
    if n_jobs is not None and n_jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {n_jobs}", column="--jobs",
                         fix="e.g. --jobs 2")
    return SerialExecutor() if (n_jobs or 1) <= 1 else PoolExecutor(camp, n_jobs, worker=worker)
