"""Imports are the file's word: imported runs pass the design checks only vouched
(--accept-vouched), record the engine the file names, and never compare alike with runs
of another source."""

from __future__ import annotations

import json

from click.testing import CliRunner

from evalkit.audit.checks.like_for_like import may_differ
from evalkit.cli.main import cli

from tests.interop.import_guide_files import write_vllm_files
from tests.interop.test_import_guide import guide_block, run_guide


def test_hand_written_bench_files_do_not_pass_unvouched(tmp_path, monkeypatch):
    """The attack: hand-written vLLM bench results for a policy, its draws and no-sync runs.
    The guide's gate (vouched) passes; without --accept-vouched the gate exits 1 on the
    checks whose evidence is the files' word."""
    write_vllm_files(tmp_path)
    run_guide(guide_block("vllm"), tmp_path, monkeypatch)
    res = CliRunner().invoke(cli, ["gate", "runs", "--policy", "mypolicy", "--verbose"])
    assert res.exit_code == 1, res.output
    assert "pairing_real" in res.output and "imported from a file" in res.output
    meta = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert meta["backend"] == "import"
    assert meta["settings"]["effective"]["engine"] == "vllm bench serve"


def test_the_engine_is_compared_like_for_like():
    assert not may_differ("settings.effective.engine") and not may_differ("backend")
