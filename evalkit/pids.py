"""Whether a process named by its pid (in a lock file, a temporary directory's name) runs."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists on this host; a zombie counts as gone (it holds no lock
    and does no more work), a process of another user as alive."""
    if pid is None or pid <= 0:        # 0 and negative pids name process groups
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:            # exists, owned by someone else
        return True
    except (OSError, OverflowError):   # ProcessLookupError: no such process
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:                    # gone meanwhile; or no /proc to ask (not Linux)
        return not os.path.isdir("/proc")
