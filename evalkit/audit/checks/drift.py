"""Execution drift: is a claim's effect explained by the order its runs executed in, or by
the host's load when they ran?

Host load drifts during a campaign.  When a seed's policy run executes at a different time,
or on a busier or idler host, than its matched-random draws, the head-to-head difference d
carries that drift.  (A campaign swept with every seed's policy runs first and the draws
10-20 minutes later, on a busier host, "won" 10/10 seeds that way.)

Per claim, over its independent seeds, with each run's execution time (``run_order.started_at``
from run.json; without run-order records the time the run was written, its ``created_at``), its
trainer step rate and the latency of the host probe a sweep records (``run_order.host_load``):

1. **Load imbalance** (step rate, probe latency): per seed the relative difference
   ``r_s = (mean over draws - policy) / policy``; an imbalance is a median ``|r_s|`` above
   the tolerance *and* an exact two-sided sign-flip test on ``r`` reaching alpha (the policy
   runs systematically ran under a different load than their draws).  A trainer step-rate
   imbalance blocks (the runs were not like for like); a probe-latency imbalance (a short CPU
   loop, noisy on a shared host) blocks only when V also depends on the probe latency (its
   slope in 2. is significant at alpha).
2. **Drift regression**: V regressed, with seed fixed effects, on a policy indicator and one
   drift variable z (execution time in minutes, step rate, probe latency).  The drift-adjusted
   gain ``G_adj`` is minus the indicator's coefficient; the part of ``G = mean d`` explained
   by drift is ``G - G_adj``.  Blocked when that part is at least ``max_explained_share`` of
   G *and* z's coefficient is significant at alpha (V does drift with z).

Runs without run-order records are evaluated on their written-at times and step rates, and the
result says so; with ``require_run_order = true`` the check fails closed for them.  Nothing
to compare (no times, no step rates: a summary table) is not evaluable.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math

import numpy as np
import pandas as pd

from evalkit.audit.checks.core import Outcome, _fmt, _listing, check, not_evaluable
from evalkit.audit.checks.plan import campaign_plan
from evalkit.document.words import drift_share_words, pp
from evalkit.errors import InputError
from evalkit.fileread import read_bounded
from evalkit.limits import MAX_RUN_JSON_BYTES
from evalkit.policies import resolve_policy
from evalkit.runlog.execution_order import (ATTEMPTS_DIR, WINDOW, execution_order,
                                            kept_attempt_name, plan_order_seed, planned_runs,
                                            recorded_attempts, shard_members)
from evalkit.stats import sign_flip_test

__all__ = ["claim_timing", "drift_adjusted_gain", "execution_drift", "order_faults",
           "regenerated_order_faults"]

# clocks of the hosts a campaign ran on may disagree by this much
CLOCK_SKEW_S = 300.0
# with several workers a run may start a little before the one submitted just ahead of it
ORDER_SLACK_S = 60.0

LOAD_MEASURES = (("step_rate", "trainer step rate", "load_rel_tol"),
                 ("probe_s", "host probe latency", "probe_rel_tol"))


def _parse_time(text) -> float:
    if not isinstance(text, str) or not text:
        return math.nan
    try:
        stamp = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return math.nan
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return stamp.timestamp()


def _run_record(ctx, run_id: str) -> dict:
    """Execution time (s since epoch), its source, position and probe latency of one run."""
    if not ctx.runset.has_logs:
        return {"t": math.nan, "time_source": None, "position": None, "probe_s": math.nan}
    meta = ctx._meta(run_id)
    order = meta.get("run_order") if isinstance(meta.get("run_order"), dict) else None
    if order is not None:
        load = order.get("host_load") if isinstance(order.get("host_load"), dict) else {}
        probe = load.get("probe_s")
        return {"t": _parse_time(order.get("started_at")), "time_source": "run_order",
                "position": order.get("position"),
                "probe_s": float(probe) if isinstance(probe, (int, float)) else math.nan}
    return {"t": _parse_time(meta.get("created_at")), "time_source": "created_at",
            "position": None, "probe_s": math.nan}


def order_faults(ctx) -> list[str]:
    """What the campaign's execution records contradict: a run started before the plan it
    carries was frozen, or after it was written; runs of one campaign under several order
    seeds or in one slot; start times against the recorded order (a run starting more than
    :data:`ORDER_SLACK_S` before the run ahead of it in the order); with a plan, the order
    its order seed regenerates (:func:`regenerated_order_faults`)."""
    runset = ctx.runset
    if not runset.has_logs:
        return []
    plan = campaign_plan(runset)
    frozen = _parse_time(plan.get("created_at")) if plan else math.nan
    faults, slots, records = [], {}, {}
    for run_id in getattr(runset, "run_ids", ()):     # a stand-in run set may have none
        meta = runset.meta(run_id)
        order = meta.get("run_order")
        if not isinstance(order, dict):
            continue
        started = _parse_time(order.get("started_at"))
        written = _parse_time(meta.get("created_at"))
        if started < frozen - CLOCK_SKEW_S:
            faults.append(f"{run_id} started {order.get('started_at')}, before the plan was "
                          f"frozen ({plan.get('created_at')})")
        if started > written + CLOCK_SKEW_S:
            faults.append(f"{run_id} started {order.get('started_at')}, after it was written "
                          f"({meta.get('created_at')})")
        # a sharded sweep orders each shard's runs apart (positions restart in each)
        slots.setdefault((order.get("order_seed"), _shard_of(order)), []).append(
            (order.get("position"), started, run_id))
        slot_started, slot_written, attempts = started, written, recorded_attempts(order)
        if attempts:        # a re-run sits at the slot where its first attempt started
            slot_started = _parse_time(attempts[0].get("started_at"))
            slot_written = _parse_time(attempts[0].get("written_at"))
            faults += _rerun_faults(runset, run_id, order, started, attempts)
        records[run_id] = {"started": slot_started, "written": slot_written,
                           "ran_from": started, "ran_until": written, "rerun": bool(attempts),
                           "deps": _recorded_deps(meta), "shard": _shard_of(order),
                           **{k: order.get(k) for k in ("order_seed", "position", "block",
                                                        "position_in_block", "runs", "blocks",
                                                        "window")}}
    regenerable = bool(plan) and plan_order_seed(plan) is not None
    faults += _mark_displaced(records, _planned_deps(plan) if regenerable else None)
    order_seeds = sorted({seed for seed, _ in slots}, key=str)
    if len(order_seeds) > 1:
        faults.append(f"the runs record {len(order_seeds)} order seeds "
                      f"({', '.join(str(k) for k in order_seeds)}): one campaign "
                      "has one order")
    # with a plan the order is regenerated group by group (a sequential campaign's batches
    # each start at position 0); without one, each order seed's runs are one order
    for (seed, shard), runs in ([] if regenerable else slots.items()):
        positions = [p for p, _, _ in runs]
        twice = sorted({p for p in positions if positions.count(p) > 1}, key=str)
        if twice:
            where = "" if shard is None else f", shard {shard[0]}/{shard[1]}"
            faults.append(f"order seed {seed}{where}: position {twice[0]} is recorded by "
                          f"{positions.count(twice[0])} runs")
        ordered = sorted(((p, records[r]["started"], r) for p, _, r in runs
                          if isinstance(p, int) and not records[r]["displaced"]),
                         key=lambda r: r[0])
        for pos, run_id, behind in _started_behind(ordered):
            faults.append(f"{run_id} (position {pos}) started {behind:.0f} s "
                          "before a run ahead of it in the recorded order")
    if regenerable:
        faults += regenerated_order_faults(plan, records)
    return faults


def _rerun_faults(runset, run_id: str, order: dict, started: float,
                  attempts: list[dict]) -> list[str]:
    """What a re-run's record of its failed attempts contradicts: an attempt with no error
    or no start time, at another slot, started before the attempt ahead of it ended; the
    re-run starting before its last attempt ended; a write time without the sha256 of what was
    written, or the reverse; a kept copy of an attempt's run.json
    (``<runs>/.attempts/<run>.<n>.run.json``) that is missing where the record names its
    sha256, not the one recorded, or not failed.  (Without its kept copy an attempt is only
    the re-run's word: a complete run re-done until it won would pass as a failed one.)"""
    faults, ended = [], -math.inf
    root = getattr(runset, "runs_dir", None)
    for n, attempt in enumerate(attempts, 1):
        name = f"{run_id} attempt {n}"
        began = _parse_time(attempt.get("started_at"))
        if not str(attempt.get("error") or "").strip():
            faults.append(f"{name} records no error: only a failed run is re-run")
        if not np.isfinite(began):
            faults.append(f"{name} records no start time")
        if attempt.get("position") != order.get("position"):
            faults.append(f"{name} was at position {attempt.get('position')!r}, the re-run "
                          f"at {order.get('position')!r}: a re-run takes its attempt's slot")
        if began < ended - ORDER_SLACK_S:
            faults.append(f"{name} started before attempt {n - 1} was written")
        ended = max(ended, _parse_time(attempt.get("written_at")))
        if bool(attempt.get("written_at")) != bool(attempt.get("run_json_sha256")):
            faults.append(f"{name} records " + ("a write time without its run.json's sha256"
                                                if attempt.get("written_at") else
                                                "a run.json sha256 without a write time")
                          + ": a sweep records both or, stopped before writing, neither")
        kept = root / ATTEMPTS_DIR / kept_attempt_name(run_id, n) if root is not None else None
        if kept is not None and attempt.get("run_json_sha256") and not kept.is_file():
            faults.append(f"{name}: its run.json ({ATTEMPTS_DIR}/{kept.name}, sha256 recorded) "
                          "is not kept: the failed attempt is only the re-run's word (copy "
                          f"the runs directory with its {ATTEMPTS_DIR} folder)")
        if kept is not None and kept.is_file():
            try:
                raw = read_bounded(kept, MAX_RUN_JSON_BYTES, "a kept attempt's run.json")
            except InputError as exc:
                faults.append(f"{name}: the kept run.json cannot be read ({exc.message})")
                continue
            if hashlib.sha256(raw).hexdigest() != attempt.get("run_json_sha256"):
                faults.append(f"{name}: the kept run.json is not the one the re-run recorded "
                              "(sha256 differs)")
            elif _kept_complete(raw):
                faults.append(f"{name}: the kept run.json is of a complete run")
    if started < ended - ORDER_SLACK_S:
        faults.append(f"{run_id} (re-run) started before its failed attempt was written")
    return faults


def _kept_complete(raw: bytes) -> bool:
    try:
        doc = json.loads(raw)
    except ValueError:
        return False            # its sha256 matched: the re-run recorded this very file
    return not isinstance(doc, dict) or doc.get("complete") is not False


def _recorded_deps(meta: dict) -> list[str]:
    """The runs a run says it read: its reference run (K) and an oracle's no-sync run."""
    requested = (meta.get("settings") or {}).get("requested") or {}
    deps = [meta.get("reference_run_id"), requested.get("oracle_intervals_from")]
    return [str(d) for d in deps if d]


def _planned_deps(plan: dict) -> dict[str, list[str]] | None:
    try:
        return {r.run_id: list(r.depends_on) for r in planned_runs(plan, _is_oracle)}
    except InputError:          # regenerated_order_faults names it
        return None


def _mark_displaced(records: dict, planned: dict[str, list[str]] | None) -> list[str]:
    """Set ``displaced`` on each run that waited for a re-run: it depends (the plan's
    dependencies when given, else the ones it records) on a re-run or displaced run.  Such a
    run ran when its dependency finished, so it is left out of the order's time checks; it
    must not have started before that dependency was written."""
    deps = {r: planned.get(r, []) if planned is not None else rec["deps"]
            for r, rec in records.items()}
    for rec in records.values():
        rec["displaced"] = False
    changed = True
    while changed:
        changed = False
        for run_id, rec in records.items():
            if rec["rerun"] or rec["displaced"]:
                continue
            if any(d in records and (records[d]["rerun"] or records[d]["displaced"])
                   for d in deps[run_id]):
                rec["displaced"] = changed = True
    faults = []
    for run_id, rec in sorted(records.items()):
        for d in deps[run_id]:
            dep = records.get(d)
            if dep is not None and rec["ran_from"] < dep["ran_until"] - ORDER_SLACK_S:
                faults.append(f"{run_id} started {dep['ran_until'] - rec['ran_from']:.0f} s "
                              f"before {d}, which it reads, was written")
    return faults


def rerun_notes(ctx) -> list[str]:
    """The claim's runs re-done after failed attempts, with the first attempt's error."""
    runset = ctx.runset
    if not runset.has_logs:
        return []
    reruns = []
    for run_id in getattr(runset, "run_ids", ()):
        order = runset.meta(run_id).get("run_order")
        attempts = recorded_attempts(order)
        if attempts:
            reruns.append(f"{run_id} after {len(attempts)} failed attempt(s) "
                          f"({str(attempts[0].get('error') or '')[:120]})")
    return ([f"{len(reruns)} run(s) re-run in their slot: " + _listing(reruns, 3)]
            if reruns else [])


def _started_behind(in_order) -> list[tuple]:
    """``(position, run_id, seconds)`` of each run, of ``(position, started, run_id)`` taken
    in order, that started more than :data:`ORDER_SLACK_S` before a run ahead of it; runs
    without a finite start time are skipped."""
    out, latest = [], -math.inf
    for pos, started, run_id in in_order:
        if not np.isfinite(started):
            continue
        if started < latest - ORDER_SLACK_S:
            out.append((pos, run_id, latest - started))
        latest = max(latest, started)
    return out


def _is_shard(index, count) -> bool:
    return (isinstance(index, int) and isinstance(count, int) and not isinstance(index, bool)
            and not isinstance(count, bool) and 0 <= index < count)


def _shard_of(order: dict) -> tuple | None:
    """``(index, count)`` of the sharded sweep a ``run_order`` record names, else None."""
    shard = order.get("shard")
    return (shard.get("index"), shard.get("count")) if isinstance(shard, dict) else None


def _is_oracle(policy_class: str) -> bool:
    return bool(resolve_policy(policy_class).oracle)


def _ordering_groups(records: dict, planned: list) -> tuple[list[list[int]], list[str]]:
    """The replication seeds ordered together: every seed when the runs record the whole
    plan's size, else (a sequential campaign's batches) the seeds whose runs record the same
    ``runs``/``blocks``, taken ``blocks`` at a time in the order their first run started."""
    faults, by_size = [], {}
    seed_of = {r.run_id: r.seed for r in planned}
    size_of_seed: dict[int, set] = {}
    first_start: dict[int, float] = {}
    for run_id, rec in records.items():
        seed = seed_of[run_id]
        size_of_seed.setdefault(seed, set()).add((rec["runs"], rec["blocks"]))
        first_start[seed] = min(first_start.get(seed, math.inf), rec["started"])
    for seed, sizes in sorted(size_of_seed.items()):
        if len(sizes) > 1:
            faults.append(f"the runs of seed {seed} record {len(sizes)} different counts of "
                          "runs ordered together: one seed's runs are ordered together")
            continue
        by_size.setdefault(next(iter(sizes)), []).append(seed)
    groups = []
    for (_, n_blocks), seeds in sorted(by_size.items(), key=str):
        if not isinstance(n_blocks, int) or n_blocks < 1:
            continue
        seeds.sort(key=lambda s: (first_start[s], s))
        groups += [seeds[i:i + n_blocks] for i in range(0, len(seeds), n_blocks)]
    return groups, faults


def regenerated_order_faults(plan: dict, records: dict) -> list[str]:
    """The recorded execution order against the one the order seed regenerates.

    ``records``: run_id -> ``{"order_seed", "position", "block", "position_in_block",
    "runs", "blocks", "window", "started", "written"}`` (times in s since the epoch; an
    optional ``"shard"``: ``(index, count)`` of a sharded sweep) of the runs that carry
    run-order records.  The order seed is regenerated from the plan's
    challenge commitment (else its campaign fingerprint) and the order from the plan's runs
    (:mod:`evalkit.runlog.execution_order`): every run must sit where that order puts it,
    start no more than :data:`ORDER_SLACK_S` before a run ahead of it, and start only while
    the sweep's window was open to its block (no more than ``window - 1`` earlier blocks with
    a run not yet written).
    A run re-done later with its position or start time edited to look in order breaks one of
    the two."""
    seed = plan_order_seed(plan)
    if seed is None or not records:
        return []
    try:
        planned = planned_runs(plan, _is_oracle)
    except InputError as exc:
        return [f"the order cannot be regenerated: a planned policy does not resolve "
                f"({exc.message})"]
    unplanned = sorted(set(records) - {r.run_id for r in planned})
    faults = [f"{len(unplanned)} run(s) with run-order records are not in the plan (first: "
              f"{unplanned[0]})"] if unplanned else []
    records = {k: v for k, v in records.items() if k not in unplanned}
    seeds = sorted({v["order_seed"] for v in records.values()}, key=str)
    if seeds and seeds != [seed]:
        source = "challenge commitment" if plan.get("challenge") else "campaign fingerprint"
        faults.append(f"the runs record order seed {', '.join(str(s) for s in seeds)}; the "
                      f"plan gives {seed} (from its {source})")
    # a sharded sweep's runs are ordered shard by shard: each shard's order is regenerated
    # from the planned runs that record it (in plan order, as the sweep orders them)
    shards = sorted({v["shard"] for v in records.values() if v.get("shard") is not None},
                    key=str)
    unsharded = {k: v for k, v in records.items() if v.get("shard") is None}
    groups, group_faults = _ordering_groups(unsharded, planned)
    faults += group_faults
    batches = [(f"seed(s) {', '.join(str(s) for s in group)}", "the plan has {} for those "
                "seeds", [r for r in planned if r.seed in set(group)]) for group in groups]
    # a shard's runs are the ones the sharding rule gives it from the plan, not the ones
    # that say they ran there
    for i, n in shards:
        claimed = sorted(k for k, v in records.items() if v.get("shard") == (i, n))
        if _is_shard(i, n):
            members = shard_members(planned, i, n)
            mine = {r.run_id for r in members}
            strays = [k for k in claimed if k not in mine]
            if strays:
                faults.append(f"{len(strays)} run(s) record shard {i}/{n} but the plan's "
                              f"sharding puts them in another (first: {strays[0]})")
        else:
            members = []
            faults.append(f"{len(claimed)} run(s) record shard {i}/{n}, which no sweep has "
                          f"(first: {claimed[0]})")
        batches.append((f"shard {i}/{n}", "the plan gives that shard {} runs", members))
    widened = sorted(k for k, v in records.items() if v.get("window") != WINDOW)
    if widened:
        faults.append(f"{len(widened)} run(s) record a block window other than the sweep's "
                      f"{WINDOW} (first: {widened[0]}, window "
                      f"{records[widened[0]].get('window')!r})")
    moved, behind, early = [], [], []
    for label, planned_size, members in batches:
        recorded_size = {records[r.run_id]["runs"] for r in members if r.run_id in records}
        if recorded_size != {len(members)}:
            faults.append(f"the runs of {label} record "
                          f"{'/'.join(str(n) for n in sorted(recorded_size, key=str))} runs "
                          f"ordered together; {planned_size.format(len(members))}")
            continue
        _, slots = execution_order(members, seed)
        for r in members:
            rec = records.get(r.run_id)
            want = slots[r.run_id]
            if rec is None:
                continue
            if (rec["position"], rec["block"], rec["position_in_block"]) != (
                    want.position, want.block, want.position_in_block):
                moved.append(f"{r.run_id} records position {rec['position']} (block "
                             f"{rec['block']}), the order seed puts it at {want.position} "
                             f"(block {want.block})")
        timed = [r for r in members
                 if r.run_id in records and not records[r.run_id].get("displaced")]
        in_order = sorted((slots[r.run_id].position, records[r.run_id]["started"], r.run_id)
                          for r in timed)
        for pos, run_id, seconds in _started_behind(in_order):
            behind.append(f"{run_id} (position {pos}) started {seconds:.0f} s before a run "
                          "ahead of it in the order")
        written_by_block: dict[int, float] = {}
        for r in timed:
            b = slots[r.run_id].block
            written_by_block[b] = max(written_by_block.get(b, -math.inf),
                                      records[r.run_id]["written"])
        for r in timed:
            rec = records[r.run_id]
            if not np.isfinite(rec["started"]):
                continue
            block = slots[r.run_id].block
            # the sweep's window is a constant of the format, never the run's own word
            open_before = [b for b, w in written_by_block.items()
                           if b < block and w > rec["started"] + ORDER_SLACK_S]
            if len(open_before) > WINDOW - 1:
                early.append(f"{r.run_id} (block {block}) started while block(s) "
                             f"{', '.join(str(b) for b in sorted(open_before))} still had a "
                             f"run to write (the sweep opens {WINDOW} block(s) at once)")
    if moved:
        faults.append(f"{len(moved)} run(s) are not where the order seed puts them: "
                      + _listing(moved, 2))
    if behind:
        faults.append(f"{len(behind)} run(s) started before runs ahead of them: "
                      + _listing(behind, 2))
    if early:
        faults.append(f"{len(early)} run(s) started outside the sweep's block window: "
                      + _listing(early, 2))
    return faults


def claim_timing(ctx) -> pd.DataFrame:
    """One row per run of the claim's independent seeds: seed, run_id, is_policy, v, t_min
    (minutes since the claim's first run), time_source, position, step_rate, probe_s."""
    runs = ctx.runset.runs
    rates = dict(zip(runs.run_id, runs.step_rate)) if "step_rate" in runs.columns else {}
    rows = []
    for p in ctx.units:
        ids = [(p.policy_run, True, p.v_policy)] + [
            (r, False, float(v)) for r, v in zip(p.draws.run_id, p.draws.violation_rate)]
        for run_id, is_policy, v in ids:
            rec = _run_record(ctx, run_id)
            rate = rates.get(run_id)
            rows.append({"seed": p.seed, "run_id": run_id, "is_policy": is_policy, "v": v,
                         "step_rate": float(rate) if rate is not None and pd.notna(rate)
                         else math.nan, **rec})
    df = pd.DataFrame(rows)
    if len(df):
        df["t_min"] = (df.t - df.t.min()) / 60.0
    return df


def relative_differences(df: pd.DataFrame, col: str) -> np.ndarray:
    """(n_seeds,) ``(mean of the draws' col - the policy's) / the policy's`` per seed with
    finite, positive values; seeds without them are left out."""
    out = []
    for _, g in df.groupby("seed", sort=True):
        pol = g.loc[g.is_policy, col].to_numpy(float)
        dr = g.loc[~g.is_policy, col].to_numpy(float)
        if pol.size == 1 and dr.size and np.isfinite(pol[0]) and pol[0] > 0 \
                and np.all(np.isfinite(dr)):
            out.append((dr.mean() - pol[0]) / pol[0])
    return np.array(out, dtype=float)


def drift_adjusted_gain(df: pd.DataFrame, col: str) -> dict | None:
    """Seed fixed-effects OLS of V on [policy indicator, z = col].

    Returns gain G (mean over seeds of mean draws - policy), G_adj (minus the indicator's
    coefficient), beta (z's coefficient), its two-sided p, and the within-seed correlation of
    the indicator with z; None when z is missing or does not vary within seeds.
    """
    from scipy import stats

    use = df[np.isfinite(df[col].to_numpy(float))]
    counts = use.groupby("seed").is_policy.agg(["sum", "size"])
    keep = counts.index[(counts["sum"] == 1) & (counts["size"] >= 2)]
    use = use[use.seed.isin(keep)]
    if len(keep) < 3:
        return None
    y = use.v.to_numpy(float)
    x1 = use.is_policy.to_numpy(float)
    z = use[col].to_numpy(float)
    seeds = use.seed.to_numpy()

    def demean(a):
        means = pd.Series(a).groupby(seeds).transform("mean").to_numpy()
        return a - means

    yd, x1d, zd = demean(y), demean(x1), demean(z)
    if float(np.sum(zd ** 2)) <= 1e-18 * max(1.0, float(np.sum(z ** 2))):
        return None
    X = np.column_stack((x1d, zd))
    xtx = X.T @ X
    corr = float(np.corrcoef(x1d, zd)[0, 1])
    if abs(corr) > 1 - 1e-9:
        return {"gain": _gain(use), "gain_adj": math.nan, "beta": math.nan, "beta_p": math.nan,
                "corr": corr, "n_seeds": len(keep), "separable": False}
    coef = np.linalg.solve(xtx, X.T @ yd)
    resid = yd - X @ coef
    dof = len(y) - len(keep) - 2
    if dof < 1:
        return None
    sigma2 = float(resid @ resid) / dof
    se = np.sqrt(np.maximum(np.diag(np.linalg.inv(xtx)) * sigma2, 0.0))
    if se[1] > 0:
        beta_p = float(2 * stats.t.sf(abs(coef[1]) / se[1], dof))
    else:
        beta_p = 0.0 if coef[1] != 0 else 1.0
    return {"gain": _gain(use), "gain_adj": float(-coef[0]), "beta": float(coef[1]),
            "beta_p": beta_p, "corr": corr, "n_seeds": len(keep), "separable": True}


def _gain(df: pd.DataFrame) -> float:
    d = [g.loc[~g.is_policy, "v"].mean() - g.loc[g.is_policy, "v"].iloc[0]
         for _, g in df.groupby("seed", sort=True)]
    return float(np.mean(d))


def _sign_flip_p(r: np.ndarray) -> float:
    return float(sign_flip_test(r, alternative="two-sided",
                                n_resamples=None if r.size <= 20 else 20000,
                                rng=np.random.default_rng(0)).p_value)


@check("execution_drift", params={"max_explained_share": ((int, float), 0.5),
                                  "load_rel_tol": ((int, float), 0.05),
                                  "probe_rel_tol": ((int, float), 0.25),
                                  "require_run_order": ((bool,), False)}, tier="matched_budget")
def execution_drift(ctx, spec) -> Outcome:
    alpha = ctx.alpha
    share_max = float(spec["max_explained_share"])
    tols = {"load_rel_tol": float(spec["load_rel_tol"]),
            "probe_rel_tol": float(spec["probe_rel_tol"])}
    expected = (f"the policy runs and their draws executed under the same host load (median "
                f"relative difference of step rate <= {tols['load_rel_tol']:.0%}, probe latency "
                f"<= {tols['probe_rel_tol']:.0%}, or no significant difference at alpha = "
                f"{alpha:g}), and drift in execution time or host load explains less than "
                f"{share_max:.0%} of the gain")
    df = claim_timing(ctx)
    if df.empty:
        return not_evaluable(expected, "no paired seeds")
    has_time = bool(np.isfinite(df.t.to_numpy(float)).any())
    sources = set(df.time_source.dropna())
    has_order = sources == {"run_order"}
    measures = [c for c in ("t_min", "step_rate", "probe_s")
                if c in df.columns and np.isfinite(df[c].to_numpy(float)).sum() >= 2]
    if not measures:
        return not_evaluable(expected, "no execution times, step rates or probe latencies "
                             "recorded for the claim's runs",
                             "audit the run logs of an `evalkit sweep` (run.json run_order) "
                             "with trainer steps recorded")
    if spec["require_run_order"] and not has_order:
        missing = df.loc[df.time_source != "run_order", "run_id"].tolist()
        return Outcome(False, expected, f"{len(missing)} run(s) without run-order records "
                       f"(e.g. {', '.join(missing[:3])}); the protocol requires them",
                       "rerun with `evalkit sweep`, which randomises, blocks and records the "
                       "run order")
    notes, blocks, imbalance = rerun_notes(ctx), [], {}
    contradictions = order_faults(ctx)
    if contradictions:
        blocks.append("the execution records contradict each other: "
                      + _listing(contradictions, 4))
    if has_time:
        gap = [g.loc[~g.is_policy, "t_min"].mean() - g.loc[g.is_policy, "t_min"].iloc[0]
               for _, g in df.groupby("seed")]
        first = int(sum(x > 0 for x in gap))
        what = "started" if has_order else "written (no run-order records: write times)"
        notes.append(f"draws {what} a median {_fmt(float(np.median(gap)), 3)} min after their "
                     f"policy run (policy first in {first}/{len(gap)} seeds)")
    for col, label, tol_key in LOAD_MEASURES:
        if col not in measures:
            continue
        r = relative_differences(df, col)
        if r.size < 2:
            continue
        med = float(np.median(np.abs(r)))
        p = _sign_flip_p(r)
        direction = "higher" if np.median(r) > 0 else "lower"
        text = (f"{label}: draws {direction} than the policy run by a median "
                f"{med:.1%} (|r|), sign-flip p = {_fmt(p, 3)} over {r.size} seeds")
        notes.append(text)
        if med > tols[tol_key] and p <= alpha:
            imbalance[col] = (f"{label} differs between the policy runs and their draws "
                              f"(median {med:.1%} > {tols[tol_key]:.0%}, p = {_fmt(p, 3)} <= "
                              f"{alpha:g})")
    if "step_rate" in imbalance:
        blocks.append(imbalance["step_rate"])
    for col, label in (("t_min", "execution time"), ("step_rate", "step rate"),
                       ("probe_s", "probe latency")):
        if col not in measures:
            continue
        fit = drift_adjusted_gain(df, col)
        if fit is None:
            continue
        g = fit["gain"]
        if not fit["separable"]:       # its imbalance is judged by the load rule above
            notes.append(f"{label} is collinear with the policy label within seeds (no "
                         "regression)")
            continue
        if col == "probe_s" and "probe_s" in imbalance and fit["beta_p"] <= alpha:
            blocks.append(imbalance["probe_s"] + f" and V depends on it (slope p = "
                          f"{_fmt(fit['beta_p'], 3)})")
        explained = g - fit["gain_adj"]
        share = explained / g + 0.0 if g > 0 else math.nan     # + 0.0: no "-0%"
        if abs(share) < 0.005:
            share = 0.0
        notes.append(f"V on {label} (seed fixed effects): slope {_fmt(fit['beta'], 3)} "
                     f"(p = {_fmt(fit['beta_p'], 3)}), G = {pp(g)} pp, drift-adjusted "
                     f"G = {pp(fit['gain_adj'])} pp"
                     + (f", {drift_share_words(share)}" if g > 0 else ""))
        if g > 0 and share >= share_max and fit["beta_p"] <= alpha:
            blocks.append(f"{label} drift explains {share:.0%} >= {share_max:.0%} of the gain "
                          f"(slope p = {_fmt(fit['beta_p'], 3)} <= {alpha:g})")
    found = "; ".join(notes) if notes else "nothing to compare"
    if blocks:
        return Outcome(False, expected, "; ".join(blocks) + ". " + found,
                       "rerun the campaign with `evalkit sweep` (a seed's runs execute as one "
                       "block in a randomised, recorded order) on a host whose load does not "
                       "drift; the effect is not evidence of placement")
    if not has_order:
        found += "; no run-order records: order and host load were not randomised or recorded"
    return Outcome(True, expected, found)
