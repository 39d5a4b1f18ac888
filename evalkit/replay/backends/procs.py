"""Child-process management: free ports, process groups, no orphans.

Shared by the backends that start children: the torch backend (learners and the serving
sidecar it launches), vLLM, and the sidecar process itself (:func:`die_with_parent`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time

_LIVE: list["Managed"] = []

# how a runner hands the sidecar child it starts the key of ``POST /admin/reset``: an
# environment variable (popped by the child at start), not argv, which a process list shows
SIDECAR_ADMIN_KEY_ENV = "EVALKIT_SIDECAR_ADMIN_KEY"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError:
            return True
    return False


def die_with_parent() -> None:
    """In a child: get SIGKILL when the parent dies (Linux), so nothing is orphaned."""
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Managed:
    """A child in its own session/process group; ``stop`` kills the whole group."""

    def __init__(self, name: str, argv: list[str], *, env: dict | None = None,
                 log_path: str | None = None):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        _LIVE.append(self)

    def poll(self):
        return self.proc.poll()

    def log_tail(self, n: int = 1500) -> str:
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def kill(self, sig=signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, grace_s: float = 3.0) -> int | None:
        if self.proc.poll() is None:
            self.kill(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        self.kill(signal.SIGKILL)       # the group: any grandchildren too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        if self in _LIVE:
            _LIVE.remove(self)
        return self.proc.returncode


@atexit.register
def _stop_all() -> None:
    for m in list(_LIVE):
        m.stop(grace_s=1.0)
