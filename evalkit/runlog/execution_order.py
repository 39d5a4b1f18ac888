"""The randomised, blocked execution order a run log's ``run_order`` records, as a pure
function of the planned runs and the order seed.

It lives in the run log's layer, not in the sweep, because two parties need the same rule:
the sweep (:mod:`evalkit.replay.run_order`) draws the order and runs in it, and the audit
regenerates it from the recorded order seed and the plan's runs to check what the runs say
about where and when they executed.  The audit may not import the replay, and the rule is a
property of the format (what a recorded ``position`` means), so it sits here, beside the plan
format it reads (:mod:`evalkit.runlog.plan`).

Every run of one replication seed is one **block**.  The order of the blocks, and the order
of the runs inside each block, are drawn from the order seed; inside a block the order
respects dependencies (a draw follows the policy run it takes K from, ``calibrated_offline``
follows its no-sync run).  The order depends on the set of runs and on their order inside
each seed, not on the order the seeds are listed in (a plan frozen under a challenge lists
them in its derived order).

The same holds for the rules the order rests on: which runs a planned run waits for
(:func:`dependencies`), how ``sweep --shard I/N`` splits the plan (:func:`shard_members`),
and where a sweep keeps the records of a failed attempt it re-ran (:data:`ATTEMPTS_DIR`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ATTEMPTS_DIR", "WINDOW", "PlannedRun", "Slot", "dependencies", "dependency_groups",
           "execution_order", "kept_attempt_name", "kept_attempt_run", "order_seed_of",
           "plan_order_seed",
           "planned_runs", "recorded_attempts", "shard_members", "slot_record"]

WINDOW = 2                  # blocks open at once
# where a sweep keeps the run.json of each failed attempt it re-ran (<run>.<n>.run.json)
ATTEMPTS_DIR = ".attempts"


def kept_attempt_name(run_id: str, n: int) -> str:
    """The file name, inside :data:`ATTEMPTS_DIR`, of the run.json of attempt ``n`` (1-based)
    at ``run_id``."""
    return f"{run_id}.{n}.run.json"


def kept_attempt_run(name: str) -> str | None:
    """The run id whose attempt :func:`kept_attempt_name` named ``name``; None when ``name``
    is no kept attempt's file (a sweep's marker, say)."""
    stem, dot, n = name.removesuffix(".run.json").rpartition(".")
    if not name.endswith(".run.json") or not dot or not n.isdigit() or int(n) < 1:
        return None
    return stem


def recorded_attempts(order) -> list[dict]:
    """The failed attempts a ``run_order`` record lists (``attempts``), oldest first."""
    attempts = order.get("attempts") if isinstance(order, dict) else None
    return [a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else []


@dataclass(frozen=True)
class Slot:
    """Where one run sits in the execution order."""

    position: int           # 0-based over the runs ordered together
    block: int              # 0-based position of its seed's block
    position_in_block: int
    seed: int               # the replication seed whose block this is


@dataclass(frozen=True)
class PlannedRun:
    """What the order needs of one planned run."""

    run_id: str
    seed: int
    depends_on: list[str] = field(default_factory=list)


def order_seed_of(fingerprint: str, commitment: str | None = None) -> int:
    """The order seed: 32 bits of a hash of the plan's challenge commitment when it was frozen
    under one (the reviewer's nonce decides the order, so a campaign file cannot be tuned for
    a lucky one), else of the campaign's fingerprint."""
    source = f"commitment:{commitment}" if commitment else fingerprint
    digest = hashlib.sha256(f"run-order:{source}".encode()).hexdigest()
    return int(digest[:8], 16)


def plan_order_seed(plan: dict) -> int | None:
    """The order seed a plan (``plan.json``) fixes; None when it records no fingerprint."""
    fingerprint = (plan.get("campaign") or {}).get("fingerprint")
    if not isinstance(fingerprint, str):
        return None
    block = plan.get("challenge") if isinstance(plan.get("challenge"), dict) else {}
    commitment = block.get("commitment")
    return order_seed_of(fingerprint, commitment if isinstance(commitment, str) else None)


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

    jobs: anything with ``seed``, ``run_id`` and ``depends_on`` (the sweep's ``Job`` s, or
    :class:`PlannedRun` s); dependencies stay inside a seed.  seed: the order seed.
    """
    blocks: dict[int, list] = {}
    for j in jobs:
        blocks.setdefault(int(j.seed), []).append(j)
    rng = np.random.default_rng(int(seed))
    seeds = sorted(blocks)
    ordered, slots = [], {}
    for b, k in enumerate(rng.permutation(len(seeds))):
        for i, job in enumerate(_block_order(blocks[seeds[k]], rng)):
            slots[job.run_id] = Slot(len(ordered), b, i, seeds[k])
            ordered.append(job)
    return ordered, slots


def slot_record(slot: Slot, seed: int, n_runs: int, n_blocks: int,
                shard: tuple[int, int] | None = None) -> dict:
    """The deterministic part of ``run_order`` in run.json.  ``shard``: ``(index, count)``
    of a sharded sweep, whose runs are ordered shard by shard (positions restart in each), so
    the audit regenerates each shard's order from the runs that record it."""
    record = {"order_seed": int(seed), "position": slot.position, "runs": int(n_runs),
              "block": slot.block, "blocks": int(n_blocks),
              "position_in_block": slot.position_in_block, "window": WINDOW}
    if shard is not None:
        record["shard"] = {"index": int(shard[0]), "count": int(shard[1])}
    return record


def dependencies(role: str, seed: int, run_id, *, oracle: bool = False,
                 k_from: str | None = None, matched_to: str | None = None) -> list[str]:
    """The runs a planned run waits for -- the sweep's rule, which the audit regenerates the
    order with: a policy run whose policy is an oracle follows its seed's no-sync run, one
    with ``k_from`` follows the policy run it takes K from, a matched-random draw follows the
    policy run it is matched to.  ``run_id(role, label, seed)`` names a run (None when there
    is none)."""
    deps = []
    if role == "policy":
        if oracle:
            deps.append(run_id("no_sync", "no_sync", seed))
        if k_from is not None:
            deps.append(run_id("policy", str(k_from), seed))
    elif role == "matched_random":
        deps.append(run_id("policy", str(matched_to), seed))
    return [d for d in deps if d is not None]


def planned_runs(plan: dict, is_oracle) -> list[PlannedRun]:
    """The plan's runs (``plan.json``, :mod:`evalkit.runlog.plan`) with the dependencies the
    sweep gives them, in plan order: a policy run whose policy is an oracle
    (``is_oracle(policy_class)``) follows its seed's no-sync run, one with ``k_from`` follows
    the policy run it takes K from, a draw follows the policy run it is matched to."""
    settings = (plan.get("campaign") or {}).get("settings") or {}
    k_from = {str(p.get("label")): (p.get("params") or {}).get("k_from")
              for p in settings.get("policies") or []}
    ids = {(str(r.get("role")), str(r.get("policy")), int(r["seed"])): str(r["run_id"])
           for r in plan.get("runs") or []}
    out = []
    for r in plan.get("runs") or []:
        seed, role = int(r["seed"]), str(r.get("role"))
        deps = dependencies(role, seed, lambda *key: ids.get(key),
                            oracle=role == "policy" and is_oracle(str(r.get("policy_class"))),
                            k_from=k_from.get(str(r.get("policy"))),
                            matched_to=r.get("matched_to"))
        out.append(PlannedRun(str(r["run_id"]), seed, deps))
    return out


def dependency_groups(runs: list) -> list[list]:
    """Runs (anything with ``run_id`` and ``depends_on``) joined by dependencies, in plan
    order; groups ordered by their first run.  A policy run and its matched-random draws form
    one group; a ``calibrated_offline`` run joins the group of the no-sync run and the policy
    run it takes K from (same seed)."""
    parent = {r.run_id: r.run_id for r in runs}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for r in runs:
        for d in r.depends_on:
            if d in parent:
                a, b = root(r.run_id), root(d)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[str, list] = {}
    for r in runs:
        groups.setdefault(root(r.run_id), []).append(r)
    return list(groups.values())


def shard_members(runs: list, index: int, count: int) -> list:
    """The runs of shard ``index`` of ``count`` (``evalkit sweep --shard I/N``): a
    deterministic partition by dependency group, so every draw runs in its reference run's
    shard.  Groups are dealt largest first (ties broken by a hash of the group's first run
    id) to the shard with the fewest runs so far (ties: lowest index); plan order is kept.
    The sweep shards by it and the audit regenerates a sharded sweep's membership with it."""
    groups = dependency_groups(runs)
    order = sorted(groups, key=lambda g: (-len(g), hashlib.sha256(g[0].run_id.encode())
                                          .hexdigest()))
    load = [0] * count
    mine: set[str] = set()
    for g in order:
        target = min(range(count), key=lambda s: (load[s], s))
        load[target] += len(g)
        if target == index:
            mine.update(r.run_id for r in g)
    return [r for r in runs if r.run_id in mine]
