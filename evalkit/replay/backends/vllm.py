"""vLLM backend: the torch trainer co-located with a vLLM OpenAI server.

``backend_config``: ``endpoint`` (URL of a running server) and ``model`` (served name), or
``serve_vllm`` (a model to launch with ``vllm serve`` on a free port; ``vllm_args`` adds
arguments).  The open-loop client, metrics scraper and policy loop are the torch backend's;
the scraper reads vLLM's metric names (``vllm:num_requests_running`` / ``waiting``), which
``evalkit serve`` also exports, so the sidecar can stand in for vLLM at ``endpoint``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys

from evalkit.errors import InputError
from evalkit.replay.spec import RunOutput

from .torch import prepare
from .torch.coordinator import Server, check_model, run_replay, wait_healthy
from .torch.procs import Managed, free_port


def _server_factory(cfg: dict):
    def start(cfg: dict, log_dir: str) -> Server:
        if cfg["serve_vllm"]:
            exe = shutil.which("vllm")
            if exe is None:
                try:
                    import vllm  # noqa: F401
                except ImportError as exc:
                    raise InputError("serve_vllm needs vllm, which is not installed",
                                     column="backend_config.serve_vllm",
                                     fix="pip install 'evalkit[vllm]' or pass endpoint/model "
                                         "of a running server") from exc
                argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                        "--model", str(cfg["serve_vllm"])]
            else:
                argv = [exe, "serve", str(cfg["serve_vllm"])]
            port = free_port()
            argv += ["--host", "127.0.0.1", "--port", str(port), *map(str, cfg["vllm_args"])]
            proc = Managed("vllm", argv, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                           log_path=os.path.join(log_dir, "vllm.log"))
            name = cfg["model"] or str(cfg["serve_vllm"])
            return Server(f"http://127.0.0.1:{port}", name, "vllm", proc,
                          {"vllm_argv": argv})
        if not cfg["endpoint"] or not cfg["model"]:
            raise InputError("the vllm backend needs endpoint and model, or serve_vllm",
                             column="backend_config.endpoint",
                             fix="--endpoint http://HOST:PORT --model NAME, or --serve-vllm MODEL")
        url = str(cfg["endpoint"]).rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        if not url.startswith(("http://", "https://")):
            raise InputError(f"endpoint {cfg['endpoint']!r} is not an http(s) URL",
                             column="backend_config.endpoint", fix="e.g. http://127.0.0.1:8000")
        server = Server(url, str(cfg["model"]), "endpoint", None, {})
        asyncio.run(wait_healthy(server, 3.0))      # fail before learners start
        asyncio.run(check_model(server))
        return server
    return start


def replay(spec, trace, policy, *, progress=None) -> RunOutput:
    cfg = prepare(spec, "vllm")
    if cfg["endpoint"] and cfg["serve_vllm"]:
        raise InputError("give either endpoint or serve_vllm, not both",
                         column="backend_config.serve_vllm", fix="drop one of them")
    return run_replay(spec, trace, policy, cfg=cfg, start_server=_server_factory(cfg),
                      backend="vllm", progress=progress)
