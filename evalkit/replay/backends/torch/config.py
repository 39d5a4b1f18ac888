"""backend_config keys of the torch/vllm backends: defaults, validation, effective values."""

from __future__ import annotations

import math

from evalkit.errors import InputError

MERGE_LOADS = ("allreduce", "memory")

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
    "merge_min_s": None,             # pad each merge to this length (see merge_load)
    "merge_load": "allreduce",       # padding: "allreduce" (more all-reduces) | "memory"
    "merge_threads": None,           # memory padding: torch threads per learner (default 2)
    "merge_bytes": None,             # memory padding: bytes updated per pass (default 64 MiB)
    "step_period_s": None,           # paced trainer: inner steps start on this clock
    "clock_slack_s": None,           # a step later than this after its tick missed it
    "max_missed_share": None,        # above: the run fails (default 0.02 when paced)
    "max_load_1m": None,             # host load gate at a run's start
    "load_wait_s": None,             # wait this long for the load to fall (default 60)
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
    _resolve_pacing(cfg)
    _resolve_merge_load(cfg)
    _resolve_load_gate(cfg)
    return cfg


def _number(cfg: dict, key: str, ok, what: str) -> float:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not ok(float(value)):
        raise InputError(f"{key} = {value!r} is not {what}",
                         column=f"backend.config.{key}", fix=f"set {key} to {what}")
    return float(value)


def _whole(cfg: dict, key: str, minimum: int, fix: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{key} = {value!r} is not an integer >= {minimum}",
                         column=f"backend.config.{key}", fix=fix)
    return value


def _needs(cfg: dict, keys: tuple[str, ...], parent: str, why: str) -> None:
    for key in keys:
        if cfg[key] is not None:
            raise InputError(f"{key} is set but {why}",
                             column=f"backend.config.{key}",
                             fix=f"set {parent} too, or remove {key}")


def _resolve_pacing(cfg: dict) -> None:
    """``step_period_s`` paces the inner steps; slack and missed share only mean something then."""
    if cfg["step_period_s"] is None:
        _needs(cfg, ("clock_slack_s", "max_missed_share"), "step_period_s",
               "step_period_s is not (the trainer is not paced)")
        return
    period = _number(cfg, "step_period_s", lambda v: v > 0, "a number of seconds > 0")
    if cfg["clock_slack_s"] is None:
        cfg["clock_slack_s"] = 0.25 * period
    _number(cfg, "clock_slack_s", lambda v: 0 <= v < period,
            f"a number of seconds in [0, step_period_s = {period:g})")
    if cfg["max_missed_share"] is None:
        cfg["max_missed_share"] = 0.02
    _number(cfg, "max_missed_share", lambda v: 0 <= v <= 1, "a share in [0, 1]")


def _resolve_merge_load(cfg: dict) -> None:
    """``merge_load = "memory"`` fills the merge window with outer-optimizer passes."""
    load = cfg["merge_load"]
    if load not in MERGE_LOADS:
        raise InputError(f"merge_load = {load!r} is not one of {MERGE_LOADS}",
                         column="backend.config.merge_load",
                         fix='use "allreduce" (more all-reduces) or "memory" (contending)')
    if load != "memory":
        _needs(cfg, ("merge_threads", "merge_bytes"), 'merge_load = "memory"',
               f'merge_load is {load!r} (only the "memory" padding uses it)')
        return
    if not cfg["merge_min_s"]:
        raise InputError('merge_load = "memory" pads each merge to '
                         "merge_min_s, which is not set: the merge would not contend",
                         column="backend.config.merge_min_s",
                         fix="set merge_min_s (seconds > 0), e.g. the campaign's "
                             "merge_duration_s")
    _number(cfg, "merge_min_s", lambda v: v > 0, "a number of seconds > 0")
    if cfg["merge_threads"] is None:
        cfg["merge_threads"] = 2
    _whole(cfg, "merge_threads", 1,
           fix="set merge_threads to 1 or more torch threads per learner")
    if cfg["merge_bytes"] is None:
        cfg["merge_bytes"] = 64 * 2**20
    _whole(cfg, "merge_bytes", 3 * 4096,
           fix="set merge_bytes to the bytes one contending pass updates, "
               "e.g. 67108864 (64 MiB)")


def _resolve_load_gate(cfg: dict) -> None:
    """``max_load_1m`` refuses to start a run on a busy host (after ``load_wait_s``)."""
    if cfg["max_load_1m"] is None:
        _needs(cfg, ("load_wait_s",), "max_load_1m", "max_load_1m is not (no load gate)")
        return
    _number(cfg, "max_load_1m", lambda v: v > 0, "a 1-minute load average > 0")
    if cfg["load_wait_s"] is None:
        cfg["load_wait_s"] = 60.0
    _number(cfg, "load_wait_s", lambda v: v >= 0, "a number of seconds >= 0")
