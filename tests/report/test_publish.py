"""Atomic report publishing: the user's files survive, a kill -9 at any point leaves the
previous complete report or the new complete one, leftovers are cleaned, bad --out is exit 2."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.errors import InputError
from evalkit.report import publish as pub
from evalkit.report.publish import MANIFEST, publish

OLD = {"report.html": b"<html>old</html>", "report.md": b"old md", "audit.json": b'{"v": 1}',
       "figures/a.png": b"old a", "figures/gone.png": b"old gone"}
NEW = {"report.html": b"<html>new</html>", "report.md": b"new md", "audit.json": b'{"v": 2}',
       "figures/a.png": b"new a", "figures/fresh.png": b"new fresh"}
USER = {"notes.txt": b"my notes", "figures/mine.png": b"my figure", "sub/deep/x.txt": b"deep"}


def _put(root: Path, files: dict) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file()}


def _state(out: Path) -> str:
    """'old' or 'new' when ``out`` holds exactly that complete report plus the user's files."""
    have = _files(out)
    manifest = json.loads(have.pop(MANIFEST))["files"]
    for name, version in (("old", OLD), ("new", NEW)):
        if have == {**version, **USER} and manifest == sorted(version):
            return name
    raise AssertionError(f"neither the old nor the new report: {sorted(have)}")


@pytest.fixture
def old_report(tmp_path):
    out = tmp_path / "out"
    assert publish(out, OLD).atomic
    _put(out, USER)
    assert _state(out) == "old"
    return out


def test_publish_replaces_only_evalkit_files(old_report):
    inode = (old_report / "figures" / "mine.png").stat().st_ino
    res = publish(old_report, NEW)
    assert res.atomic and res.kept_aside is None
    assert _state(old_report) == "new"
    assert (old_report / "figures" / "mine.png").stat().st_ino == inode   # the same file
    assert not list(old_report.parent.glob(".out.evalkit-tmp-*"))


def test_a_report_written_before_manifests_is_recognised_by_its_audit_json(tmp_path):
    out = tmp_path / "out"
    legacy = {**OLD, "audit.json": json.dumps({
        "evalkit_version": "0.0.9", "claims": [{"figures": {
            "v": "figures/a.png", "n": "figures/gone.png"}}]}).encode()}
    _put(out, {**legacy, **USER})
    publish(out, NEW)
    assert _state(out) == "new"


def test_a_file_of_the_users_where_a_figure_goes_is_refused(tmp_path):
    out = tmp_path / "out"
    _put(out, {"figures/fresh.png": b"the user's"})
    with pytest.raises(InputError, match="which evalkit did not write"):
        publish(out, NEW)
    assert _files(out) == {"figures/fresh.png": b"the user's"}
    assert not list(tmp_path.glob(".out.evalkit-tmp-*"))


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "out"
    target.write_text("a file")
    with pytest.raises(InputError, match="not a directory"):
        publish(target, NEW)


def test_symlinked_out_keeps_the_link(tmp_path):
    real = tmp_path / "real"
    publish(real, OLD)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    publish(link, NEW)
    assert link.is_symlink() and (link / "report.html").read_bytes() == NEW["report.html"]


def test_links_of_the_users_survive_and_are_not_followed(old_report, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "big.bin").write_bytes(b"not mine to copy")
    (old_report / "data").symlink_to(elsewhere, target_is_directory=True)
    (old_report / "link.txt").symlink_to("notes.txt")
    publish(old_report, NEW)
    assert (old_report / "data").is_symlink() and (old_report / "link.txt").is_symlink()
    assert (elsewhere / "big.bin").read_bytes() == b"not mine to copy"
    assert (old_report / "link.txt").read_bytes() == USER["notes.txt"]
    assert not list(old_report.parent.glob(".out.evalkit-tmp-*"))


def test_without_an_atomic_exchange_files_are_replaced_in_place(old_report, monkeypatch):
    monkeypatch.setattr(pub, "_exchange", lambda a, b: False)
    res = publish(old_report, NEW)
    assert not res.atomic and "one by one" in res.note
    assert _state(old_report) == "new"
    assert not [p for p in old_report.rglob("*") if ".evalkit-tmp-" in p.name]


def test_a_killed_in_place_replacement_leaves_every_evalkit_file_known(old_report,
                                                                       monkeypatch):
    monkeypatch.setattr(pub, "_exchange", lambda a, b: False)
    real_replace = os.replace
    calls = []

    def replace_then_die(src, dst):
        calls.append(dst)
        if len(calls) == 3:                # the union manifest, then one file, then "kill"
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(pub.os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        publish(old_report, NEW)
    monkeypatch.setattr(pub.os, "replace", real_replace)
    assert set(json.loads((old_report / MANIFEST).read_text())["files"]) == set(OLD) | set(NEW)
    publish(old_report, NEW)                          # the next run is not refused
    assert _state(old_report) == "new"


def test_too_many_user_files_are_not_moved_around(old_report, monkeypatch):
    monkeypatch.setattr(pub, "MAX_USER_FILES", 2)
    res = publish(old_report, NEW)
    assert not res.atomic and "more than 2 files" in res.note
    assert _state(old_report) == "new"


def test_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        publish(tmp_path / "out", NEW)
    finally:
        os.umask(old)
    assert (tmp_path / "out" / "report.html").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o750


def test_a_file_added_while_publishing_is_moved_back_not_deleted(old_report, monkeypatch):
    real_exchange = pub._exchange

    def exchange_then_user_writes(a, b):
        (b / "late.txt").write_bytes(b"written during the audit")      # lands in the old tree
        return real_exchange(a, b)

    monkeypatch.setattr(pub, "_exchange", exchange_then_user_writes)
    publish(old_report, NEW)
    assert (old_report / "late.txt").read_bytes() == b"written during the audit"


# ------------------------------------------------------------------------ fault injection

COUNTED_OS_STEPS = ("rename", "replace", "unlink", "link", "mkdir", "rmdir", "symlink", "chmod")
COUNTED_PUBLISH_STEPS = ("_write", "_exchange", "fsync_dir")


def _publish_in_a_child(out: Path, kill_at: int, files: dict) -> tuple[int, str]:
    """publish(out, files) in a forked child whose file-system steps (those os calls and
    publish's own) are counted; at step ``kill_at`` (0: never) the child SIGKILLs itself.
    Returns (its exit code, negative for a signal; the steps it counted, when it finished)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                  # the child never returns into pytest
        try:
            os.close(read)
            steps = [0]

            def counted(fn):
                def wrapper(*args, **kwargs):
                    steps[0] += 1
                    if steps[0] == kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*args, **kwargs)
                return wrapper

            for name in COUNTED_OS_STEPS:
                setattr(os, name, counted(getattr(os, name)))
            for name in COUNTED_PUBLISH_STEPS:
                setattr(pub, name, counted(getattr(pub, name)))
            pub.publish(out, files)
            os.write(write, str(steps[0]).encode())
            os._exit(0)
        except BaseException:                     # noqa: BLE001 - the child must exit
            import traceback

            traceback.print_exc()
            os._exit(3)
    os.close(write)
    with os.fdopen(read) as pipe:
        counted_steps = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), counted_steps


def test_kill_9_at_every_step_of_publishing_leaves_a_complete_report(tmp_path):
    template = tmp_path / "template"
    publish(template, OLD)
    _put(template, USER)
    counted = tmp_path / "count"
    counted.mkdir()
    subprocess.run(["cp", "-a", str(template), str(counted / "out")], check=True)
    code, counted_steps = _publish_in_a_child(counted / "out", 0, NEW)   # 0: count the steps
    assert code == 0
    steps = int(counted_steps)
    assert steps > 10
    seen = set()
    for kill_at in range(1, steps + 1):
        case = tmp_path / f"k{kill_at}"
        case.mkdir()
        out = case / "out"
        subprocess.run(["cp", "-a", str(template), str(out)], check=True)
        code, _ = _publish_in_a_child(out, kill_at, NEW)
        assert code == -signal.SIGKILL, kill_at
        seen.add(_state(out))                          # old or new, never a mix
        publish(out, NEW)                              # the next audit cleans up
        assert _state(out) == "new"
        assert [p.name for p in case.iterdir()] == ["out"], (kill_at, list(case.iterdir()))
        assert not [p for p in out.rglob("*") if ".evalkit-tmp-" in p.name]
    assert seen == {"old", "new"}


@pytest.mark.slow
def test_kill_9_during_evalkit_audit_keeps_the_previous_or_the_new_report(tmp_path, repo_root):
    """A real `evalkit audit` into an existing report, killed at random moments."""
    runs = repo_root / "fixtures" / "campaigns" / "sim_underpowered"
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "evalkit.cli.main", "audit", str(runs), "--out", str(out)]
    first = subprocess.run(cmd + ["--seed", "1"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    (out / "mine.txt").write_text("the user's")
    (out / "figures" / "mine.png").write_bytes(b"the user's figure")
    previous = _files(out)
    t0 = time.perf_counter()
    second = subprocess.run(cmd + ["--seed", "2"], capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    duration = time.perf_counter() - t0
    newer = _files(out)
    assert newer["audit.json"] != previous["audit.json"]
    rng = random.Random(15)
    for seed in (1, 2, 1):       # each killed run would have switched to the other report
        proc = subprocess.Popen(cmd + ["--seed", str(seed)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 1.0) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = _files(out)
        assert state in (previous, newer), sorted(state)
        assert state["mine.txt"] == b"the user's"
        assert state["figures/mine.png"] == b"the user's figure"
    done = subprocess.run(cmd + ["--seed", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert _files(out) == previous                     # leftovers of the kills cleaned
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


def test_audit_prints_the_path_of_report_html(tmp_path, repo_root):
    from evalkit.cli.main import cli

    table = repo_root / "fixtures" / "campaigns" / "summary_table.csv"
    out = tmp_path / "rep"
    res = CliRunner().invoke(cli, ["audit", str(table), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"report: {out / 'report.html'}" in res.output
    assert (out / "report.html").is_file()


def test_audit_into_a_file_exits_2(tmp_path, repo_root):
    from evalkit.cli.main import cli

    target = tmp_path / "file"
    target.write_text("x")
    runs = repo_root / "fixtures" / "campaigns" / "summary_table.csv"
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(target)])
    assert res.exit_code == 2, res.output
    assert "is a file" in res.output
    assert target.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_audit_into_a_read_only_out_exits_2(tmp_path, repo_root):
    from evalkit.cli.main import cli

    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        runs = repo_root / "fixtures" / "campaigns" / "summary_table.csv"
        res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(parent / "out")])
    finally:
        parent.chmod(0o755)
    assert res.exit_code == 2, res.output
    assert str(parent) in res.output
