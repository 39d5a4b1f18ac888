"""Helpers of the reliability tests: a tiny campaign, an unprivileged subprocess, kill points.

Unreadable files are only unreadable to a process without the capabilities that let root
read everything.  Tests run as root in CI, so :func:`unprivileged` returns a ``preexec_fn``
that removes CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the child's capability bounding
set before it executes (the child stays uid 0, so it can still run the interpreter installed
under root's home); as a normal user nothing needs dropping.  Where neither works the test is
skipped with the reason.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TINY_CAMPAIGN = """
regime = "tiny"
seeds = {seeds}
matched_random_draws = {draws}
horizon_s = 240.0
inner_step_s = 0.5
h_min = 80
h_max = 200
[slo]
e2e_s = 8.0
[trace]
generator = "square_wave"
period_s = 60.0
burst_s = 20.0
quiet_rate = 2.0
busy_rate = 10.0
prompt_tokens = "lognormal:256,0.5"
output_tokens = "lognormal:64,0.5"
[[policies]]
name = "wa"
"""


CALIBRATED_OFFLINE = """[[policies]]
name = "calibrated_offline"
params = { k_from = "wa" }
"""


def tiny_campaign(seeds: int = 1, draws: int = 2, *, calibrated_offline: bool = False) -> str:
    """The tiny campaign's text (``wa``; with ``calibrated_offline`` taking wa's K)."""
    text = TINY_CAMPAIGN.format(seeds=seeds, draws=draws)
    return text + CALIBRATED_OFFLINE if calibrated_offline else text


def write_campaign(folder: Path, seeds: int = 1, draws: int = 2, name: str = "c.toml") -> Path:
    path = Path(folder) / name
    path.write_text(tiny_campaign(seeds, draws))
    return path


def cli_env(extra: dict | None = None, log_dir: Path | None = None) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(REPO))
    if log_dir is not None:
        env["EVALKIT_LOG_DIR"] = str(log_dir)
    env.update(extra or {})
    return env


def run_cli(args, *, cwd=None, env=None, preexec_fn=None,
            timeout=300) -> subprocess.CompletedProcess:
    """``evalkit ARGS`` in a fresh interpreter; output captured as text."""
    return subprocess.run([sys.executable, "-m", "evalkit.cli.main", *map(str, args)],
                          cwd=cwd, env=env or cli_env(), preexec_fn=preexec_fn,
                          capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- privileges

_PR_CAPBSET_DROP = 24
_DAC_CAPS = (1, 2)          # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


def _drop_dac_caps() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _DAC_CAPS:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def unprivileged(tmp_path: Path):
    """A ``preexec_fn`` under which a child cannot read a mode-000 file (None: not needed).

    Probes it on a real mode-000 file; skips the test when no way to drop privileges works.
    """
    if os.geteuid() != 0:
        return None
    probe = tmp_path / "probe-000"
    probe.write_text("secret")
    probe.chmod(0)
    try:
        res = subprocess.run([sys.executable, "-c", f"open({str(probe)!r}).read()"],
                             preexec_fn=_drop_dac_caps, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot drop root's file capabilities here ({exc})")
    finally:
        probe.chmod(0o600)
    if res.returncode == 0 or "PermissionError" not in res.stderr:
        pytest.skip("running as root and dropping CAP_DAC_OVERRIDE did not make a mode-000 "
                    "file unreadable (no CAP_SETPCAP?): cannot test unreadable files")
    return _drop_dac_caps


# ----------------------------------------------------------------------------- kill points

KILL_HARNESS = textwrap.dedent('''
    """Run `evalkit ARGS` and SIGKILL this process at the K-th file-system event.

    Events: os.rename/replace/link/unlink/rmdir/mkdir/fsync, shutil.rmtree, opening a file
    for writing, pyarrow.parquet.write_table.  K = 0 counts them instead and writes the total
    to EVALKIT_KILL_COUNT_FILE at exit.
    """
    import atexit, builtins, os, shutil, signal, sys

    KILL_AT = int(os.environ["EVALKIT_KILL_AT"])
    COUNT_FILE = os.environ.get("EVALKIT_KILL_COUNT_FILE")
    count = [0]

    def tick():
        count[0] += 1
        if KILL_AT and count[0] == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(owner, name):
        real = getattr(owner, name)
        def wrapped(*args, **kwargs):
            tick()
            return real(*args, **kwargs)
        setattr(owner, name, wrapped)

    for name in ("rename", "replace", "link", "unlink", "rmdir", "mkdir", "fsync"):
        wrap(os, name)
    wrap(shutil, "rmtree")
    real_open = builtins.open

    def counted_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wxa+"):
            tick()
        return real_open(file, mode, *args, **kwargs)

    builtins.open = counted_open
    import pyarrow.parquet as pq
    wrap(pq, "write_table")
    if COUNT_FILE:
        atexit.register(lambda: real_open(COUNT_FILE, "w").write(str(count[0])))
    from evalkit.cli.main import cli
    sys.exit(cli.main(args=sys.argv[1:], prog_name="evalkit", standalone_mode=False))
''')


def write_kill_harness(folder: Path) -> Path:
    path = Path(folder) / "kill_harness.py"
    path.write_text(KILL_HARNESS)
    return path


def run_with_kill(harness: Path, args, kill_at: int, *, count_file: Path | None = None,
                  cwd=None, timeout=600) -> subprocess.CompletedProcess:
    env = cli_env({"EVALKIT_KILL_AT": str(kill_at)})
    if count_file is not None:
        env["EVALKIT_KILL_COUNT_FILE"] = str(count_file)
    return subprocess.run([sys.executable, str(harness), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- run stores

def run_fingerprints(runs_dir: Path) -> dict[str, dict]:
    """Per visible run: Parquet bytes and run.json without its timestamps and history
    (comparable).

    ``plan_sha256`` hashes the plan, whose ``created_at`` is wall clock (two sweeps that each
    freeze their own plan stamp different hashes): it is replaced by whether it names the
    runs directory's own plan.json, so a run stamped with a stale or foreign plan still differs.
    """
    from evalkit.runlog.io import list_runs
    from evalkit.runlog.plan import PLAN_FILE, load_plan, plan_sha256

    plan_path = Path(runs_dir) / PLAN_FILE
    own_plan = plan_sha256(load_plan(plan_path)) if plan_path.exists() else None
    out = {}
    for d in list_runs(runs_dir).run_dirs:
        meta = json.loads((d / "run.json").read_text())
        meta.pop("created_at", None)
        # wall clock, as created_at; a re-run's attempts are the sweep's history (when it
        # was stopped), not what the run computed
        for key in ("started_at", "host_load", "attempts"):
            (meta.get("run_order") or {}).pop(key, None)
        for doc in (meta, (meta.get("settings") or {}).get("requested") or {}):
            if doc.get("plan_sha256") is not None:
                doc["plan_sha256"] = ("own plan.json" if doc["plan_sha256"] == own_plan
                                      else doc["plan_sha256"])
        tables = {p.name: p.read_bytes() for p in sorted(d.glob("*.parquet"))}
        out[d.name] = {"meta": meta, **tables}
    return out


def complete_runs(runs_dir: Path) -> set[str]:
    """Names of visible runs whose run.json says complete."""
    from evalkit.runlog.io import list_runs

    done = set()
    for d in list_runs(runs_dir).run_dirs:
        try:
            if json.loads((d / "run.json").read_text()).get("complete"):
                done.add(d.name)
        except (OSError, ValueError):
            pass
    return done
