"""`evalkit compare` on two `evalkit serve` configurations that differ for real (max batch 1
against 8: with 8 concurrent requests, batch 1 queues them) and on two identical ones (max
batch 8 twice), benchmarked by an evalkit-native client (:mod:`tests.compare.serve_client`).

The quick tests read runs recorded that way (``tests/compare/recorded``, 8 interleaved
repetitions); the slow one starts the three servers and records afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.cli.main import cli

RECORDED = Path(__file__).parent / "recorded"
METRICS = ("--metric", "e2e_p50", "--metric", "ttft_p90")


def _compare(capsys, a, b, *extra) -> tuple[int, dict]:
    code = cli.main(args=["compare", str(a), str(b), *METRICS, "--json", *extra],
                    standalone_mode=False)
    return code, json.loads(capsys.readouterr().out)


def _check_difference_found(capsys, root: Path) -> None:
    code, doc = _compare(capsys, root / "batch1", root / "batch8")
    assert code == 0 and doc["pairing"]["key"] == "seed"
    verdicts = {r["metric"]: r["verdict"] for r in doc["metrics"]}
    assert verdicts["ttft_p90"] == "better", doc["metrics"]
    assert "worse" not in verdicts.values()
    # the other way round, as a pull request that regresses: the gate fails
    code, doc = _compare(capsys, root / "batch8", root / "batch1", "--max-regression", "10%")
    assert code == 1 and "ttft_p90" in doc["gate"]["failed"]


def _check_identical_never_better(capsys, root: Path) -> None:
    code, doc = _compare(capsys, root / "batch8", root / "batch8_again", "--margin", "25%",
                         "--max-regression", "10%")
    assert code == 0
    for r in doc["metrics"]:
        assert r["verdict"] in ("equivalent", "not yet known"), r


def test_recorded_serve_runs_find_the_batch_size_difference(capsys):
    _check_difference_found(capsys, RECORDED)


def test_recorded_identical_serve_configurations_are_never_better(capsys):
    _check_identical_never_better(capsys, RECORDED)


@pytest.mark.slow
@pytest.mark.torch
def test_live_serve_configurations_compare(capsys, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("aiohttp")
    from tests.compare.serve_client import record, start_servers, stop_servers

    servers = start_servers()
    try:
        record(tmp_path, servers, reps=8)
    finally:
        stop_servers(servers)
    _check_difference_found(capsys, tmp_path)
    _check_identical_never_better(capsys, tmp_path)
