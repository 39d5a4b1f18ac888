"""backend_config keys of the torch/vllm backends: defaults, validation, effective values."""

from __future__ import annotations

from evalkit.errors import InputError

DEFAULTS = {
    "device": "cpu",                 # "cpu" | "cuda" (trainer and sidecar)
    "n_learners": 2,
    "trainer_model": "tiny",         # preset name or {"preset": ..., overrides}
    "server_model": "tiny",
    "trainer_device": None,          # default: device
    "server_device": None,
    "trainer_dtype": None,           # default: float32 on cpu, bfloat16 on cuda
    "server_dtype": None,
    "trainer_threads": 1,
    "server_threads": 1,
    "batch": 4,
    "seq_len": 64,
    "inner_lr": 1e-3,
    "outer_lr": 0.7,
    "outer_momentum": 0.9,
    "dist_backend": "auto",          # gloo | nccl | auto (nccl only with a GPU per learner)
    "dist_timeout_s": 60.0,
    "warmup_steps": 3,
    "merge_min_s": None,             # pad each merge with extra real all-reduces to this length
    "checkpoint_dir": None,
    "digest": "auto",                # sha1 | sum | none (parameter fingerprints at merges)
    "max_batch": 16,                 # sidecar: concurrent requests decoded together
    "sidecar_port": None,            # default: a free port on 127.0.0.1
    "model_name": "evalkit-sidecar",
    "max_prompt_tokens": None,       # default: 256 on cpu, 2048 on cuda
    "scrape_interval_s": 0.25,
    "pressure_capacity": None,       # requests that mean pressure 1.0; default max_batch
    "request_timeout_s": 60.0,
    "startup_timeout_s": 180.0,
    "stop_timeout_s": 60.0,
    "capacity_check": True,          # refuse traces beyond the measured capacity
    "capacity_margin": 1.0,          # offered token rate must be <= margin * capacity
    "max_send_lag_p99_s": 0.05,      # above: the client could not keep up (flagged)
    "send_lag_fail_s": 1.0,          # above: the run is marked incomplete
    "store_token_times": True,
    "fault": None,                   # {"target": "sidecar"|"learner:<rank>", "at_s": float}
    "log_dir": None,                 # child-process logs; default: a temporary directory
    "reuse_rig": True,               # keep sidecar + learners warm for the next run
    # vllm backend only
    "endpoint": None,
    "model": None,
    "serve_vllm": None,
    "vllm_args": [],
}


def resolve(requested: dict, *, backend: str) -> dict:
    unknown = sorted(set(requested) - set(DEFAULTS))
    if unknown:
        raise InputError(f"unknown {backend} backend_config keys {unknown}",
                         column=f"backend_config.{unknown[0]}",
                         fix=f"use only {sorted(DEFAULTS)}")
    cfg = dict(DEFAULTS)
    cfg.update(requested)
    cuda = str(cfg["device"]).startswith("cuda")
    cfg["trainer_device"] = cfg["trainer_device"] or cfg["device"]
    cfg["server_device"] = cfg["server_device"] or cfg["device"]
    for role in ("trainer", "server"):
        dev = str(cfg[f"{role}_device"])
        if dev.startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                raise InputError(f"{role}_device {dev!r} but torch sees no CUDA device",
                                 column=f"backend_config.{role}_device",
                                 fix="set device = 'cpu' or run on a GPU machine")
        cfg[f"{role}_dtype"] = cfg[f"{role}_dtype"] or (
            "bfloat16" if dev.startswith("cuda") else "float32")
    if cfg["dist_backend"] == "auto":
        cfg["dist_backend"] = "gloo"
        if str(cfg["trainer_device"]).startswith("cuda"):
            import torch
            if torch.cuda.device_count() >= int(cfg["n_learners"]):
                cfg["dist_backend"] = "nccl"
    if cfg["digest"] == "auto":
        cfg["digest"] = "sum" if str(cfg["trainer_device"]).startswith("cuda") else "sha1"
    if cfg["max_prompt_tokens"] is None:
        cfg["max_prompt_tokens"] = 2048 if cuda else 256
    if cfg["pressure_capacity"] is None:
        cfg["pressure_capacity"] = cfg["max_batch"]
    if int(cfg["n_learners"]) < 1:
        raise InputError("n_learners must be >= 1", column="backend_config.n_learners",
                         fix="use 1 or more learners")
    fault = cfg["fault"]
    if fault is not None:
        target = str(fault.get("target", ""))
        if not (target == "sidecar" or target.startswith("learner:")) or "at_s" not in fault:
            raise InputError(f"bad fault {fault!r}", column="backend_config.fault",
                             fix="use {target = 'sidecar' | 'learner:<rank>', at_s = seconds}")
    return cfg
