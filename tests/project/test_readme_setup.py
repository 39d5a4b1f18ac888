"""README's set-up text: how long the tests take and which is the quick part, the CPU wheel
index for torch; a report of a generic `campaign.toml` carries the campaign's name."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _quick_start():
    return README[README.index("## Quick start"):README.index("## Architecture")]


def test_readme_says_how_long_each_tier_takes_and_how_to_run_the_slow_one():
    quick = _quick_start()
    assert re.search(r"quick part of the suite \([\d,]+ tests[,)]", quick)
    assert re.search(r"takes\s+about \d+(\.\d+)? minutes", quick)
    assert re.search(r"`python -m pytest -q -n 2 -m slow` \([\d,]+ tests, about \d+(\.\d+)?\s+"
                     r"minutes\)", quick)
    assert re.search(r"the whole\s+suite takes about \d+(\.\d+)? minutes", quick)


def test_readme_test_command_is_the_one_ci_runs():
    command = re.search(r"```bash\n(pip install -e '\.\[dev[^\n]*pytest[^\n]*)\n```",
                        _quick_start()).group(1)
    install, pytest_args = command.split(" && python -m pytest ")
    ci = (REPO / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    assert f"python3 -m {install}" in ci
    assert f"python3 -m pytest {pytest_args} -p no:cacheprovider" in ci


def test_the_cpu_wheel_comes_before_the_test_command():
    quick = _quick_start()
    assert quick.index("download.pytorch.org/whl/cpu") < quick.index("python -m pytest")


def test_readme_gives_the_cpu_wheel_index_for_the_pinned_torch():
    pinned = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())
                  ["project"]["optional-dependencies"]["torch"] if d.startswith("torch=="))
    hint = f"pip install {pinned} --index-url https://download.pytorch.org/whl/cpu"
    assert hint in README
    assert "CUDA build" in README


@pytest.mark.parametrize("path, name", [
    ("examples/cpu_real/campaign.toml", "cpu_real"),
    ("/somewhere/gpu/campaign.toml", "gpu"),
    ("C:\\runs\\h200\\campaign.toml", "h200"),
    ("campaign.toml", "campaign"),                 # no folder to name it by
    ("examples/bursty.toml", "bursty"),
    ("examples/cpu_real/campaign_v2.toml", "campaign_v2"),
])
def test_a_generic_campaign_file_is_named_by_its_folder(tmp_path, path, name):
    from evalkit.audit import audit_campaign
    from evalkit.audit.provenance import campaign_name

    runs = tmp_path / "runs"
    shutil.copytree(REPO / "fixtures" / "campaigns" / "sim_underpowered", runs)
    for meta_path in runs.glob("*/run.json"):
        meta = json.loads(meta_path.read_text())
        meta.setdefault("settings", {}).setdefault("requested", {})["campaign"] = path
        meta_path.write_text(json.dumps(meta))
    assert campaign_name(audit_campaign(runs).runset) == (name, "campaign file")
