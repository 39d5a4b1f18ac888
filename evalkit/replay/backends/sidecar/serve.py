"""A small OpenAI/vLLM-compatible serving sidecar over a random-init transformers model.

Run as ``evalkit serve --preset tiny`` (standalone) or, as the torch backend does,
``python -m evalkit.replay.backends.sidecar.serve --port P --config cfg.json``.  The engine
(continuous batching, one thread) is :mod:`~evalkit.replay.backends.sidecar.engine`; the HTTP
routes, limits and auth are :mod:`~evalkit.replay.backends.sidecar.server`; request parsing is
:mod:`~evalkit.replay.backends.sidecar.openai_requests`.  This module builds and starts them.

The runner-started sidecar enables ``POST /admin/reset`` when its environment carries
``EVALKIT_SIDECAR_ADMIN_KEY`` (the rig sets a random one and sends it as a bearer token);
``evalkit serve`` never has that route.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from evalkit.errors import InputError
from evalkit.replay.backends.models import build_model
from evalkit.replay.backends.procs import SIDECAR_ADMIN_KEY_ENV, die_with_parent

from .config import resolve_serve_config
from .engine import Engine
from .metrics import ServingMetrics
from .server import Limits, make_app, run  # noqa: F401

LIMIT_KEYS = ("max_request_bytes", "max_request_bytes_in_flight", "max_seqs_per_request",
              "max_seqs_in_flight", "max_stop_strings", "max_stop_bytes",
              "body_read_timeout_s", "body_idle_timeout_s", "idle_connection_timeout_s",
              "stream_write_timeout_s")


def build_engine(cfg: dict) -> Engine:
    """Model, metrics and engine thread from a resolved sidecar config (see .config)."""
    import torch
    torch.set_num_threads(int(cfg["threads"]))
    model = build_model(cfg["model"], seed=int(cfg["seed"]), device=cfg["device"],
                        dtype=cfg["dtype"])
    engine = Engine(model, device=cfg["device"], max_batch=int(cfg["max_batch"]),
                    vocab=int(cfg["model"]["vocab_size"]),
                    max_prefill_batch=cfg.get("max_prefill_batch"),
                    kv_capacity=int(cfg["kv_cache_tokens"]))
    engine.metrics = ServingMetrics(cfg["model_name"], running=engine.num_running,
                                    waiting=engine.num_waiting, kv_used_tokens=engine.kv_tokens,
                                    kv_cache_tokens=int(cfg["kv_cache_tokens"]))
    engine.start()
    return engine


def port_free(host: str, port: int) -> str | None:
    """None when ``host:port`` can be bound, else the reason.  With SO_REUSEADDR, as the
    listening socket itself: a port whose old connections linger in TIME-WAIT is free (a
    restart binds at once), one that another socket listens on is not."""
    import socket
    probe = socket.socket()
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        return None
    except OSError as exc:
        return str(exc)
    finally:
        probe.close()


def serve(cfg: dict, *, host: str, port: int, handle_signals: bool = True,
          api_key: str | None = None, admin_key: str | None = None) -> None:
    """Build the engine and serve until stopped (Ctrl-C / SIGTERM with ``handle_signals``).

    ``api_key``: the ``/v1`` routes need ``Authorization: Bearer <api_key>``; ``admin_key``:
    adds ``POST /admin/reset`` behind that bearer token."""
    t0 = time.monotonic()
    status("loading torch and transformers ...")
    import torch  # noqa: F401
    import transformers  # noqa: F401
    status(f"building the {cfg['model'].get('preset')} model ({cfg['device']}, "
           f"{cfg['dtype']}, seed {cfg['seed']}) and starting the engine ...")
    engine = build_engine(cfg)
    app = make_app(engine, cfg["model_name"], max_model_len=int(cfg["max_model_len"]),
                   default_max_tokens=int(cfg["default_max_tokens"]),
                   limits=Limits(**{k: cfg[k] for k in LIMIT_KEYS}),
                   api_key=api_key, admin_key=admin_key)
    auth = ", API key required" if api_key else ""
    try:
        run(app, host=host, port=port, handle_signals=handle_signals,
            ready=lambda: status(f"ready on http://{host}:{port} after "
                                 f"{time.monotonic() - t0:.1f} s: serving {cfg['model_name']}"
                                 f"{auth}"))
    finally:
        engine.stop.set()


def status(msg: str) -> None:
    """A start-up status line (stdout, flushed: start-up takes seconds)."""
    print(f"sidecar: {msg}", flush=True)


def main(argv=None) -> int:
    die_with_parent()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--config", required=True, help="JSON file of sidecar settings")
    args = ap.parse_args(argv)
    try:
        with open(args.config) as f:
            cfg = resolve_serve_config(json.load(f), where=args.config)
    except InputError as exc:
        print(f"sidecar: error: {exc.format()}", file=sys.stderr, flush=True)
        return 2
    busy = port_free(args.host, args.port)
    if busy is not None:
        print(f"sidecar: port {args.port} is in use: {busy}", file=sys.stderr, flush=True)
        return 3
    import os
    import signal
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))   # nothing to flush: stop at once
    serve(cfg, host=args.host, port=args.port, handle_signals=False,
          admin_key=os.environ.pop(SIDECAR_ADMIN_KEY_ENV, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
