"""A damageable copy of the fixture run and an editor of its run.json, for the run-log
validation tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RUN = "fixture-s0-fixed_h"


@pytest.fixture
def run(copy_fixture) -> Path:
    return copy_fixture(f"runs/{RUN}")


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))
