"""Executors for :func:`evalkit.replay.sweep.run_campaign`.

An executor is any object with ``submit(fn, *args) -> concurrent.futures.Future`` and
``shutdown()``; the scheduler calls ``submit(execute_job, campaign, job, runs_dir)`` only for
jobs whose dependencies have finished.  An optional ``max_in_flight`` attribute caps how many
jobs the scheduler keeps submitted at once.

- :class:`SerialExecutor`: in this process.
- :class:`PoolExecutor`: a local process pool (the campaign is sent once per worker).
- :class:`RayExecutor`: one Ray task per job with its own CPU/GPU request.  Tasks write run
  directories straight into the runs directory, which must be on storage every Ray node
  sees (NFS, Lustre, ...) under the same path; evalkit must be installed on every node.
"""

from __future__ import annotations

import concurrent.futures as cf
import socket
import sys
from pathlib import Path

from evalkit.errors import InputError

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


def _init_worker(camp) -> None:
    global _WORKER_CAMPAIGN
    _WORKER_CAMPAIGN = camp


def _worker_job(job, runs_dir: str):
    from evalkit.replay.sweep import execute_job

    return execute_job(_WORKER_CAMPAIGN, job, runs_dir)


class PoolExecutor:
    """A local process pool; the campaign is sent once per worker."""

    def __init__(self, camp, n_jobs: int):
        import multiprocessing as mp

        warm_imports(camp)                  # forked workers inherit the loaded modules
        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.pool = cf.ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx,
                                           initializer=_init_worker, initargs=(camp,))
        # a short queue keeps workers busy while jobs still run roughly in plan (seed)
        # order, so each worker's trace cache is hit
        self.max_in_flight = 2 * n_jobs

    def submit(self, fn, *args) -> cf.Future:
        from evalkit.replay.sweep import execute_job

        if fn is execute_job:                 # drop the campaign argument: workers hold it
            return self.pool.submit(_worker_job, args[1], str(args[2]))
        return self.pool.submit(fn, *args)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def warm_imports(camp) -> None:
    """Import the backend and policy modules once, before workers are forked."""
    import importlib

    from evalkit.replay.policies import get_policy
    from evalkit.replay.runner import load_backend

    load_backend(camp.backend)
    for pe in camp.policies:
        get_policy(pe.name, **pe.params)
    try:                                    # planned policies import it lazily in reset()
        importlib.import_module("evalkit.stats")
    except ImportError:
        pass


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


def _ray_job(camp, job, runs_dir: str):
    from evalkit.replay.sweep import execute_job

    return execute_job(camp, job, runs_dir)


class RayExecutor:
    """One Ray task per job, each asking for ``cpus_per_task`` CPUs and ``gpus_per_task`` GPUs.

    Ray schedules tasks onto nodes by those resources; ``max_in_flight`` (``--jobs``) caps
    the tasks submitted at once (None: every job whose dependencies have finished).
    """

    def __init__(self, camp, *, address: str | None = None, cpus_per_task: float = 1.0,
                 gpus_per_task: float = 0.0, max_in_flight: int | None = None):
        if cpus_per_task < 0 or gpus_per_task < 0:
            raise InputError("resources per task must be >= 0", column="--cpus-per-task",
                             fix="e.g. --cpus-per-task 1 --gpus-per-task 1")
        ray = import_ray()
        self._ray, self._refs = ray, []
        self._owns = connect_ray(address)
        self._check_resources(cpus_per_task, gpus_per_task)
        if camp.path is not None:           # trace paths resolve next to it on every node
            import dataclasses

            camp = dataclasses.replace(camp, path=Path(camp.path).resolve())
        self._camp_ref = ray.put(camp)
        self._task = ray.remote(_ray_job).options(num_cpus=cpus_per_task,
                                                  num_gpus=gpus_per_task)
        self.max_in_flight = max_in_flight

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
        from evalkit.replay.sweep import execute_job

        if fn is execute_job:
            ref = self._task.remote(self._camp_ref, args[1], str(Path(args[2]).resolve()))
        else:
            ref = self._ray.remote(fn).remote(*args)
        self._refs.append(ref)
        return ref.future()

    def shutdown(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            for ref in self._refs:          # after an interrupt: stop what is still queued
                try:
                    ray.cancel(ref)
                except Exception:           # noqa: BLE001 - finished or already gone
                    pass
        self._refs = []
        if self._owns and ray.is_initialized():
            ray.shutdown()
        self._owns = False


def make_executor(camp, n_jobs: int | None = 1, *, kind: str = "local", address: str | None = None,
                  cpus_per_task: float | None = None, gpus_per_task: float | None = None):
    """The executor ``evalkit sweep --executor KIND`` uses.

    ``n_jobs``: local worker processes (None: 1), or for Ray the most tasks in flight
    (None: no cap; Ray queues tasks by their resource requests).
    """
    if kind == "ray":
        return RayExecutor(camp, address=address,
                           cpus_per_task=1.0 if cpus_per_task is None else cpus_per_task,
                           gpus_per_task=0.0 if gpus_per_task is None else gpus_per_task,
                           max_in_flight=n_jobs)
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
    return SerialExecutor() if (n_jobs or 1) <= 1 else PoolExecutor(camp, n_jobs)
