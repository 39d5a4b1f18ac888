"""The run log's order rules (evalkit/runlog/execution_order.py): what run.json records of a
run's slot, sharded or not."""

from __future__ import annotations

from evalkit.runlog.execution_order import (WINDOW, Slot, dependency_groups, planned_runs,
                                            slot_record)


def test_slot_record_holds_the_slot_the_window_and_a_shard_when_there_is_one():
    slot = Slot(position=4, block=1, position_in_block=2, seed=7)
    plain = slot_record(slot, 123, 10, 3)
    assert plain == {"order_seed": 123, "position": 4, "runs": 10, "block": 1, "blocks": 3,
                     "position_in_block": 2, "window": WINDOW}
    sharded = slot_record(slot, 123, 10, 3, shard=(1, 3))
    assert sharded == {**plain, "shard": {"index": 1, "count": 3}}


def _plan():
    runs = [("ns-0", "no_sync", "no_sync", "NoSync", None),
            ("orc-0", "policy", "orc", "OracleK", None),
            ("base-0", "policy", "base", "Fixed", None),
            ("cal-0", "policy", "cal", "Calibrated", None),
            ("rd-0", "matched_random", "base", "Random", "base"),
            ("lone-0", "policy", "lone", "Fixed", None)]
    return {"campaign": {"settings": {"policies": [
                {"label": "cal", "params": {"k_from": "base"}},
                {"label": "lone", "params": {"k_from": "missing"}}]}},
            "runs": [{"run_id": rid, "role": role, "policy": label, "policy_class": cls,
                      "seed": 0, **({"matched_to": to} if to else {})}
                     for rid, role, label, cls, to in runs]}


def test_each_planned_run_waits_for_the_runs_the_sweep_gives_it():
    deps = {r.run_id: r.depends_on for r in planned_runs(_plan(), lambda cls: cls == "OracleK")}
    assert deps == {"ns-0": [], "orc-0": ["ns-0"], "base-0": [], "cal-0": ["base-0"],
                    "rd-0": ["base-0"], "lone-0": []}


def test_runs_joined_by_dependencies_form_one_group_in_plan_order():
    runs = planned_runs(_plan(), lambda cls: cls == "OracleK")
    groups = [[r.run_id for r in g] for g in dependency_groups(runs)]
    assert groups == [["ns-0", "orc-0"], ["base-0", "cal-0", "rd-0"], ["lone-0"]]


def test_a_kept_attempts_file_names_its_run_and_nothing_else_does():
    from evalkit.runlog.execution_order import kept_attempt_name, kept_attempt_run

    for run_id, n in (("tiny__wa__s0", 1), ("cpu_real__ewma__s12", 3)):
        assert kept_attempt_run(kept_attempt_name(run_id, n)) == run_id
    for name in ("tiny__wa__s0.started.json", "tiny__wa__s0.0.run.json", "run.json",
                 "tiny__wa__s0.run.json", "tiny__wa__s0.x.run.json", "tiny__wa__s0.1.json"):
        assert kept_attempt_run(name) is None, name
