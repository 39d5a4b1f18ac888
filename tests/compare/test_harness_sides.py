"""`evalkit compare` reads AIPerf and inference-perf results through their importers' readers:
an AIPerf artifact directory with repetitions, and a directory of inference-perf report
directories (fixtures: tests/interop/fixtures, real exports)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evalkit.cli.main import cli

FIXTURES = Path(__file__).resolve().parents[1] / "interop" / "fixtures"


def _aiperf_side(folder: Path, reps: int, ttft_factor: float, spread: float) -> Path:
    """``folder/profile_runs/run_000i``: the real export with TTFT and latency scaled
    (repetition i by ``ttft_factor * (1 + spread * i)``)."""
    for i in range(reps):
        run = folder / "profile_runs" / f"run_{i + 1:04d}"
        run.mkdir(parents=True)
        shutil.copy(FIXTURES / "aiperf" / "profile_export_aiperf.json", run)
        lines = []
        for line in (FIXTURES / "aiperf" / "profile_export.jsonl").read_text().splitlines():
            rec = json.loads(line)
            for key in ("time_to_first_token", "time_to_first_output_token"):
                if key in (rec.get("metrics") or {}):
                    rec["metrics"][key]["value"] *= ttft_factor * (1 + spread * i)
            lines.append(json.dumps(rec))
        (run / "profile_export.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _run(capsys, *args) -> tuple[int, dict | str]:
    code = cli.main(args=["compare", *map(str, args)], standalone_mode=False)
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code in (0, 1) and "--json" in args else out.err)


def test_aiperf_artifact_directories_pair_by_repetition(tmp_path, capsys):
    a = _aiperf_side(tmp_path / "A", 6, 1.0, 0.05)
    b = _aiperf_side(tmp_path / "B", 6, 1.5, 0.05)
    code, doc = _run(capsys, a, b, "--metric", "ttft_p50", "--json")
    assert code == 0
    assert doc["pairing"]["key"] == "repetition" and doc["pairing"]["n"] == 6
    assert doc["runs"]["A"][0]["harness"] == "aiperf"
    assert doc["runs"]["A"][0]["provenance"]["version"]
    row = doc["metrics"][0]
    assert row["verdict"] == "worse" and row["difference"] > 0


def test_inference_perf_report_directories_need_the_tool_version(tmp_path, capsys):
    for side in ("A", "B"):
        for rep in range(3):
            shutil.copytree(FIXTURES / "inference_perf", tmp_path / side / f"rep-{rep}")
    code, err = _run(capsys, tmp_path / "A", tmp_path / "B", "--metric", "e2e_p50")
    assert code == 2 and "--tool-version" in err
    code, doc = _run(capsys, tmp_path / "A", tmp_path / "B", "--metric", "e2e_p50",
                     "--tool-version", "0.7.0", "--json")
    assert code == 0 and doc["runs"]["B"][2]["harness"] == "inference-perf"
    assert doc["metrics"][0]["difference"] == 0
    assert doc["metrics"][0]["verdict"] != "better"
