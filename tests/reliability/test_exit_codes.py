"""Exit codes with one meaning each: 0 ok, 1 gate's "not reached" only, 2 bad input or
environment (naming the path and the fix), 3 internal error (traceback in a log file)."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli, exit_code_for
from evalkit.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, from_os_error

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs(copy_fixture) -> Path:
    return copy_fixture("runs")


def invoke(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def test_internal_error_exits_3_with_traceback_in_a_log_file(runs, tmp_path, monkeypatch):
    import evalkit.runlog.validate as validate

    def broken(*_a, **_k):
        raise ZeroDivisionError("boom in a helper")

    monkeypatch.setattr(validate, "validate_runs", broken)
    monkeypatch.setenv("EVALKIT_LOG_DIR", str(tmp_path / "logs"))
    res = invoke(["validate", runs])
    assert res.exit_code == EXIT_INTERNAL == 3, res.output
    assert "internal error" in res.output and "ZeroDivisionError: boom in a helper" in res.output
    assert "Traceback" not in res.output            # not on the terminal ...
    logs = list((tmp_path / "logs").glob("evalkit-crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in res.output
    text = logs[0].read_text()                      # ... but in the log, with the command
    assert "Traceback (most recent call last)" in text and "in broken" in text
    assert f"command: evalkit validate {runs}" in text


def test_crash_log_falls_back_to_the_temp_dir(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("EVALKIT_LOG_DIR", str(blocker / "logs"))     # cannot be created
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    try:
        raise KeyError("x")
    except KeyError as exc:
        assert exit_code_for(exc, ["demo"]) == EXIT_INTERNAL
    assert len(list(tmp_path.glob("evalkit-crash-*.log"))) == 1


@pytest.mark.parametrize("err, words", [
    (PermissionError(errno.EACCES, "Permission denied", "/data/runs/r1/run.json"),
     "check the permissions"),
    (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/out"), "read-only"),
    (OSError(errno.ENOSPC, "No space left on device", "/full/out.csv"), "disk is full"),
    (OSError(errno.ENAMETOOLONG, "File name too long", "/x/" + "p" * 300), "shorter"),
])
def test_environment_errors_exit_2_naming_path_and_fix(runs, monkeypatch, err, words):
    import evalkit.runlog.validate as validate

    def fail(*_a, **_k):
        raise err

    monkeypatch.setattr(validate, "validate_runs", fail)
    res = invoke(["validate", runs])
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    assert err.filename in res.output and words in res.output and "Traceback" not in res.output


def test_interrupt_is_130_not_1(runs, monkeypatch):
    import evalkit.runlog.validate as validate

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "validate_runs", interrupted)
    assert invoke(["validate", runs]).exit_code == 130


def test_usage_errors_exit_2():
    assert invoke(["no-such-command"]).exit_code == 2
    assert invoke(["sweep"]).exit_code == 2                   # missing argument
    assert invoke(["--help"]).exit_code == 0


def test_help_documents_every_exit_code():
    out = invoke(["--help"]).output
    for code, words in ((0, "success"), (1, "gate: the claim does not reach"),
                        (2, "bad input or environment"), (3, "internal error"),
                        (4, "not decided yet (gate --sequential, compare --plan-file)"), (130, "interrupted")):
        assert re.search(rf"^\s*{code}\s+{re.escape(words)}", out, re.M), (code, out)


def test_readme_has_the_exit_code_table():
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Exit codes"):]
    for row in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert row in table


def test_summarize_out_into_a_file_path_or_a_directory_exits_2(runs, tmp_path):
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    res = invoke(["summarize", runs, "--out", blocker / "table.csv"])
    assert res.exit_code == 2 and str(blocker) in res.output and "fix:" in res.output
    folder = tmp_path / "a-dir.csv"
    folder.mkdir()
    res = invoke(["summarize", runs, "--out", folder])
    assert res.exit_code == 2 and "is a directory" in res.output


def test_outputs_follow_the_umask(runs, tmp_path):
    """summarize --out and trace writes used mkstemp (always 0600): now 0666 minus umask."""
    import os

    old = os.umask(0o022)
    try:
        assert invoke(["summarize", runs, "--out", tmp_path / "t.csv"]).exit_code == 0
        assert invoke(["trace", "generate", "poisson", "--rate", "2", "--duration", "30",
                       "--seed", "1", "--out", tmp_path / "t.parquet"]).exit_code == 0
        assert invoke(["trace", "slice", tmp_path / "t.parquet", "--start", "0", "--end", "10",
                       "--out", tmp_path / "s.parquet"]).exit_code == 0
    finally:
        os.umask(old)
    for name in ("t.csv", "t.parquet", "s.parquet"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name
    assert not list(tmp_path.glob(".*tmp*"))                       # no temporaries left


def test_failed_runs_of_a_sweep_exit_2_not_1(tmp_path, monkeypatch):
    from evalkit.replay.backends import sim
    from tests.support.reliability_tools import write_campaign

    def dies(*_a, **_k):
        raise RuntimeError("engine died")

    monkeypatch.setattr(sim, "replay", dies)
    res = invoke(["sweep", write_campaign(tmp_path), "--out", tmp_path / "runs"])
    assert res.exit_code == 2, res.output
    assert "failed" in res.output and "engine died" in res.output


def test_no_command_exits_1_except_gate():
    """Exit 1 means "claim not reached" (gate) or "the rules changed" (diff
    --fail-on-protocol-change): only those two may use it."""
    offenders = []
    for path in sorted((REPO / "evalkit" / "cli").glob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bexit\(\s*1\s*\)|exit_code\s*=\s*1\b|else 1\)", line):
                offenders.append(f"{path.name}:{lineno}: {line.strip()}")
    assert [o for o in offenders if not o.startswith("audit.py")] == [], offenders
    gate = [o for o in offenders if o.startswith("audit.py")]
    assert len(gate) <= 2


def test_from_os_error_names_both_paths_of_a_rename():
    err = from_os_error(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"))
    assert "/a" in err.format() and "/b" in err.format() and "EXDEV" in err.format()
