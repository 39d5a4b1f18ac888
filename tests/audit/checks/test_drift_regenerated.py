"""Execution order regenerated from the recorded order seed and the plan's runs
(evalkit/audit/checks/drift.py:regenerated_order_faults): honest sweeps sit where the order
seed puts them; draws re-run later, with their positions or start times edited to look in
order, do not."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from types import SimpleNamespace

import pytest

from evalkit.audit.checks.drift import order_faults, regenerated_order_faults
from evalkit.policies import resolve_policy
from evalkit.replay.campaign import load_campaign, plan_campaign
from evalkit.replay.plan import follow_plan, freeze_plan
from evalkit.replay.plan import planned_runs as plan_rows
from evalkit.replay.run_order import order_seed
from evalkit.replay.sweep import run_campaign
from evalkit.runlog.challenge import issue_challenge
from evalkit.runlog.execution_order import (PlannedRun, execution_order, order_seed_of,
                                            plan_order_seed, planned_runs)
from evalkit.runlog.plan import read_plan

from tests.conftest import REPO
from tests.support.protocols import BUNDLED
from tests.support.tiny_campaign import TINY_SQUARE_WAVE

REAL = REPO / "examples" / "cpu_real" / "runs"


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds")


def _seconds(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def _real():
    """The real CPU campaign's plan and run.json documents (a serial sweep, 54 runs)."""
    metas = {d.name: json.loads((d / "run.json").read_text())
             for d in sorted(REAL.iterdir()) if (d / "run.json").is_file()}
    return read_plan(REAL), metas


def _ctx(plan, metas):
    runset = SimpleNamespace(has_logs=True, run_ids=list(metas), meta=metas.__getitem__,
                             _cache={"plan": plan})
    return SimpleNamespace(runset=runset)


def _by_position(metas):
    return sorted(metas, key=lambda r: metas[r]["run_order"]["position"])


def test_the_real_campaign_sits_where_its_order_seed_puts_it():
    plan, metas = _real()
    assert order_faults(_ctx(plan, metas)) == []
    assert {m["run_order"]["order_seed"] for m in metas.values()} == {
        order_seed_of(plan["campaign"]["fingerprint"])}


def _rerun_draws_later(metas, minutes=10.0):
    """Every draw executed again ``minutes`` after the campaign ended (the host busier by
    then), in the recorded order; returns the new run.json documents, times true."""
    out = copy.deepcopy(metas)
    end = max(_seconds(m["created_at"]) for m in metas.values())
    t = end + 60 * minutes
    for rid in _by_position(metas):
        if out[rid]["role"] != "matched_random":
            continue
        span = _seconds(metas[rid]["created_at"]) - _seconds(metas[rid]["run_order"]
                                                              ["started_at"])
        out[rid]["run_order"]["started_at"] = _stamp(t)
        out[rid]["created_at"] = _stamp(t + span)
        t += span + 1
    return out


def test_draws_rerun_later_with_positions_edited_to_match_their_times():
    """The draws moved to the end of the recorded order: start times follow the positions,
    one order seed, no slot shared, so only the regenerated order contradicts them."""
    plan, metas = _real()
    later = _rerun_draws_later(metas)
    by_start = sorted(later, key=lambda r: later[r]["run_order"]["started_at"])
    for pos, rid in enumerate(by_start):
        later[rid]["run_order"]["position"] = pos
    faults = order_faults(_ctx(plan, later))
    assert any("not where the order seed puts them" in f for f in faults), faults


def test_draws_rerun_later_with_start_times_edited_back_into_their_slots():
    """Positions untouched, each draw's start time edited back to its slot; its write time
    is the true, later one, so later blocks started while its block was still open."""
    plan, metas = _real()
    later = _rerun_draws_later(metas)
    for rid, meta in later.items():
        meta["run_order"]["started_at"] = metas[rid]["run_order"]["started_at"]
    faults = order_faults(_ctx(plan, later))
    assert any("started outside the sweep's block window" in f for f in faults), faults
    assert not any("before a run ahead of it" in f or "not where" in f for f in faults)


def test_a_recorded_window_wide_enough_to_excuse_the_rerun_does_not():
    """The same re-run draws, their records also saying the sweep opened 99 blocks at once:
    the window is the sweep's constant, not the run's word, so the early starts still count
    and the widened window is named."""
    plan, metas = _real()
    later = _rerun_draws_later(metas)
    for rid, meta in later.items():
        meta["run_order"]["started_at"] = metas[rid]["run_order"]["started_at"]
        meta["run_order"]["window"] = 99
    faults = order_faults(_ctx(plan, later))
    assert any("started outside the sweep's block window" in f for f in faults), faults
    assert any("record a block window other than the sweep's 2" in f for f in faults), faults


def test_a_chosen_order_seed_is_not_the_one_the_plan_gives():
    """Every run re-recorded under another order seed (one the party found convenient), with
    the positions that seed gives and times to match."""
    plan, metas = _real()
    chosen = order_seed_of(plan["campaign"]["fingerprint"]) + 1
    _, slots = execution_order(planned_runs(plan, lambda name: False), chosen)
    starts = sorted(_seconds(m["run_order"]["started_at"]) for m in metas.values())
    edited = copy.deepcopy(metas)
    for rid, meta in edited.items():
        slot, span = slots[rid], 40.0
        meta["run_order"].update(order_seed=chosen, position=slot.position, block=slot.block,
                                 position_in_block=slot.position_in_block,
                                 started_at=_stamp(starts[slot.position]))
        meta["created_at"] = _stamp(starts[slot.position] + span)
    faults = order_faults(_ctx(plan, edited))
    assert any(f"gives {chosen - 1} (from its campaign fingerprint)" in f for f in faults), \
        faults


def test_a_recorded_group_size_the_plan_does_not_have():
    plan, metas = _real()
    edited = copy.deepcopy(metas)
    for meta in edited.values():
        meta["run_order"]["runs"] = 30
    faults = regenerated_order_faults(plan, _records(edited))
    assert any("record 30 runs ordered together; the plan has 54" in f for f in faults), faults


def _records(metas):
    return {rid: {"started": _seconds(m["run_order"]["started_at"]),
                  "written": _seconds(m["created_at"]),
                  **{k: m["run_order"][k] for k in ("order_seed", "position", "block",
                                                    "position_in_block", "runs", "blocks",
                                                    "window")}}
            for rid, m in metas.items()}


def test_batches_of_a_sequential_campaign_regenerate_batch_by_batch():
    """A sequential campaign sweeps its seeds batch by batch; each batch is ordered on its
    own (positions restart), and regenerates as such."""
    plan, _ = _real()
    runs = planned_runs(plan, lambda name: False)
    seed = order_seed_of(plan["campaign"]["fingerprint"])
    records, t = {}, 1.8e9
    for batch in ([6, 0, 1], [2, 3, 4], [5, 7, 8]):
        members = [r for r in runs if r.seed in batch]
        ordered, slots = execution_order(members, seed)
        for r in ordered:
            s = slots[r.run_id]
            records[r.run_id] = {"started": t, "written": t + 50, "order_seed": seed,
                                 "position": s.position, "block": s.block,
                                 "position_in_block": s.position_in_block,
                                 "runs": len(members), "blocks": 3, "window": 2}
            t += 51
    assert regenerated_order_faults(plan, records) == []
    # the first batch's first two runs trade slots (their start times a minute apart)
    a, b = sorted(records, key=lambda r: records[r]["started"])[:2]
    for key in ("position", "block", "position_in_block"):
        records[a][key], records[b][key] = records[b][key], records[a][key]
    faults = regenerated_order_faults(plan, records)
    assert len(faults) == 1 and "2 run(s) are not where the order seed puts them" in faults[0]


def test_a_sequential_campaigns_batches_pass_the_whole_check():
    """Positions restart in every batch: with a plan the check orders batch by batch, so
    the batches' repeated positions are not a shared slot and a later batch's start times
    are not runs started ahead of their order."""
    plan, metas = _real()
    runs = planned_runs(plan, lambda name: False)
    seed = order_seed_of(plan["campaign"]["fingerprint"])
    start = _seconds(plan["created_at"]) + 60
    edited = copy.deepcopy(metas)
    for batch in ([6, 0, 1], [2, 3, 4], [5, 7, 8]):
        ordered, slots = execution_order([r for r in runs if r.seed in batch], seed)
        for r in ordered:
            s = slots[r.run_id]
            edited[r.run_id]["run_order"].update(
                position=s.position, block=s.block, position_in_block=s.position_in_block,
                runs=len(ordered), blocks=3, started_at=_stamp(start))
            edited[r.run_id]["created_at"] = _stamp(start + 50)
            start += 51
    assert order_faults(_ctx(plan, edited)) == []
    late = next(r for r in edited if edited[r]["run_order"]["position"] == 3)
    edited[late]["run_order"]["started_at"] = _stamp(start + 600)
    edited[late]["created_at"] = _stamp(start + 650)
    faults = order_faults(_ctx(plan, edited))
    assert any("started before runs ahead of them" in f for f in faults), faults


def test_under_a_challenge_the_order_seed_is_the_commitments(tmp_path):
    """A plan frozen under a reviewer's challenge: the sweep (following the plan) and the
    audit (reading it) both draw the order from the commitment, not from the campaign file,
    which the judged party could tune for a lucky order before asking for the challenge."""
    path = tmp_path / "c.toml"
    path.write_text(TINY_SQUARE_WAVE)
    challenge = issue_challenge(hashlib.sha256(path.read_bytes()).hexdigest(), BUNDLED.name,
                                BUNDLED.content_sha256)
    plan = freeze_plan(path, BUNDLED, challenge)
    plain = order_seed_of(plan["campaign"]["fingerprint"])
    followed = follow_plan(load_campaign(path), plan)
    assert order_seed(followed) == plan_order_seed(plan) != plain
    assert order_seed(follow_plan(load_campaign(path), freeze_plan(path, BUNDLED))) == plain
    runs = planned_runs(plan, lambda name: resolve_policy(name).oracle)
    ordered, slots = execution_order(runs, plain)
    records = {r.run_id: {"started": 1.8e9 + 60 * s.position, "written": 1.8e9 + 60 * s.position
                          + 50, "order_seed": plain, "position": s.position, "block": s.block,
                          "position_in_block": s.position_in_block, "runs": len(runs),
                          "blocks": 2, "window": 2} for r, s in
               ((r, slots[r.run_id]) for r in ordered)}
    faults = regenerated_order_faults(plan, records)
    assert any("(from its challenge commitment)" in f for f in faults), faults


def test_the_order_does_not_depend_on_how_the_seeds_are_listed():
    """A plan frozen under a challenge lists its seeds in the derived order, the sweep's jobs
    in the campaign file's: both give one order."""
    plan, _ = _real()
    runs = planned_runs(plan, lambda name: False)
    listed = sorted(runs, key=lambda r: (-r.seed, runs.index(r)))     # seeds reversed
    assert [r.seed for r in listed][:1] != [r.seed for r in runs][:1]
    seed = order_seed_of(plan["campaign"]["fingerprint"])
    assert execution_order(listed, seed)[1] == execution_order(runs, seed)[1]


@pytest.mark.parametrize("draws", [1, 2])
def test_dependencies_read_from_the_plan_are_the_sweeps(tmp_path, draws):
    """planned_runs rebuilds from plan.json the dependencies plan_campaign gives the jobs
    (an oracle policy after its no-sync run, k_from, draws after their policy run)."""
    path = tmp_path / "c.toml"
    path.write_text(TINY_SQUARE_WAVE.replace("matched_random_draws = 2",
                                             f"matched_random_draws = {draws}"))
    camp = load_campaign(path)
    rebuilt = planned_runs({"campaign": {"settings": {"policies": [
        {"label": p.label, "params": dict(p.params)} for p in camp.policies]}},
        "runs": plan_rows(camp)}, lambda name: resolve_policy(name).oracle)
    assert [(r.run_id, r.seed, sorted(r.depends_on)) for r in rebuilt] == [
        (j.run_id, j.seed, sorted(j.depends_on)) for j in plan_campaign(camp)]
    assert any(j.depends_on and j.kind == "policy" for j in plan_campaign(camp))


@pytest.mark.slow
def test_a_parallel_sweep_passes_the_regenerated_order(tmp_path):
    """Two workers (blocks may interleave, a ready run may start before a waiting one ahead
    of it): nothing is flagged."""
    path = tmp_path / "c.toml"
    path.write_text(TINY_SQUARE_WAVE.replace("seeds = 2", "seeds = 3"))
    s = run_campaign(load_campaign(path), tmp_path / "runs", n_jobs=2, progress=False,
                     protocol=BUNDLED)
    assert s.ok
    metas = {d.name: json.loads((d / "run.json").read_text())
             for d in (tmp_path / "runs").iterdir() if (d / "run.json").is_file()}
    plan = read_plan(tmp_path / "runs")
    assert regenerated_order_faults(plan, _records(metas)) == []
    assert order_faults(_ctx(plan, metas)) == []


def test_runs_the_plan_does_not_have_and_seeds_split_across_orders():
    plan, metas = _real()
    records = _records(metas)
    records["cpu_real__ewma__s99"] = dict(records["cpu_real__ewma__s0"])
    records["cpu_real__ewma__s1"]["runs"] = 6
    faults = regenerated_order_faults(plan, records)
    assert any("1 run(s) with run-order records are not in the plan (first: "
               "cpu_real__ewma__s99)" in f for f in faults), faults
    assert any("the runs of seed 1 record 2 different counts" in f for f in faults), faults


def test_a_planned_policy_that_does_not_resolve_fails_closed():
    plan, metas = _real()
    plan = copy.deepcopy(plan)
    for run in plan["runs"]:
        if run["policy_class"] == "ewma":
            run["policy_class"] = "no_such_policy_anywhere"
    faults = regenerated_order_faults(plan, _records(metas))
    assert faults and "the order cannot be regenerated" in faults[0], faults


def test_a_sharded_sweep_regenerates_shard_by_shard(tmp_path):
    """Each shard (``sweep --shard I/N``) orders its own runs, which need not be whole seeds,
    and records the shard: the honest campaign passes, a run moved within its shard fails,
    and without the shard in the records the same honest runs read as shared slots."""
    from evalkit.replay.campaign import Shard

    path = tmp_path / "c.toml"
    # two independent policies: their groups (a policy run and its draws) split the seeds
    path.write_text(TINY_SQUARE_WAVE.replace("seeds = 2", "seeds = 3").replace(
        'name = "calibrated_offline"\nparams = { k_from = "wa" }', 'name = "ewma"'))
    for i in range(2):
        s = run_campaign(load_campaign(path), tmp_path / "runs", shard=Shard(i, 2),
                         progress=False, protocol=BUNDLED)
        assert s.ok
    metas = {d.name: json.loads((d / "run.json").read_text())
             for d in (tmp_path / "runs").iterdir() if (d / "run.json").is_file()}
    plan = read_plan(tmp_path / "runs")
    shards = {m["run_order"]["shard"]["index"] for m in metas.values()}
    assert shards == {0, 1} and {m["run_order"]["shard"]["count"] for m in metas.values()} == {2}
    seeds_of = [{m["seed"] for m in metas.values() if m["run_order"]["shard"]["index"] == i}
                for i in (0, 1)]
    assert seeds_of[0] & seeds_of[1]                    # a seed's runs in both shards
    assert order_faults(_ctx(plan, metas)) == []
    # without the shard, positions restarting in each shard contradict one order
    unsharded = copy.deepcopy(metas)
    for m in unsharded.values():
        del m["run_order"]["shard"]
    assert order_faults(_ctx(plan, unsharded)) != []
    # without a plan each shard is still one order: no shared slot
    assert order_faults(_ctx(None, metas)) == []
    assert any("position 0 is recorded by 2 runs" in f
               for f in order_faults(_ctx(None, unsharded)))
    # two runs of shard 0 trade slots
    moved = copy.deepcopy(metas)
    a, b = sorted((r for r in moved if moved[r]["run_order"]["shard"]["index"] == 0),
                  key=lambda r: moved[r]["run_order"]["position"])[:2]
    for key in ("position", "block", "position_in_block"):
        moved[a]["run_order"][key], moved[b]["run_order"][key] = (
            moved[b]["run_order"][key], moved[a]["run_order"][key])
    faults = order_faults(_ctx(plan, moved))
    assert any("2 run(s) are not where the order seed puts them" in f for f in faults), faults
    # a run claiming another shard is named: the plan's sharding puts it elsewhere
    strayed = copy.deepcopy(metas)
    strayed[a]["run_order"]["shard"]["index"] = 1
    faults = order_faults(_ctx(plan, strayed))
    assert any("record shard 1/2 but the plan's sharding puts them in another" in f
               for f in faults), faults
    # runs re-done later as a shard of their own, in the order that shard would give them:
    # the shard's members come from the plan, not from the runs that claim it
    redone = copy.deepcopy(metas)
    draws = sorted(r for r in redone if redone[r]["role"] == "matched_random")[:2]
    members = [PlannedRun(r, redone[r]["seed"]) for r in draws]
    _, slots = execution_order(members, plan_order_seed(plan))
    for r in draws:
        slot = slots[r]
        redone[r]["run_order"].update(shard={"index": 0, "count": 1}, position=slot.position,
                                      block=slot.block, position_in_block=slot.position_in_block,
                                      runs=2, blocks=1 + max(x.block for x in slots.values()))
    faults = order_faults(_ctx(plan, redone))
    everything = len(plan["runs"])
    assert any(f.startswith("the runs of shard 0/1 record") and
               f"the plan gives that shard {everything} runs" in f for f in faults), faults
    impossible = copy.deepcopy(metas)
    impossible[a]["run_order"]["shard"] = {"index": 2, "count": 2}
    faults = order_faults(_ctx(plan, impossible))
    assert any("record shard 2/2, which no sweep has" in f for f in faults), faults


def _blocks(plan, metas) -> dict[int, list[str]]:
    """The real campaign's runs by the block the order seed puts them in, in order."""
    _, slots = execution_order(planned_runs(plan, lambda name: False),
                               order_seed_of(plan["campaign"]["fingerprint"]))
    blocks: dict[int, list[str]] = {}
    for rid in _by_position(metas):
        blocks.setdefault(slots[rid].block, []).append(rid)
    return blocks


def test_a_run_may_start_while_one_earlier_block_is_open_but_not_two():
    """The sweep opens 2 blocks at once: a run may start while the block before its own
    still has a run to write, never while two earlier blocks do (the window's boundary)."""
    plan, metas = _real()
    blocks, b = _blocks(plan, metas), 3
    first = blocks[b][0]
    late = _stamp(_seconds(metas[first]["run_order"]["started_at"]) + 600)

    def written_late(*open_blocks):
        edited = copy.deepcopy(metas)
        for block in open_blocks:
            edited[blocks[block][-1]]["created_at"] = late
        return [f for f in order_faults(_ctx(plan, edited))
                if "started outside the sweep's block window" in f]

    assert written_late(b - 1) == []
    (fault,) = written_late(b - 2, b - 1)
    assert f"{first} (block {b}) started while block(s) {b - 2}, {b - 1}" in fault


def test_a_block_written_exactly_at_the_slack_after_a_start_is_not_open():
    """Written ORDER_SLACK_S after the run started counts as written before it (the clocks'
    tolerance), so with the block before it still open the run is within the window."""
    from evalkit.audit.checks.drift import ORDER_SLACK_S

    plan, metas = _real()
    blocks, b = _blocks(plan, metas), 3
    first = blocks[b][0]
    started = _seconds(metas[first]["run_order"]["started_at"])
    edited = copy.deepcopy(metas)
    edited[blocks[b - 2][-1]]["created_at"] = _stamp(started + ORDER_SLACK_S)
    edited[blocks[b - 1][-1]]["created_at"] = _stamp(started + 600)
    assert _seconds(edited[blocks[b - 2][-1]]["created_at"]) == started + ORDER_SLACK_S
    assert [f for f in order_faults(_ctx(plan, edited))
            if "started outside the sweep's block window" in f] == []
    edited[blocks[b - 2][-1]]["created_at"] = _stamp(started + ORDER_SLACK_S + 0.001)
    assert [f for f in order_faults(_ctx(plan, edited))
            if "started outside the sweep's block window" in f]
