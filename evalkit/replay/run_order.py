"""Randomised, blocked execution order for a sweep.

Host load drifts during a campaign, so the order in which runs execute is itself a factor.
Every run of one seed (its no-sync run, its policy runs and their matched-random draws) is one
**block**.  The order of the blocks, and the order of the runs inside each block, are drawn
from the campaign's order seed (:func:`order_seed`, a hash of the campaign fingerprint: the
same campaign gives the same order); inside a block the order respects dependencies (a draw
follows the policy run it takes K from, ``calibrated_offline`` follows its no-sync run).

The scheduler submits runs in that order and only from the first :data:`WINDOW` blocks that
still have unfinished runs (:class:`BlockWindow`), so with any number of workers blocks
interleave across workers while no policy run is separated from its draws by more than one
other block.  Each run records its slot (``run_order`` in run.json: order seed, position,
block, position in the block) and, when it starts, the wall-clock time and the host's load
(1-minute load average and the latency of a fixed CPU probe) for the audit's drift check.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

WINDOW = 2                  # blocks open at once
PROBE_ITERATIONS = 200_000  # the probe: a fixed pure-Python loop (~10 ms on an idle core)


@dataclass(frozen=True)
class Slot:
    """Where one run sits in the execution order."""

    position: int           # 0-based over the runs ordered together
    block: int              # 0-based position of its seed's block
    position_in_block: int
    seed: int               # the replication seed whose block this is


def order_seed(camp) -> int:
    """The campaign's order seed: 32 bits of a hash of its fingerprint."""
    digest = hashlib.sha256(f"run-order:{camp.fingerprint()}".encode()).hexdigest()
    return int(digest[:8], 16)


def _block_order(block: list, rng: np.random.Generator) -> list:
    """A uniformly keyed random order of ``block``'s jobs that respects their dependencies."""
    ids = {j.run_id for j in block}
    keys = rng.random(len(block))
    left = list(range(len(block)))
    placed: set[str] = set()
    out = []
    while left:
        ready = [i for i in left
                 if all(d in placed or d not in ids for d in block[i].depends_on)]
        i = min(ready, key=lambda k: keys[k])
        out.append(block[i])
        placed.add(block[i].run_id)
        left.remove(i)
    return out


def execution_order(jobs: list, seed: int) -> tuple[list, dict[str, Slot]]:
    """Jobs in execution order and each one's :class:`Slot`.

    jobs: the plan (``Job`` s with ``seed``, ``run_id``, ``depends_on``); dependencies stay
    inside a seed.  seed: the order seed.
    """
    blocks: dict[int, list] = {}
    for j in jobs:
        blocks.setdefault(int(j.seed), []).append(j)
    rng = np.random.default_rng(int(seed))
    seeds = list(blocks)
    ordered, slots = [], {}
    for b, k in enumerate(rng.permutation(len(seeds))):
        for i, job in enumerate(_block_order(blocks[seeds[k]], rng)):
            slots[job.run_id] = Slot(len(ordered), b, i, seeds[k])
            ordered.append(job)
    return ordered, slots


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


def slot_record(slot: Slot, seed: int, n_runs: int, n_blocks: int) -> dict:
    """The deterministic part of ``run_order`` in run.json."""
    return {"order_seed": int(seed), "position": slot.position, "runs": int(n_runs),
            "block": slot.block, "blocks": int(n_blocks),
            "position_in_block": slot.position_in_block, "window": WINDOW}


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


def ordered_jobs(camp, jobs: list) -> tuple[list, BlockWindow]:
    """The sweep's jobs in execution order, each carrying its ``run_order`` slot record, and
    the window that gates which blocks may start."""
    import dataclasses

    seed = order_seed(camp)
    ordered, slots = execution_order(jobs, seed)
    n_blocks = 1 + max((s.block for s in slots.values()), default=-1)
    out = [dataclasses.replace(j, order=slot_record(slots[j.run_id], seed, len(ordered),
                                                    n_blocks)) for j in ordered]
    return out, BlockWindow(slots)
