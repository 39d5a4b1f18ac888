"""The sweep's side of the randomised, blocked execution order.

The order itself (blocks of a seed's runs, drawn from the campaign's order seed, dependencies
respected) is the run log's rule, :mod:`evalkit.runlog.execution_order`, so the audit can
regenerate it; this module draws the campaign's order seed (:func:`order_seed`, a hash of the
campaign fingerprint: the same campaign gives the same order) and runs in that order.

The scheduler submits runs in that order and only from the first ``WINDOW`` blocks that
still have unfinished runs (:class:`BlockWindow`), so with any number of workers blocks
interleave across workers while no policy run is separated from its draws by more than one
other block.  Each run records its slot (``run_order`` in run.json: order seed, position,
block, position in the block) and, when it starts, the wall-clock time and the host's load
(1-minute load average and the latency of a fixed CPU probe) for the audit's drift check.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections import Counter

from evalkit.runlog.execution_order import (WINDOW, Slot, execution_order, order_seed_of,
                                           slot_record)

__all__ = ["PROBE_ITERATIONS", "BlockWindow", "order_seed", "ordered_jobs", "probe_latency_s",
           "start_record"]

PROBE_ITERATIONS = 200_000  # the probe: a fixed pure-Python loop (~10 ms on an idle core)


def order_seed(camp) -> int:
    """The campaign's order seed: from its plan's challenge commitment when the sweep follows
    a plan frozen under one, else from its fingerprint."""
    return order_seed_of(camp.fingerprint(), camp.order_commitment)


class BlockWindow:
    """Which blocks may start runs: the first ``window`` blocks with unfinished runs."""

    def __init__(self, slots: dict[str, Slot], window: int = WINDOW):
        self._block = {rid: s.block for rid, s in slots.items()}
        self._left = Counter(self._block.values())
        self._window = window

    def _open_blocks(self) -> list[int]:
        return sorted(b for b, n in self._left.items() if n > 0)[:self._window]

    def is_open(self, run_id: str) -> bool:
        b = self._block.get(run_id)
        return b is None or b in self._open_blocks()

    def finished(self, run_id: str) -> None:
        b = self._block.get(run_id)
        if b is not None and self._left.get(b, 0) > 0:
            self._left[b] -= 1


def probe_latency_s(iterations: int = PROBE_ITERATIONS) -> float:
    """Seconds a fixed pure-Python loop takes now: higher on a busier host."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(iterations):
        acc += i & 7
    return time.perf_counter() - t0


def start_record() -> dict:
    """The wall-clock part of ``run_order``, measured as the run starts."""
    try:
        load = float(os.getloadavg()[0])
    except (OSError, AttributeError):        # not available on this platform
        load = None
    return {"started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
            "host_load": {"load_1m": load, "probe_s": probe_latency_s()}}


def ordered_jobs(camp, jobs: list, shard=None) -> tuple[list, BlockWindow]:
    """The sweep's jobs in execution order, each carrying its ``run_order`` slot record, and
    the window that gates which blocks may start.  ``shard``: the sweep's
    :class:`~evalkit.replay.campaign.Shard` (``jobs`` are that shard's), recorded with
    each slot."""
    import dataclasses

    seed = order_seed(camp)
    ordered, slots = execution_order(jobs, seed)
    n_blocks = 1 + max((s.block for s in slots.values()), default=-1)
    where = None if shard is None else (shard.index, shard.count)
    out = [dataclasses.replace(j, order=slot_record(slots[j.run_id], seed, len(ordered),
                                                    n_blocks, where)) for j in ordered]
    return out, BlockWindow(slots)
