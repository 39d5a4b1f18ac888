"""Status lines for long steps reach a non-terminal stderr (a CI log): the audit's steps and
the sweep's runs; quick steps and in-memory captures stay quiet."""

from __future__ import annotations

import sys
import time
import tomllib

import pytest

from evalkit import progress
from evalkit.replay.campaign import parse_campaign
from evalkit.replay.sweep import run_campaign
from tests.support.protocols import BUNDLED

from tests.support.tiny_campaign import TINY_SQUARE_WAVE


@pytest.fixture
def log_file(tmp_path):
    """A real file as stderr: a file descriptor, not a terminal (as in a CI job)."""
    with open(tmp_path / "stderr.log", "w+", encoding="utf-8") as f:
        assert not f.isatty()
        yield f


def _lines(f) -> list[str]:
    f.flush()
    f.seek(0)
    return f.read().splitlines()


def test_a_step_over_the_threshold_says_so_on_a_log_file_and_a_quick_one_does_not(
        monkeypatch, log_file):
    monkeypatch.setattr(progress, "AFTER_S", 0.05)
    monkeypatch.setattr(progress, "EVERY_S", 0.05)
    with progress.step("audit: checking 1 claim(s)", stream=log_file):
        time.sleep(0.3)
    lines = _lines(log_file)
    assert len(lines) >= 2 and all(x.startswith("audit: checking 1 claim(s) (") for x in lines)
    assert lines[0].endswith("s so far)")
    monkeypatch.setattr(progress, "AFTER_S", 5.0)
    with progress.step("quick", stream=log_file):
        pass
    assert _lines(log_file) == lines


def test_an_in_memory_capture_gets_no_status_line(monkeypatch):
    import io

    monkeypatch.setattr(progress, "AFTER_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    captured = io.StringIO()
    with progress.step("audit: reading runs", stream=captured):
        time.sleep(0.05)
    ticker = progress.Ticker("sweep x", 3, "run", stream=captured)
    ticker.update()
    ticker.close()
    assert captured.getvalue() == ""


def test_the_sweep_writes_progress_lines_to_a_non_terminal_stderr(monkeypatch, tmp_path,
                                                                  log_file):
    monkeypatch.setattr(progress, "EVERY_S", 0.0)      # a line per run, at once
    monkeypatch.setattr(sys, "stderr", log_file)
    camp = parse_campaign(tomllib.loads(
        TINY_SQUARE_WAVE.replace("seeds = 2", "seeds = 1")
        .replace("matched_random_draws = 2", "matched_random_draws = 1")))
    summary = run_campaign(camp, tmp_path / "runs", progress=None, protocol=BUNDLED)
    n = len(summary.outcomes)
    lines = [x for x in _lines(log_file) if x.startswith("sweep tiny: ")]
    assert n >= 3 and lines[0].startswith(f"sweep tiny: 1 of {n} runs (")
    assert lines[-1].startswith(f"sweep tiny: {n} of {n} runs (")


def test_the_audit_names_its_steps_on_a_non_terminal_stderr(monkeypatch, log_file):
    from evalkit.audit.result import audit_campaign

    from tests.conftest import REPO

    monkeypatch.setattr(progress, "AFTER_S", 0.0)      # every step counts as long
    monkeypatch.setattr(progress, "EVERY_S", 60.0)
    monkeypatch.setattr(sys, "stderr", log_file)
    audit_campaign(REPO / "fixtures" / "campaigns" / "sim_underpowered")
    lines = _lines(log_file)
    assert lines[0].startswith("audit: reading sim_underpowered (")
    assert lines[1].startswith("audit: checking 1 claim(s) against protocol diloco-slo (")
