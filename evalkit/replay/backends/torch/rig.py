"""The persistent rig: serving engine + learner processes, reused by consecutive runs.

Starting a rig costs 20-50 s (torch/transformers imports, model construction, NCCL/gloo
set-up, engine warm-up); a run on a warm rig pays a reset of about a second instead.
Consecutive runs in one process whose *rig-defining* backend settings are equal (model
shapes, n_learners, devices, dtypes, threads, engine settings: everything not in
:data:`PER_RUN_KEYS`) reuse the running processes.  Between runs the learners
re-initialise parameters, AdamW and outer-momentum state and their data stream from the
run's seed (see ``trainer.Learner.reset``) and the sidecar drains its queue and zeroes its
counters (``POST /admin/reset``), so a run's results do not depend on what ran before.

The rig is closed (every process group killed) on any failed run, when the settings
change, by :func:`close_rig`, and at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Listener

from evalkit.errors import InputError
from evalkit.replay.backends.procs import Managed, free_port
from evalkit.replay.backends.torch.health import check_model, say, wait_healthy

# backend_config keys that may differ between runs on one rig
PER_RUN_KEYS = frozenset({
    "batch", "seq_len", "inner_lr", "outer_lr", "outer_momentum", "warmup_steps",
    "merge_min_s", "checkpoint_dir", "digest", "max_prompt_tokens", "scrape_interval_s",
    "pressure_capacity", "request_timeout_s", "startup_timeout_s", "stop_timeout_s",
    "capacity_check", "capacity_margin", "max_send_lag_p99_s", "send_lag_fail_s",
    "store_token_times", "fault", "reuse_rig", "trainer_model_effective",
    "merge_load", "merge_threads", "merge_bytes", "step_period_s", "clock_slack_s",
    "max_missed_share", "max_load_1m", "load_wait_s"})
RUN_KEYS_FOR_LEARNERS = ("batch", "seq_len", "inner_lr", "outer_lr", "outer_momentum",
                         "warmup_steps", "merge_min_s", "checkpoint_dir", "digest",
                         "merge_load", "merge_threads", "merge_bytes", "step_period_s",
                         "clock_slack_s")


def rig_key(cfg: dict, backend: str) -> str:
    keep = {k: v for k, v in cfg.items() if k not in PER_RUN_KEYS and not k.startswith("_")}
    keep["_trainer_model"], keep["_server_model"] = cfg["_trainer_model"], cfg["_server_model"]
    keep["_backend"] = backend
    return json.dumps(keep, sort_keys=True, default=str)


class LearnerGroup:
    """N persistent learner processes, each with its own connection to this process."""

    def __init__(self, cfg: dict, log_dir: str):
        self.world = int(cfg["n_learners"])
        self.key = secrets.token_bytes(16)
        self.listener = Listener(("127.0.0.1", 0), authkey=self.key)
        self.conns: dict[int, object] = {}
        self.procs: list[Managed] = []
        self.hello: dict = {}
        path = os.path.join(log_dir, "learners.json")
        with open(path, "w") as f:
            json.dump({"model": cfg["_trainer_model"], "device": cfg["trainer_device"],
                       "dtype": cfg["trainer_dtype"], "dist_backend": cfg["dist_backend"],
                       "dist_timeout_s": cfg["dist_timeout_s"],
                       "threads": cfg["trainer_threads"]}, f)
        master = free_port()
        for rank in range(self.world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(self.world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master),
                       EVALKIT_COORD_PORT=str(self.listener.address[1]),
                       EVALKIT_COORD_KEY=self.key.hex(), PYTHONUNBUFFERED="1",
                       OMP_NUM_THREADS=str(cfg["trainer_threads"]))
            self.procs.append(Managed(f"learner:{rank}", [
                sys.executable, "-m", "evalkit.replay.backends.torch.trainer", path],
                env=env, log_path=os.path.join(log_dir, f"learner{rank}.log")))

    def dead(self) -> Managed | None:
        return next((p for p in self.procs if p.poll() is not None), None)

    def _check_alive(self, when: str) -> None:
        p = self.dead()
        if p is not None:
            raise InputError(f"trainer {p.name} exited with code {p.poll()} {when}: "
                             f"{p.log_tail()}", column="backend_config.trainer_model",
                             fix="see the learner log; check the model and device")

    def connect(self, timeout_s: float) -> None:
        """Accept one connection per rank (each sends ``hello`` once its model is built)."""
        box: dict = {"conns": []}

        def accept():
            try:
                for _ in range(self.world):
                    conn = self.listener.accept()
                    box["conns"].append((conn, conn.recv()))
            except Exception as exc:   # listener closed
                box["err"] = exc
        th = threading.Thread(target=accept, daemon=True)
        th.start()
        deadline = time.monotonic() + timeout_s
        while th.is_alive() and time.monotonic() < deadline:
            self._check_alive("during start-up")
            th.join(0.2)
        if th.is_alive() or len(box["conns"]) < self.world:
            raise InputError(f"trainer not ready after {timeout_s:g} s",
                             column="backend_config.startup_timeout_s",
                             fix="raise startup_timeout_s or use a smaller trainer_model")
        for conn, msg in box["conns"]:
            self.conns[int(msg["rank"])] = conn
            self.hello[int(msg["rank"])] = msg

    def recv(self, rank: int, timeout_s: float, what: str) -> dict:
        conn = self.conns[rank]
        deadline = time.monotonic() + timeout_s
        while not conn.poll(0.1):
            self._check_alive(what)
            if time.monotonic() > deadline:
                raise RuntimeError(f"learner:{rank} sent nothing for {timeout_s:g} s ({what})")
        return conn.recv()

    def begin_run(self, run_cfg: dict, timeout_s: float) -> dict:
        """Reset every learner for a run; rank 0's ``ready`` plus every rank's digests."""
        for rank in range(self.world):
            self.conns[rank].send({"type": "run", **run_cfg})
        ready = [self.recv(r, timeout_s, "while resetting for a run")
                 for r in range(self.world)]
        out = dict(ready[0])
        out["init_digests"] = ready[0]["init_digests"]
        return out

    def go(self, t0: float) -> None:
        for rank in range(self.world):
            self.conns[rank].send({"type": "go", "t0": t0})

    def finish(self, timeout_s: float) -> None:
        """After rank 0 said ``done``: the other ranks' ``done`` (they are idle again)."""
        for rank in range(1, self.world):
            msg = self.recv(rank, timeout_s, "while stopping")
            if msg.get("type") != "done":
                raise RuntimeError(f"learner:{rank} sent {msg.get('type')!r} instead of done")

    def close(self) -> None:
        for conn in self.conns.values():
            with contextlib.suppress(Exception):
                conn.send({"type": "exit"})
        for p in self.procs:
            p.stop(grace_s=1.0)
        with contextlib.suppress(OSError):
            self.listener.close()
        for conn in self.conns.values():
            with contextlib.suppress(OSError):
                conn.close()


class Rig:
    """A serving engine and a learner group that outlive single runs."""

    def __init__(self, key: str, cfg: dict, start_server, progress=None):
        self.key = key
        self.runs = 0
        self.probes: dict = {}
        self.server = None
        self.learners: LearnerGroup | None = None
        self.closed = False
        self._tmp = None
        t = time.monotonic()
        log_dir = cfg["log_dir"]
        if log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="evalkit-rig-")
            log_dir = self._tmp.name
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = log_dir
        try:
            self.server = start_server(cfg, log_dir)
            # learners import and build their models while the engine starts
            say(progress, f"starting {cfg['n_learners']} learners")
            self.learners = LearnerGroup(cfg, log_dir)
            say(progress, f"waiting for {self.server.kind} at {self.server.base_url}")
            asyncio.run(wait_healthy(self.server, float(cfg["startup_timeout_s"])))
            asyncio.run(check_model(self.server))
            self.learners.connect(float(cfg["startup_timeout_s"]))
        except BaseException:
            self.close()
            raise
        self.startup_s = time.monotonic() - t

    def alive(self) -> bool:
        if self.closed or self.learners is None or self.learners.dead() is not None:
            return False
        return self.server.proc is None or self.server.proc.poll() is None

    def pids(self) -> dict:
        return {"server": self.server.proc.pid if self.server.proc else None,
                "learners": [p.pid for p in self.learners.procs]}

    async def reset_server(self) -> None:
        """Sidecar: drain the queue and zero the counters.  Other engines: nothing."""
        if self.server.kind != "sidecar":
            return
        import aiohttp
        async with aiohttp.ClientSession() as s:
            async with s.post(self.server.base_url + "/admin/reset",
                              headers={"Authorization": f"Bearer {self.server.admin_key}"},
                              timeout=aiohttp.ClientTimeout(total=30)) as r:
                body = await r.text()
                if r.status != 200:
                    raise RuntimeError(f"sidecar reset failed: HTTP {r.status}: {body[:200]}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.learners is not None:
            self.learners.close()
        if self.server is not None and self.server.proc is not None:
            self.server.proc.stop(grace_s=3.0)
        if self._tmp is not None:
            self._tmp.cleanup()


_RIG: Rig | None = None
_LOCK = threading.Lock()


def acquire(cfg: dict, start_server, backend: str, progress=None) -> tuple[Rig, bool]:
    """The warm rig when it matches ``cfg`` and is alive, else a fresh one (old one closed).

    Returns ``(rig, warm)``.
    """
    global _RIG
    key = rig_key(cfg, backend)
    with _LOCK:
        if _RIG is not None and (_RIG.key != key or not _RIG.alive()):
            _RIG.close()
            _RIG = None
        if _RIG is not None:
            return _RIG, True
        _RIG = Rig(key, cfg, start_server, progress)
        return _RIG, False


def current_rig() -> Rig | None:
    return _RIG


def close_rig() -> None:
    """Stop the warm rig's processes (no-op when none is running)."""
    global _RIG
    with _LOCK:
        if _RIG is not None:
            _RIG.close()
            _RIG = None


atexit.register(close_rig)
