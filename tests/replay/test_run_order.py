"""Randomised, blocked run order: drawn from the campaign, recorded, deterministic, and kept
by the scheduler for serial and parallel executors."""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from evalkit.replay.campaign import Job, load_campaign, plan_campaign
from evalkit.replay.run_order import BlockWindow, order_seed, ordered_jobs
from evalkit.replay.job import JobOutcome, execute_job
from evalkit.replay.sweep import run_campaign
from evalkit.runlog.execution_order import execution_order
from evalkit.runlog.schema import RUN_ORDER_KEYS
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import run_fingerprints
from tests.support.tiny_campaign import TINY_SQUARE_WAVE

CAMPAIGN = TINY_SQUARE_WAVE.replace("seeds = 2", "seeds = 4")


def _camp(tmp_path, text=CAMPAIGN):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return load_campaign(p)


def _metas(runs: Path) -> dict[str, dict]:
    return {d.name: json.loads((d / "run.json").read_text())
            for d in runs.iterdir() if d.is_dir() and not d.name.startswith(".")}


def _check_blocked(order_ids, jobs_by_id):
    """Each seed's runs are contiguous in ``order_ids`` and dependencies come first."""
    seeds = [jobs_by_id[r].seed for r in order_ids]
    changes = sum(a != b for a, b in zip(seeds, seeds[1:]))
    assert changes == len(set(seeds)) - 1, seeds
    pos = {r: i for i, r in enumerate(order_ids)}
    for r in order_ids:
        for d in jobs_by_id[r].depends_on:
            assert pos[d] < pos[r]


def test_order_is_blocked_randomised_and_deterministic(tmp_path):
    camp = _camp(tmp_path)
    jobs = plan_campaign(camp)
    by_id = {j.run_id: j for j in jobs}
    a, slots = execution_order(jobs, order_seed(camp))
    b, _ = execution_order(jobs, order_seed(camp))
    assert [j.run_id for j in a] == [j.run_id for j in b]
    _check_blocked([j.run_id for j in a], by_id)
    assert sorted(slots) == sorted(by_id) and sorted(s.position for s in slots.values()) \
        == list(range(len(jobs)))
    # over order seeds, every seed's block leads sometimes and the policy run's position in
    # its block varies, but a draw never precedes its policy run
    firsts, wa_pos = set(), set()
    for seed in range(40):
        ordered, sl = execution_order(jobs, seed)
        firsts.add(ordered[0].seed)
        wa_pos.add(sl["tiny__wa__s0"].position_in_block)
        _check_blocked([j.run_id for j in ordered], by_id)
    assert firsts == {0, 1, 2, 3} and wa_pos == {0, 1}   # before or after its no-sync run


def test_window_opens_the_first_two_unfinished_blocks():
    jobs = [Job(f"r{s}{i}", "policy", s) for s in range(3) for i in range(2)]
    _, slots = execution_order(jobs, 0)
    blocks = {rid: s.block for rid, s in slots.items()}
    w = BlockWindow(slots)
    by_block = {b: [r for r, bb in blocks.items() if bb == b] for b in range(3)}
    assert all(w.is_open(r) for r in by_block[0] + by_block[1])
    assert not any(w.is_open(r) for r in by_block[2])
    w.finished(by_block[0][0])
    assert not w.is_open(by_block[2][0])          # block 0 still has a run left
    w.finished(by_block[0][1])
    assert w.is_open(by_block[2][0]) and w.is_open("not-in-the-plan")


def test_serial_sweep_runs_each_block_whole_and_records_its_order(tmp_path):
    """Before: ``--jobs 1`` submitted every ready job (all no-sync and policy runs of every
    seed) before any draw.  Now a seed's draws run inside its block, right after its runs."""
    camp = _camp(tmp_path)
    s = run_campaign(camp, tmp_path / "runs", progress=False, protocol=BUNDLED)
    assert s.ok and s.count("ran") == 4 * 7
    metas = _metas(tmp_path / "runs")
    by_start = sorted(metas, key=lambda r: metas[r]["run_order"]["started_at"])
    by_pos = sorted(metas, key=lambda r: metas[r]["run_order"]["position"])
    assert by_start == by_pos                     # executed in the recorded order
    expected, _ = ordered_jobs(camp, plan_campaign(camp))
    assert by_pos == [j.run_id for j in expected]
    _check_blocked(by_pos, {j.run_id: j for j in plan_campaign(camp)})
    for rid, meta in metas.items():
        ro = meta["run_order"]
        assert set(ro) == set(RUN_ORDER_KEYS)
        assert ro["order_seed"] == order_seed(camp) and ro["runs"] == 28 and ro["blocks"] == 4
        assert ro["host_load"]["probe_s"] > 0
    # the old order would have put a later seed's policy run before seed s's draws
    pos = {r: metas[r]["run_order"]["position"] for r in metas}
    for seed in range(4):
        last_draw = max(pos[f"tiny__mr-wa__s{seed}__d{d}"] for d in range(2))
        others = [pos[f"tiny__wa__s{t}"] for t in range(4) if t != seed]
        assert not any(pos[f"tiny__wa__s{seed}"] < p < last_draw for p in others)


def test_same_campaign_gives_byte_identical_runs_apart_from_wall_clock(tmp_path):
    camp = _camp(tmp_path, CAMPAIGN.replace("seeds = 4", "seeds = 2"))
    run_campaign(camp, tmp_path / "a", progress=False, protocol=BUNDLED)
    run_campaign(camp, tmp_path / "b", n_jobs=2, progress=False, protocol=BUNDLED)
    fa, fb = run_fingerprints(tmp_path / "a"), run_fingerprints(tmp_path / "b")
    for runs in (fa, fb):        # the plan's hash covers its creation time
        for run in runs.values():
            run["meta"].pop("plan_sha256", None)
            run["meta"]["settings"]["requested"].pop("plan_sha256", None)
    assert fa == fb
    meta = json.loads((tmp_path / "a" / "tiny__wa__s1" / "run.json").read_text())
    assert "started_at" in meta["run_order"]      # present, and only dropped for comparing


class ThreadExecutor:
    """Worker threads that pretend to run jobs; records the order jobs start in."""

    def __init__(self, workers):
        self.pool = cf.ThreadPoolExecutor(workers)
        self.max_in_flight = workers
        self.started: list[str] = []
        self.blocks_seen: set[int] = set()
        self.lock = threading.Lock()
        self.rng = np.random.default_rng(0)

    def _job(self, job, pause):
        with self.lock:
            self.started.append(job.run_id)
            # the first job of each block runs long, so its block's other jobs free their
            # workers while it runs and the next block must start beside it: whether blocks
            # interleave then depends on the scheduler, not on how loaded the machine is
            first_of_block = job.order["block"] not in self.blocks_seen
            self.blocks_seen.add(job.order["block"])
        time.sleep(0.05 if first_of_block else pause)
        return JobOutcome(job.run_id, "ran")

    def submit(self, fn, camp, job, runs_dir):
        assert fn is execute_job and job.order is not None
        return self.pool.submit(self._job, job, float(self.rng.uniform(0.0005, 0.004)))

    def shutdown(self):
        self.pool.shutdown()


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_parallel_blocks_interleave_but_never_separate_a_policy_from_its_draws(tmp_path,
                                                                              workers):
    text = CAMPAIGN.replace("seeds = 4", "seeds = 6").replace(
        "matched_random_draws = 2", "matched_random_draws = 3")
    camp = _camp(tmp_path, text)
    ex = ThreadExecutor(workers)
    s = run_campaign(camp, tmp_path / "runs", executor=ex, progress=False, protocol=BUNDLED)
    assert s.ok
    ordered, _ = ordered_jobs(camp, plan_campaign(camp))
    block = {j.run_id: j.order["block"] for j in ordered}
    pos = {r: i for i, r in enumerate(ex.started)}
    interleaved = False
    for seed in range(6):
        for label in ("wa", "calibrated_offline"):
            ref = f"tiny__{label}__s{seed}"
            last = max(pos[f"tiny__mr-{label}__s{seed}__d{d}"] for d in range(3))
            between = {block[r] for r in ex.started[pos[ref] + 1:last]}
            b = block[ref]
            assert between <= {b - 1, b, b + 1}, (ref, between)
            interleaved |= bool(between - {b})
    assert interleaved                             # workers do run two blocks at once
