"""examples/IMPORT.md, run as written: its command blocks, on small generated vLLM bench and
GuideLLM result files (tests/interop/import_guide_files.py), reach a verdict.

Bash runs each block with ``evalkit`` as a shell function that records its arguments (the
loops and variables expand as they would for a reader); each recorded command then runs
through the CLI in this process, in order.  The slow test runs the vLLM block literally, with
the installed ``evalkit`` command.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from tests.interop.import_guide_files import write_guidellm_files, write_vllm_files
from tests.support.reliability_tools import REPO, cli_env

GUIDE = REPO / "examples" / "IMPORT.md"
README = REPO / "README.md"

RECORD = ('evalkit() { "$PYTHON" -c \'import json, sys; print(json.dumps(sys.argv[1:]))\' '
          '"$@" >> "$CALLS"; }\n')


def guide_block(name: str) -> str:
    text = GUIDE.read_text()
    found = re.search(rf"<!-- import-guide:{name} -->\n```bash\n(.*?)```\n"
                      rf"<!-- /import-guide:{name} -->", text, re.S)
    assert found, f"examples/IMPORT.md lacks the {name} block"
    return found.group(1)


def recorded_commands(block: str, folder: Path) -> list[list[str]]:
    calls = folder / "calls.jsonl"
    subprocess.run(["bash", "-c", RECORD + block], cwd=folder, check=True, timeout=120,
                   env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable,
                        "CALLS": str(calls)})
    return [json.loads(line) for line in calls.read_text().splitlines()]


def run_guide(block: str, folder: Path, monkeypatch) -> list[tuple[list[str], object]]:
    monkeypatch.chdir(folder)
    out = []
    for argv in recorded_commands(block, folder):
        res = CliRunner().invoke(cli, argv)
        out.append((argv, res))
        if argv[0] != "gate":
            assert res.exit_code == 0, (argv, res.output)
    return out


def test_the_guide_is_linked_from_the_readme():
    assert "(examples/IMPORT.md)" in README.read_text()


def test_vllm_bench_results_reach_a_verdict(tmp_path, monkeypatch):
    write_vllm_files(tmp_path)
    done = run_guide(guide_block("vllm"), tmp_path, monkeypatch)
    imports = [argv for argv, _ in done if argv[0] == "import"]
    assert len(imports) == 24 and {a[1] for a in imports} == {"vllm-bench"}
    argv, gate = done[-1]
    assert argv[0] == "gate" and gate.exit_code in (0, 1), gate.output
    assert gate.exit_code == 0 and "gate PASS" in gate.output        # these files: a win
    assert "like_for_like" not in gate.output                        # the seeds are alike
    assert (tmp_path / "audit" / "report.html").exists()
    # as the guide says: imported runs cannot reach placement_gain (no trainer step rate)
    tier = CliRunner().invoke(cli, ["gate", "runs", "--policy", "mypolicy",
                                    "--tier", "placement_gain"])
    assert tier.exit_code == 1, tier.output
    assert "load_match" in tier.output and "step_rate" in tier.output


def test_guidellm_results_reach_a_verdict(tmp_path, monkeypatch):
    write_guidellm_files(tmp_path)
    done = run_guide(guide_block("guidellm"), tmp_path, monkeypatch)
    assert {a[1] for a, _ in done if a[0] == "import"} == {"guidellm"}
    argv, gate = done[-1]
    assert argv[0] == "gate" and gate.exit_code == 0, gate.output


def test_a_seed_imported_with_another_merge_clock_fails_like_for_like(tmp_path, monkeypatch):
    """The guide's warning, shown: one no-sync run imported with --merge-clock relative (it
    has no merges) and the claim stops at like_for_like, naming the option."""
    write_guidellm_files(tmp_path)
    block = guide_block("guidellm").replace(
        '--policy no_sync --seed $s $SAME',
        '--policy no_sync --seed $s $SAME $( [ $s = 3 ] && echo --merge-clock relative )')
    done = run_guide(block, tmp_path, monkeypatch)
    gate = done[-1][1]
    assert gate.exit_code == 1, gate.output
    assert "like_for_like" in gate.output and "settings.requested.merge_clock differs" \
        in gate.output


@pytest.mark.slow
def test_the_vllm_block_runs_literally_in_a_shell(tmp_path):
    exe = shutil.which("evalkit")
    if exe is None:
        pytest.skip("the evalkit command is not installed on PATH")
    write_vllm_files(tmp_path)
    res = subprocess.run(["bash", "-c", guide_block("vllm")], cwd=tmp_path, env=cli_env(),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert res.returncode == 0 and "gate PASS" in res.stdout
