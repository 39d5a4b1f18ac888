"""The run log's order rules (evalkit/runlog/execution_order.py): what run.json records of a
run's slot, sharded or not."""

from __future__ import annotations

from evalkit.runlog.execution_order import WINDOW, Slot, slot_record


def test_slot_record_holds_the_slot_the_window_and_a_shard_when_there_is_one():
    slot = Slot(position=4, block=1, position_in_block=2, seed=7)
    plain = slot_record(slot, 123, 10, 3)
    assert plain == {"order_seed": 123, "position": 4, "runs": 10, "block": 1, "blocks": 3,
                     "position_in_block": 2, "window": WINDOW}
    sharded = slot_record(slot, 123, 10, 3, shard=(1, 3))
    assert sharded == {**plain, "shard": {"index": 1, "count": 3}}
