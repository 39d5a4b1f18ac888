"""load_match over the whole horizon: a no-sync trainer that stops after 30 s steps at the
same rate while it runs, so step_rate alone matches it; trainer_active_share (the share of
the horizon the trainer stepped or merged) does not."""

from __future__ import annotations

import shutil

import pandas as pd

from evalkit.runlog.summary import summarize_run
from evalkit.stats.loadmatch import load_match

from tests.conftest import REPO

CAMPAIGN = REPO / "fixtures" / "campaigns" / "sim_bursty"


def _idle_after(run_dir, t_s: float) -> None:
    steps = pd.read_parquet(run_dir / "steps.parquet")
    steps[steps.end_s <= t_s].to_parquet(run_dir / "steps.parquet", index=False)


def test_a_no_sync_trainer_idle_after_30_s_is_a_mismatch(tmp_path):
    shutil.copytree(CAMPAIGN / "no_sync-s0", tmp_path / "no_sync-s0")
    policy = summarize_run(CAMPAIGN / "ewma-s0")
    honest = load_match(policy, summarize_run(tmp_path / "no_sync-s0"))
    assert honest.matched, honest.failed
    assert 0.95 < policy["trainer_active_share"] <= 1.0
    _idle_after(tmp_path / "no_sync-s0", 30.0)
    idle = summarize_run(tmp_path / "no_sync-s0")
    res = load_match(policy, idle)
    assert "step_rate" not in res.failed          # the attack: its rate while it ran matches
    assert res.failed == ["trainer_active_share"] and not res.matched
    assert idle["trainer_active_share"] < 0.2


def test_a_summary_table_without_the_share_cannot_show_the_horizon(tmp_path):
    from evalkit.runlog.table import read_summary_table

    path = tmp_path / "t.csv"
    path.write_text("policy,seed,violation_rate,step_rate,draws_per_row\newma,0,0.1,5.0,1\n")
    runs, _ = read_summary_table(path)
    assert runs.trainer_active_share.isna().all()
