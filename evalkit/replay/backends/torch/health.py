"""A serving endpoint and its readiness: the server a rig talks to, ``/health``, ``/v1/models``.

Used by the rig (which starts and waits for the server) and by the coordinator (which
replays against it); ``aiohttp`` is imported where a request is made, so a backend module
can be imported -- and a bad configuration refused -- without the ``torch`` extra.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from evalkit.errors import InputError
from evalkit.replay.backends.procs import Managed


@dataclass
class Server:
    base_url: str
    model: str
    kind: str                       # "sidecar" | "vllm" | "endpoint"
    proc: Managed | None = None
    info: dict = field(default_factory=dict)
    admin_key: str | None = None    # bearer token of the sidecar's /admin/reset



def say(progress, msg: str) -> None:
    """Show ``msg`` as a tqdm bar's postfix, or pass it to a callable; None: nothing."""
    if progress is None:
        return
    if hasattr(progress, "set_postfix_str"):
        progress.set_postfix_str(msg)
    elif callable(progress):
        progress(msg)


async def wait_healthy(server: Server, timeout_s: float) -> None:
    """Poll ``/health`` until 200; fail early if the launched process exits."""
    import aiohttp
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if server.proc is not None and server.proc.poll() is not None:
                raise InputError(f"{server.kind} exited with code {server.proc.poll()} while "
                                 f"starting: {server.proc.log_tail()}",
                                 column="backend_config", fix="see the log above")
            try:
                async with s.get(server.base_url + "/health",
                                 timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.25)
    raise InputError(f"{server.kind} at {server.base_url} not healthy after {timeout_s:g} s "
                     f"({last})", column="backend_config.endpoint",
                     fix="check the URL / that the server is running, or raise "
                         "backend_config.startup_timeout_s")


async def check_model(server: Server) -> None:
    """The server lists ``server.model`` under ``/v1/models``."""
    import aiohttp
    async with aiohttp.ClientSession() as s:
        try:
            async with s.get(server.base_url + "/v1/models",
                             timeout=aiohttp.ClientTimeout(total=10)) as r:
                body = await r.json()
        except Exception as exc:
            raise InputError(f"cannot list models at {server.base_url}/v1/models: {exc}",
                             column="backend_config.endpoint",
                             fix="point endpoint at an OpenAI-compatible server") from exc
    names = [m.get("id") for m in body.get("data", [])]
    if server.model not in names:
        raise InputError(f"model {server.model!r} not served at {server.base_url}; "
                         f"available: {names}", column="backend_config.model",
                         fix=f"use one of {names}")
