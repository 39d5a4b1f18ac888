"""Settings of a standalone or runner-started sidecar: defaults, validation, effective values.

The same resolver serves ``evalkit serve`` (flags + an optional TOML/JSON file) and the torch
backend's sidecar process (a JSON file the runner writes), so both reject the same mistakes:
an unknown key, an unknown preset or model field, a device torch cannot see.
"""

from __future__ import annotations

import re
from pathlib import Path

from evalkit.config import read_config
from evalkit.errors import InputError
from evalkit.jsonio import read_json
from evalkit.limits import MAX_CONFIG_BYTES
from evalkit.replay.backends.models import resolve_config

from .openai_requests import MAX_STOP_BYTES, MAX_STOP_STRINGS

SERVE_DEFAULTS = {
    "model": "tiny",              # preset name or {preset = NAME, <config field> = value}
    "device": "cpu",              # cpu | cuda | cuda:N
    "dtype": None,                # default: float32 on cpu, bfloat16 on cuda
    "threads": 1,                 # torch CPU threads
    "max_batch": 16,              # requests decoded together
    "max_prefill_batch": None,    # prompts prefilled together (default: max_batch)
    "model_name": "evalkit-sidecar",   # the served model name (OpenAI "model")
    "seed": 0,                    # seed of the random-init weights
    "max_model_len": None,        # prompt + output limit (default: max_position_embeddings)
    "default_max_tokens": 256,    # chat requests without max_tokens (no EOS is ever sampled)
    "kv_cache_tokens": None,      # KV capacity in tokens: admission, preemption, usage gauge
    "max_request_bytes": 16 * 2**20,            # larger bodies: 413, refused unread
    "max_request_bytes_in_flight": 64 * 2**20,  # bodies being read/parsed at once: 429 beyond
    "max_seqs_per_request": 256,  # prompts x n of one request: 400 beyond
    "max_seqs_in_flight": 4096,   # sequences queued or running: 429 with Retry-After beyond
    "max_stop_strings": MAX_STOP_STRINGS,   # stop strings of one request: 400 beyond
    "max_stop_bytes": MAX_STOP_BYTES,       # their UTF-8 bytes together: 400 beyond
    "body_read_timeout_s": 30.0,  # a whole request body: 408 beyond, its bytes released
    "body_idle_timeout_s": 10.0,  # the wait for a body's next bytes: 408 beyond
    # a connection without a whole request head (an idle keep-alive one too): closed; above
    # the 15 s an aiohttp client keeps idle connections, so a client never sends on a
    # connection the server is closing (the replay's own client is one)
    "idle_connection_timeout_s": 20.0,
    "stream_write_timeout_s": 30.0,     # a streamed chunk the client does not take: aborted
}
TIMEOUT_KEYS = ("body_read_timeout_s", "body_idle_timeout_s", "idle_connection_timeout_s",
                "stream_write_timeout_s")
MAX_TIMEOUT_S = 86_400.0
DTYPES = ("float32", "float16", "bfloat16")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _int(cfg: dict, key: str, lo: int, where: str) -> int:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InputError(f"{key} must be an integer >= {lo}, got {v!r}", file=where,
                         column=key, fix=f"set {key} to a whole number >= {lo}")
    return v


def _seconds(cfg: dict, key: str, where: str) -> float:
    v = cfg[key]
    if (isinstance(v, bool) or not isinstance(v, (int, float))
            or not 0 < v <= MAX_TIMEOUT_S):    # NaN fails the comparison too
        raise InputError(f"{key} must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], "
                         f"got {v!r}", file=where, column=key,
                         fix=f"set {key} to e.g. {SERVE_DEFAULTS[key]}")
    return float(v)


def resolve_serve_config(raw: dict, *, where: str = "sidecar config") -> dict:
    """Defaults + ``raw`` -> effective settings; ``model`` becomes the resolved field dict."""
    if not isinstance(raw, dict):
        raise InputError("the sidecar config must be a table/object", file=where,
                         fix=f"use keys {sorted(SERVE_DEFAULTS)}")
    unknown = sorted(set(raw) - set(SERVE_DEFAULTS))
    if unknown:
        raise InputError(f"unknown sidecar settings {unknown}", file=where, column=unknown[0],
                         fix=f"use only {sorted(SERVE_DEFAULTS)}")
    cfg = dict(SERVE_DEFAULTS)
    cfg.update({k: v for k, v in raw.items() if v is not None})
    try:
        cfg["model"] = resolve_config(cfg["model"], where="model")
    except InputError as exc:
        if exc.file is None:
            raise InputError(exc.message, file=where, column=exc.column, fix=exc.fix) from None
        raise
    device = str(cfg["device"])
    if not _DEVICE.match(device):
        raise InputError(f"unknown device {device!r}", file=where, column="device",
                         fix="use cpu, cuda or cuda:N")
    if device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise InputError(f"device {device!r} but torch sees no CUDA device", file=where,
                             column="device", fix="use --device cpu or run on a GPU machine")
    cfg["device"] = device
    cfg["dtype"] = cfg["dtype"] or ("bfloat16" if device.startswith("cuda") else "float32")
    if cfg["dtype"] not in DTYPES:
        raise InputError(f"unknown dtype {cfg['dtype']!r}", file=where, column="dtype",
                         fix=f"use one of {list(DTYPES)}")
    for key in ("threads", "max_batch"):
        _int(cfg, key, 1, where)
    if cfg["max_prefill_batch"] is not None:
        _int(cfg, "max_prefill_batch", 1, where)
    _int(cfg, "seed", 0, where)
    positions = int(cfg["model"].get("max_position_embeddings", 32768))
    if cfg["max_model_len"] is None:
        cfg["max_model_len"] = positions
    _int(cfg, "max_model_len", 2, where)
    if cfg["max_model_len"] > positions:
        raise InputError(f"max_model_len {cfg['max_model_len']} exceeds the model's "
                         f"max_position_embeddings {positions}", file=where,
                         column="max_model_len", fix=f"use at most {positions}")
    _int(cfg, "default_max_tokens", 1, where)
    if cfg["kv_cache_tokens"] is None:
        cfg["kv_cache_tokens"] = int(cfg["max_batch"]) * min(int(cfg["max_model_len"]), 2048)
    _int(cfg, "kv_cache_tokens", 1, where)
    for key in ("max_request_bytes", "max_request_bytes_in_flight", "max_seqs_per_request",
                "max_seqs_in_flight", "max_stop_strings", "max_stop_bytes"):
        _int(cfg, key, 1, where)
    for key in TIMEOUT_KEYS:
        cfg[key] = _seconds(cfg, key, where)
    if cfg["max_request_bytes_in_flight"] < cfg["max_request_bytes"]:
        raise InputError("max_request_bytes_in_flight is below max_request_bytes: no body "
                         "of the largest allowed size could ever be read", file=where,
                         column="max_request_bytes_in_flight",
                         fix=f"set it to at least {cfg['max_request_bytes']}")
    if not isinstance(cfg["model_name"], str) or not cfg["model_name"].strip():
        raise InputError(f"model_name must be a non-empty string, got {cfg['model_name']!r}",
                         file=where, column="model_name", fix="e.g. --served-model-name tiny")
    return cfg


def read_config_file(path) -> dict:
    """A TOML or JSON file of sidecar settings (a ``[serve]`` table is also accepted)."""
    path = Path(path)
    if not path.exists():         # a FIFO or device: refused by the readers below, unopened
        raise InputError("config file not found", file=str(path), fix="check the path")
    if path.suffix.lower() != ".json":      # TOML, within evalkit.limits' bounds
        data = read_config(path, what="config file", action="cannot read the config file",
                           missing_fix="check the path",
                           syntax_message="cannot parse the config file",
                           syntax_fix="write TOML (key = value) or JSON").data
    else:
        data = read_json(path, limit=MAX_CONFIG_BYTES, what="the config file",
                         fix="write TOML (key = value) or JSON")
    if isinstance(data, dict) and set(data) == {"serve"}:
        data = data["serve"]
    if not isinstance(data, dict):
        raise InputError("the config file must hold a table/object", file=str(path),
                         fix=f"use keys {sorted(SERVE_DEFAULTS)}")
    return data
