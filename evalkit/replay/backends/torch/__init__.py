"""The real torch backend: DiLoCo learners + a torch serving sidecar + an open-loop client.

This folder is the training wing (the learners, the rig that keeps them warm, the
coordinator and the replay client that also drives vLLM); the sidecar it starts is
:mod:`evalkit.replay.backends.sidecar`, launched as a child process and never imported
(see that package's docstring for what the two share).

``replay(spec, trace, policy, *, progress=None) -> RunOutput``.  Consecutive runs in one
process reuse a warm rig (sidecar + learners) when their rig-defining settings match;
``rig.close_rig()`` stops it (also done at exit and after any failed run).  Knobs come from
``spec.backend_config`` (see :mod:`evalkit.replay.backends.torch.config`); requested and
effective values end up in ``RunOutput.effective``.
"""

from __future__ import annotations

import json
import os
import secrets
import sys

from evalkit.errors import InputError
from evalkit.replay.backends.models import resolve_config
from evalkit.replay.backends.procs import SIDECAR_ADMIN_KEY_ENV, Managed, free_port, port_in_use
from evalkit.replay.spec import RunOutput

from .config import resolve
from .coordinator import recorded_probe, run_replay
from .health import Server

__all__ = ["replay", "prepare", "start_sidecar", "check_config", "recorded_probe"]


def check_config(config: dict) -> None:
    """The campaign's ``[backend.config]``, checked before any run (InputError when bad)."""
    resolve(dict(config), backend="torch")


def prepare(spec, backend: str) -> dict:
    cfg = resolve(dict(spec.backend_config), backend=backend)
    cfg["_trainer_model"] = resolve_config(cfg["trainer_model"])
    cfg["_server_model"] = resolve_config(cfg["server_model"])
    cfg["trainer_model_effective"] = dict(cfg["_trainer_model"])
    return cfg


def start_sidecar(cfg: dict, log_dir: str) -> Server:
    port = cfg["sidecar_port"]
    if port is None:
        port = free_port()
    elif port_in_use(int(port)):
        raise InputError(f"port {port} on 127.0.0.1 is in use", column="backend_config.sidecar_port",
                         fix="free the port or leave sidecar_port unset to pick a free one")
    scfg = {"model": cfg["_server_model"], "device": cfg["server_device"],
            "dtype": cfg["server_dtype"], "threads": cfg["server_threads"],
            "max_batch": cfg["max_batch"], "model_name": cfg["model_name"], "seed": 12345}
    path = os.path.join(log_dir, "sidecar.json")
    with open(path, "w") as f:
        json.dump(scfg, f)
    admin_key = secrets.token_hex(16)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(cfg["server_threads"]),
               **{SIDECAR_ADMIN_KEY_ENV: admin_key})
    proc = Managed("sidecar", [sys.executable, "-m", "evalkit.replay.backends.sidecar.serve",
                               "--port", str(port), "--config", path],
                   env=env, log_path=os.path.join(log_dir, "sidecar.log"))
    return Server(f"http://127.0.0.1:{port}", cfg["model_name"], "sidecar", proc,
                  {"sidecar_port": int(port), "server_model_effective": cfg["_server_model"]},
                  admin_key=admin_key)


def replay(spec, trace, policy, *, progress=None) -> RunOutput:
    cfg = prepare(spec, "torch")
    return run_replay(spec, trace, policy, cfg=cfg, start_server=start_sidecar,
                      backend="torch", progress=progress)
