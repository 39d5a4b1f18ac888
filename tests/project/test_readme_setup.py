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


def test_readme_says_how_long_the_tests_take_and_names_the_quick_part():
    quick = README[README.index("## Quick start"):README.index("## Architecture")]
    assert "python -m pytest -q" in quick
    assert re.search(r"2 CPU cores the whole suite takes about \d+(\.\d+)? minutes", quick)
    assert '-m "not slow"' in quick and "quick part" in quick


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
    assert campaign_name(audit_campaign(runs).campaign) == (name, "campaign file")
