"""Symbolic links in a run store: followed inside it, refused (exit 2, each named) otherwise.

A store assembled with ``ln -s`` used to lose every linked run silently: `validate` counted
only the real directories and the gate's verdict changed.  One listing rule
(:func:`evalkit.runlog.io.list_runs`) serves validate, summarize, audit and sweep.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.runlog.io import list_runs
from tests.support.reliability_tools import write_campaign

REPO = Path(__file__).resolve().parents[2]


def _linked_copy(real: Path, dest: Path, keep_real: int = 3) -> Path:
    """``dest``: the runs of ``real`` with all but ``keep_real`` moved into ``dest/.pool``
    and replaced by symbolic links (relative for half of them, absolute for the rest)."""
    shutil.copytree(real, dest)
    pool = dest / ".pool"
    pool.mkdir()
    for i, run in enumerate(sorted(p for p in dest.iterdir() if not p.name.startswith("."))):
        if i < keep_real:
            continue
        run.rename(pool / run.name)
        run.symlink_to(Path(".pool") / run.name if i % 2 else pool / run.name,
                       target_is_directory=True)
    return dest


class _Res:
    def __init__(self, res):
        self.returncode, self.stdout, self.stderr = res.exit_code, res.stdout, res.stderr


def run_cli(args, **_):
    """In-process `evalkit ARGS` (exit code, stdout, stderr)."""
    return _Res(CliRunner().invoke(cli, [str(a) for a in args]))


def _gate(runs: Path, tmp: Path):
    return run_cli(["gate", runs, "--policy", "fixed_h", "--tier", "harness"])


def test_a_store_of_mostly_symlinks_gives_the_same_counts_and_verdict(tmp_path):
    real = REPO / "fixtures" / "runs"
    linked = _linked_copy(real, tmp_path / "linked")
    n = len([p for p in real.iterdir() if (p / "run.json").exists()])
    assert sum(p.is_symlink() for p in linked.iterdir()) == n - 3 > n / 2

    listing = list_runs(linked)
    assert len(listing.run_dirs) == n and listing.refused == []
    assert {p.name for p in listing.run_dirs} == {p.name for p in real.iterdir()}

    for runs in (real, linked):
        res = run_cli(["validate", runs])
        assert res.returncode == 0 and f"valid: {n} run(s) checked" in res.stdout, res.stdout
    a, b = (run_cli(["summarize", r, "--format", "csv"]) for r in (real, linked))
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout
    assert len(a.stdout.strip().splitlines()) == n + 1
    ga, gb = _gate(real, tmp_path), _gate(linked, tmp_path)
    assert ga.returncode == gb.returncode and ga.returncode in (0, 1), ga.stderr
    assert ga.stdout.replace(str(real), "R") == gb.stdout.replace(str(linked), "R")


def _bad_links(runs: Path, outside: Path) -> dict[str, str]:
    """Four links that must not be followed, by name, with the reason each must be given."""
    shutil.copytree(runs / "fixture-s0-fixed_h", outside / "fixture-s9-fixed_h")
    (runs / "escapes").symlink_to(outside / "fixture-s9-fixed_h", target_is_directory=True)
    (runs / "loop").symlink_to("loop")
    (runs / "up").symlink_to(".", target_is_directory=True)
    (runs / "dangling").symlink_to("gone", target_is_directory=True)
    (runs / "twice").symlink_to("fixture-s1-no_sync", target_is_directory=True)
    return {"escapes": "leaves the runs directory", "loop": "symbolic link loop",
            "up": "above it", "dangling": "dangling symbolic link",
            "twice": "a second path to"}


def test_links_that_leave_the_store_loop_dangle_or_repeat_are_exit_2_naming_each(
        tmp_path, copy_fixture):
    runs = copy_fixture("runs")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bad = _bad_links(runs, outside)
    refused = dict((p.name, why) for p, why in list_runs(runs).refused)
    assert set(refused) == set(bad)
    for name, why in bad.items():
        assert why in refused[name], (name, refused[name])

    res = run_cli(["validate", runs])
    assert res.returncode == 2 and "INVALID" in res.stdout
    for name, why in bad.items():
        assert str(runs / name) in res.stdout and why in res.stdout
    for args in (["summarize", runs], ["audit", runs, "--out", tmp_path / "report"]):
        res = run_cli(args)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "symbolic link" in res.stderr and "internal error" not in res.stderr


def test_sweep_resume_and_check_follow_inner_links_and_refuse_escaping_ones(tmp_path):
    camp = write_campaign(tmp_path, draws=0)
    runs = tmp_path / "runs"
    first = run_cli(["sweep", camp, "--out", runs, "--no-progress"])
    assert first.returncode == 0, first.stdout + first.stderr
    (runs / ".pool").mkdir()
    ns = "tiny__no_sync__s0"
    (runs / ns).rename(runs / ".pool" / ns)
    (runs / ns).symlink_to(Path(".pool") / ns, target_is_directory=True)
    check = run_cli(["sweep", camp, "--out", runs, "--check"])
    assert check.returncode == 0 and "2 of 2 runs complete" in check.stdout, check.stdout
    again = run_cli(["sweep", camp, "--out", runs, "--no-progress"])
    assert again.returncode == 0 and "2 skipped" in again.stdout, again.stdout

    outside = tmp_path / "outside"
    (runs / ".pool" / ns).rename(outside)
    (runs / ns).unlink()
    (runs / ns).symlink_to(outside, target_is_directory=True)
    check = run_cli(["sweep", camp, "--out", runs, "--check"])
    assert check.returncode == 2 and "leaves the runs directory" in check.stdout
    res = run_cli(["sweep", camp, "--out", runs, "--no-progress"])
    assert res.returncode == 2 and f"failed: {ns}" in res.stdout, res.stdout
    assert "leaves the runs directory" in res.stdout
    assert os.path.islink(runs / ns) and (outside / "run.json").exists()   # left alone


def test_a_linked_run_that_is_rewritten_replaces_the_link_and_leaves_no_leftover(tmp_path):
    from evalkit.runlog.io import read_run, write_run

    runs = REPO / "fixtures" / "runs"
    store = _linked_copy(runs, tmp_path / "store", keep_real=0)
    name = "fixture-s0-fixed_h"
    run = read_run(store / name)
    write_run(store, run.meta, run.requests, run.merges)
    assert not (store / name).is_symlink() and (store / name / "run.json").exists()
    assert [p.name for p in store.iterdir() if p.name.startswith(".")] == [".pool"]
    assert list_runs(store).leftovers == [] and list_runs(store).refused == []
