"""pid_alive: a running process, a zombie, a reaped child, and pids that name no process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalkit.pids import pid_alive


def test_this_process_and_init_are_alive():
    assert pid_alive(os.getpid())
    assert pid_alive(1)               # another user's (or our own) pid 1: alive either way


@pytest.mark.parametrize(
    "pid", [None, 0, -1, "minus this process", 2 ** 70],
    ids=["none", "zero", "minus-one", "minus-own-pid", "too-large"])
def test_pids_that_name_no_single_process_are_not_alive(pid):
    # a negative pid names a process group to kill(2), never one process
    if pid == "minus this process":
        pid = -os.getpid()
    assert pid_alive(pid) is False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see a zombie")
def test_a_zombie_and_a_reaped_child_are_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 30
    while time.time() < deadline:     # exited but not waited for: a zombie
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.02)
    assert pid_alive(child.pid) is False
    child.wait()
    assert pid_alive(child.pid) is False
