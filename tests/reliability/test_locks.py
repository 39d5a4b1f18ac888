"""The lock rules of a runs directory: locks of another host, clock skew, `--break-lock`.

A lock of another host is never taken over on a guess, whatever its age or date; the
operator breaks it with `sweep --break-lock`, which refuses while the lock is really held.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from evalkit.errors import StoreLocked
from evalkit.replay.storelock import (CLOCK_SKEW_S, STALE_AFTER_S, StoreLock, break_locks,
                                      current_holders, lock_path)
from tests.support.reliability_tools import cli_env, write_campaign


class _Res:
    def __init__(self, res):
        self.returncode, self.stdout, self.stderr = res.exit_code, res.stdout, res.stderr


def _invoke(args):
    from click.testing import CliRunner

    from evalkit.cli.main import cli

    return _Res(CliRunner().invoke(cli, [str(a) for a in args]))


def _remote_lock(folder, *, age_s: float, scope: str = "all"):
    path = lock_path(folder, scope)
    path.write_text(json.dumps({"pid": 4242, "host": "elsewhere.example", "scope": scope,
                                "started_at": "2026-01-01T00:00:00+00:00"}))
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


@pytest.mark.parametrize("age_s, said", [
    (0.0, "refreshed 0 s ago"),
    (STALE_AFTER_S - 5, f"refreshed {STALE_AFTER_S - 5:,.0f} s ago"),
    (STALE_AFTER_S + 5, f"not refreshed for {STALE_AFTER_S + 5:,.0f} s"),
    (-86_400.0, "s in the future: the clocks of the two hosts disagree"),
    (-(CLOCK_SKEW_S - 1), "refreshed 0 s ago"),            # within the skew allowance
])
def test_a_remote_lock_refuses_and_says_how_fresh_it_is(tmp_path, age_s, said):
    path = _remote_lock(tmp_path, age_s=age_s)
    with pytest.raises(StoreLocked) as info:
        StoreLock(tmp_path).acquire()
    text = info.value.format()
    assert said in text and "never taken over on a guess" in text, text
    assert "--break-lock" in info.value.fix and path.exists()
    holders = current_holders(tmp_path)
    assert [h.pid for h in holders] == [4242] and said in holders[0].describe()


def test_break_lock_removes_a_remote_lock_then_the_sweep_runs(tmp_path):
    camp = write_campaign(tmp_path, draws=0)
    runs = tmp_path / "runs"
    runs.mkdir()
    _remote_lock(runs, age_s=-86_400.0)                    # a day in the future
    refused = _invoke(["sweep", camp, "--out", runs, "--no-progress"])
    assert refused.returncode == 2 and "s in the future: the clocks" in refused.stderr
    assert "--break-lock" in refused.stderr
    res = _invoke(["sweep", camp, "--out", runs, "--no-progress", "--break-lock"])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "broke the lock .evalkit-sweep.all.lock of pid 4242 on host elsewhere.example" \
        in res.stderr
    assert "2 ran" in res.stdout and not lock_path(runs, "all").exists()
    again = _invoke(["sweep", camp, "--out", runs, "--no-progress", "--break-lock"])
    assert again.returncode == 0 and "no lock to break" in again.stderr
    both = _invoke(["sweep", camp, "--out", runs, "--check", "--break-lock"])
    assert both.returncode == 2 and "do not go together" in both.stderr


def test_break_lock_leaves_other_shards_and_refuses_a_held_lock(tmp_path):
    mine = _remote_lock(tmp_path, age_s=1000.0, scope="shard-0-of-2")
    other = _remote_lock(tmp_path, age_s=1000.0, scope="shard-1-of-2")

    class Shard:
        index, count = 0, 2

    notes = break_locks(tmp_path, Shard())
    assert len(notes) == 1 and not mine.exists() and other.exists()   # shards coexist
    other.unlink()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from evalkit.replay.storelock import StoreLock; StoreLock(Path(sys.argv[1]))"
         ".acquire(); print('locked', flush=True); time.sleep(600)", str(tmp_path)],
        env=cli_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLocked, match=f"pid {holder.pid} on host "
                                              f"{socket.gethostname()}.* still holds it"):
            break_locks(tmp_path)
        assert lock_path(tmp_path, "all").exists()
    finally:
        holder.kill()
        holder.wait()
    assert len(break_locks(tmp_path)) == 1          # its holder is gone: now it may go


def test_a_fifo_as_lock_file_does_not_hang(tmp_path):
    os.mkfifo(lock_path(tmp_path, "all"))
    assert current_holders(tmp_path) == []
    with pytest.raises(Exception, match="FIFO"):
        StoreLock(tmp_path).acquire()
