"""A running `evalkit serve --preset tiny --device cpu` for tests that talk to it over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class RunningServer:
    base_url: str
    model: str
    proc: subprocess.Popen

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str = "tiny-test", *extra: str, timeout_s: float = 180.0,
                 log_path=None, port: int | None = None) -> RunningServer:
    """``log_path``: the server's stdout and stderr go to this file instead of a pipe;
    ``port``: this one instead of a free one."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "evalkit.cli.main", "serve", "--preset", "tiny",
           "--device", "cpu", "--port", str(port), "--served-model-name", model,
           "--max-batch", "8", *extra]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    out = open(log_path, "w") if log_path is not None else subprocess.PIPE
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
    if log_path is not None:
        out.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = (proc.stdout.read() if proc.stdout is not None
                    else open(log_path).read())
            raise RuntimeError(f"evalkit serve exited with {proc.returncode}: {text[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return RunningServer(url, model, proc)
        except OSError:
            time.sleep(0.3)
    stop_server(RunningServer(url, model, proc))
    raise RuntimeError(f"evalkit serve not healthy after {timeout_s} s")


def stop_server(server: RunningServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(5)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(5)


@contextmanager
def configured_server(folder, model: str, settings: dict, *extra: str):
    """A server started with ``settings`` written as its --config file in ``folder``; its log is
    ``folder/server.log`` (``server.log_path``); stopped on leaving the block."""
    cfg = folder / "serve.toml"
    cfg.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    server = start_server(model, "--config", str(cfg), *extra, log_path=folder / "server.log")
    server.log_path = folder / "server.log"
    try:
        yield server
    finally:
        stop_server(server)
