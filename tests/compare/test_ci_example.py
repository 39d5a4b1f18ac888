"""The CI example (examples/ci/compare-pr.yml): its `evalkit compare` command, as written,
gates recorded serve runs -- a pull request that regresses fails, an identical one passes."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from evalkit.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "compare-pr.yml"
RECORDED = Path(__file__).parent / "recorded"


def compare_argv() -> list[str]:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["compare"]["steps"]
    (script,) = [s["run"] for s in steps if "evalkit compare" in s.get("run", "")]
    argv = shlex.split(script.replace("\\\n", " "))
    assert argv[:2] == ["evalkit", "compare"]
    return argv[2:]


@pytest.mark.parametrize("base, pr, expected", [
    ("batch8", "batch1", 1),            # the pull request queues requests: fails
    ("batch8", "batch8_again", 0),      # the same configuration: passes
])
def test_the_workflows_compare_command_gates_recorded_runs(tmp_path, base, pr, expected):
    swap = {"results/base": str(RECORDED / base), "results/pr": str(RECORDED / pr),
            "compare": str(tmp_path / "compare")}
    argv = [swap.get(a, a) for a in compare_argv()]
    assert "--max-regression" in argv
    assert cli.main(args=["compare", *argv], standalone_mode=False) == expected
    assert (tmp_path / "compare" / "compare.md").exists()


def test_the_workflow_interleaves_and_runs_the_script_it_ships():
    text = WORKFLOW.read_text()
    assert 'order="base pr"' in text and 'order="pr base"' in text
    assert "pr/examples/ci/serve_and_bench.sh" in text
    assert (ROOT / "examples" / "ci" / "serve_and_bench.sh").stat().st_mode & 0o111
