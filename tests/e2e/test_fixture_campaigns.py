"""The committed fixture campaigns are what their generator writes: one campaign (the
cheapest) and the summary table are regenerated here and compared byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import evalkit.runlog.io as runlog_io
from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "fixtures" / "campaigns"
CHEAPEST = ("sim_underpowered", "summary_table.csv")


@pytest.fixture(scope="module")
def generator():
    return load_script(REPO / "fixtures" / "make_campaigns.py", "evalkit_make_campaigns")


def _files(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``root`` (or ``root`` itself)."""
    if root.is_file():
        return {root.name: root.read_bytes()}
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_committed_campaign_has_a_generator(generator):
    assert sorted(os.listdir(COMMITTED)) == sorted(generator.CAMPAIGNS)


def test_regenerated_campaign_equals_the_committed_files(generator, tmp_path, monkeypatch):
    # fsync makes the files durable, not different: skipped here to keep the test fast
    monkeypatch.setattr(runlog_io, "fsync_tree", lambda path: None)
    monkeypatch.setattr(runlog_io, "fsync_dir", lambda path: None)
    out = tmp_path / "campaigns"
    generator.main(["--out", str(out), "--only", *CHEAPEST])
    assert sorted(os.listdir(out)) == sorted(CHEAPEST)
    for name in CHEAPEST:
        fresh, committed = _files(out / name), _files(COMMITTED / name)
        assert sorted(fresh) == sorted(committed), name
        changed = [rel for rel in fresh if fresh[rel] != committed[rel]]
        assert not changed, (f"{name}: {len(changed)} files differ from the generator's "
                             f"output (first: {changed[0]}); rerun fixtures/make_campaigns.py")
