"""Like for like, fail closed: a seed's runs differ in the schedule and nothing else.

One comparison per seed of every run's whole *design record* (its run.json flattened to
dotted keys, plus facts read from its logs) against the seed's policy run.  Only the keys of
:data:`MAY_DIFFER` (the schedule and what follows from it) are left out; any other key,
known or new, that is absent from one run or has another value is a difference.  The facts
from the logs:

* ``log.requests``: sha256 of every request's (arrival, id, prompt tokens, output tokens),
  so the same arrival times carrying other requests differ;
* ``log.merge_bytes``: the bytes each merge all-reduced (runs that merged);
* ``log.steps``: whether the run logged trainer steps, how much of the observed span lies
  between its first and last step, its longest idle time (neither a step nor a merge) and
  whether steps overlap;
* ``log.step_time``: the median inner step, within ``step_rel_tol`` of the seed's median.
"""

from __future__ import annotations

import functools
import hashlib
import json

import numpy as np

from evalkit.audit.checks.core import Outcome, _listing, check, not_evaluable
from evalkit.runlog.design import FINGERPRINT_RESOLUTION_S

__all__ = ["like_for_like", "run_facts", "seed_runs", "training_facts"]

# run.json keys (dotted prefixes) that may differ between the runs of one seed: who the
# run is and what its schedule was, its own random generator, host timing and what the
# run measured (which follows from the schedule).  Everything else must be identical.
MAY_DIFFER = (
    "run_id", "policy", "role", "draw", "matched_to", "created_at", "rng_seeds.policy",
    # the machine's name may differ; its platform and Python may not
    "host.hostname",
    "oracle", "policy_params", "reference_run_id", "reference_k", "k_observed",
    "inner_step_s", "ewma_alpha", "notes", "plan_sha256", "complete", "error",
    # the policy's code identity differs by role (policy vs matched_random); one identity per
    # role across the claim's seeds is checked by identity_differences
    "policy_identity",
    # when and in which slot of the randomised order the run executed, and the host load then
    "run_order",
    "settings.effective.policy",
    # what a real backend measured during the run (counts, timings, the rig's state and
    # addresses), not how it was configured; any other rig key (its hardware) is compared
    "settings.effective.rig.reset_s", "settings.effective.rig.runs_before",
    "settings.effective.rig.startup_s", "settings.effective.rig.warm",
    "settings.effective.pids", "settings.effective.sidecar_port",
    "settings.effective.base_url", "settings.effective.inner_steps", "settings.effective.merges",
    "settings.effective.merge_duration_mean_s", "settings.effective.scrapes",
    "settings.effective.scrapes_ok", "settings.effective.send_lag_max_s",
    "settings.effective.send_lag_p50_s", "settings.effective.send_lag_p99_s",
    "settings.effective.warmup_inner_step_s", "settings.effective.capacity_probe_cached",
    # which earlier run of the seed the probe was taken from (the probe itself, measured once
    # per seed on its hardware and handed to the seed's later runs, is compared)
    "settings.effective.capacity_probe_from",
    "settings.effective.client_keeps_up",
    # the paced trainer's clock record: what its ticks measured (the period and slack it was
    # given are settings and are compared)
    "settings.effective.pacing.ticks", "settings.effective.pacing.missed_ticks",
    "settings.effective.pacing.missed_share", "settings.effective.pacing.worst_late_s",
    "settings.effective.requests_failed", "settings.effective.prompts_truncated",
    # an imported run's source file and what its tool measured (dates, durations, counts)
    "settings.effective.imported",
    "settings.requested.run_id", "settings.requested.role", "settings.requested.draw",
    "settings.requested.matched_to", "settings.requested.reference_k",
    "settings.requested.reference_run_id", "settings.requested.policy",
    "settings.requested.policy_seed", "settings.requested.campaign_fingerprint",
    "settings.requested.oracle_intervals", "settings.requested.oracle_intervals_from",
    # the campaign file's path as seen from where the run was started (shards of one sweep
    # may start elsewhere); its content is pinned by the settings compared here and the plan
    "settings.requested.campaign",
)
STEP_OVERLAP_TOL_S = 1e-6


@functools.lru_cache(maxsize=8192)
def may_differ(key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in MAY_DIFFER)


def flatten(doc, prefix: str = "") -> dict[str, str]:
    """Nested dicts to dotted keys -> canonical JSON of the leaf (lists are leaves)."""
    out: dict[str, str] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def request_contents(req: dict) -> str:
    """sha256 (32 hex) of (arrival in us, request id, prompt tokens, output tokens) by arrival."""
    arrival = np.round(np.asarray(req["arrival_s"], float) / FINGERPRINT_RESOLUTION_S)
    cols = np.column_stack([np.nan_to_num(arrival, nan=-1.0),
                            np.asarray(req["request_id"], float),
                            np.asarray(req["prompt_tokens"], float),
                            np.asarray(req["output_tokens"], float)])
    cols = cols[np.lexsort(cols.T[::-1])].astype(np.int64)
    return hashlib.sha256(cols.tobytes()).hexdigest()[:32]


def training_facts(steps: dict | None, merges: dict, span: tuple[float, float]) -> dict:
    """The trainer's activity over ``span`` (the observed span, s): ``coverage``, the share of
    the span between its first step start and its last step end; ``idle_s``, the longest time
    inside that extent in neither a step nor a merge window; ``overlaps``, steps starting
    before an earlier one ended; ``step_median_s``."""
    if steps is None or not len(steps["start_s"]):
        return {"logged": False, "coverage": float("nan"), "idle_s": float("nan"),
                "overlaps": 0, "step_median_s": float("nan")}
    s = np.asarray(steps["start_s"], float)
    e = np.asarray(steps["end_s"], float)
    order = np.argsort(s, kind="mergesort")
    s, e = s[order], e[order]
    overlaps = int(np.count_nonzero(s[1:] < np.maximum.accumulate(e)[:-1] - STEP_OVERLAP_TOL_S))
    a, b = span
    cover = ((min(float(e.max()), b) - max(float(s.min()), a)) / (b - a) if b > a
             else float("nan"))
    lo = np.concatenate([s, np.asarray(merges["start_s"], float)])
    hi = np.concatenate([e, np.asarray(merges["end_s"], float)])
    o = np.argsort(lo, kind="mergesort")
    lo, hi = lo[o], np.maximum.accumulate(hi[o])
    inside = (lo[1:] <= float(e.max()))
    gaps = (lo[1:] - hi[:-1])[inside]
    return {"logged": True, "coverage": float(cover),
            "idle_s": float(max(gaps.max(), 0.0)) if gaps.size else 0.0,
            "overlaps": overlaps, "step_median_s": float(np.median(e - s))}


# ------------------------------------------------------------------------ the seed's runs

def seed_runs(pair) -> list[tuple[str, str]]:
    """(run_id, role) of one seed of a claim: policy run, draws, no-sync run."""
    out = [(pair.policy_run, "policy")]
    out += [(r, "matched_random") for r in pair.draws.run_id.tolist()]
    if pair.no_sync is not None:
        out.append((pair.no_sync.run_id, "no_sync"))
    return out


def _has_table(runset, run_id: str, name: str) -> bool:
    from pathlib import Path

    return run_id in runset._dirs and (Path(runset._dirs[run_id]) / f"{name}.parquet").exists()


def run_facts(ctx, run_id: str) -> dict:
    """The log half of a run's design record (cached per run)."""
    cache = ctx.runset._cache
    key = ("like_for_like", run_id)
    if key in cache:
        return cache[key]
    runset = ctx.runset
    meta = ctx._meta(run_id)
    req = runset.columns(run_id, "requests",
                         ("arrival_s", "end_s", "request_id", "prompt_tokens", "output_tokens"))
    merges = runset.columns(run_id, "merges", ("start_s", "end_s", "bytes"))
    steps = (runset.columns(run_id, "steps", ("start_s", "end_s"))
             if _has_table(runset, run_id, "steps") else None)
    horizon = float(meta.get("horizon_s", np.nan))
    arrival, end = req["arrival_s"], req["end_s"]
    end = np.where(np.isfinite(end), end, horizon)
    span = (float(np.min(arrival)), min(horizon, float(max(np.max(end), np.max(arrival)))))
    by = merges["bytes"]
    facts = {"requests": request_contents(req),
             "merge_bytes": (None if by.size == 0 else
                             "unknown" if not np.all(np.isfinite(by)) else
                             json.dumps(sorted({int(x) for x in by}))),
             **training_facts(steps, merges, span)}
    cache[key] = facts
    return facts


def seed_differences(ctx, pair, step_rel_tol: float, min_coverage: float,
                     max_idle_steps: float) -> list[str]:
    """Every difference between the seed's runs (blocking), each naming the runs at fault."""
    runs = seed_runs(pair)
    ref_id = pair.policy_run
    records = {r: flatten(ctx._meta(r)) for r, _ in runs}
    ref = records[ref_id]
    out = []
    for run_id, role in runs[1:]:
        mine = records[run_id]
        keys = sorted(k for k in set(ref) | set(mine) if not may_differ(k))
        diff = [k for k in keys if ref.get(k) != mine.get(k)]
        for k in diff[:3]:
            out.append(f"seed {pair.seed}: {k} differs: {ref_id} (policy) "
                       f"{_short(ref.get(k, '(absent)'))} vs {run_id} ({role}) "
                       f"{_short(mine.get(k, '(absent)'))}")
        if len(diff) > 3:
            out.append(f"seed {pair.seed}: {run_id} ({role}) differs in {len(diff) - 3} more "
                       f"key(s): {', '.join(diff[3:8])}")
    facts = {r: run_facts(ctx, r) for r, _ in runs}
    fref = facts[ref_id]
    for run_id, role in runs[1:]:
        f = facts[run_id]
        if f["requests"] != fref["requests"]:
            out.append(f"seed {pair.seed}: {run_id} ({role}) served other requests (per-request "
                       f"contents {f['requests'][:12]}, policy run {fref['requests'][:12]})")
        if role != "no_sync" and f["merge_bytes"] != fref["merge_bytes"] and \
                None not in (f["merge_bytes"], fref["merge_bytes"]):
            out.append(f"seed {pair.seed}: {run_id} ({role}) merges all-reduced "
                       f"{f['merge_bytes']} bytes, policy run {fref['merge_bytes']}")
        if f["logged"] != fref["logged"]:
            has, lacks = (run_id, ref_id) if f["logged"] else (ref_id, run_id)
            out.append(f"seed {pair.seed}: trainer steps logged by {has}, not by {lacks}")
    logged = {r: f for r, f in facts.items() if f["logged"]}
    if logged:
        median = float(np.median([f["step_median_s"] for f in logged.values()]))
        role_of = dict(runs)
        for run_id, f in logged.items():
            where = f"seed {pair.seed}: {run_id} ({role_of[run_id]})"
            if f["overlaps"]:
                out.append(f"{where}: {f['overlaps']} trainer step(s) overlap the previous one")
            if not f["coverage"] >= min_coverage:
                out.append(f"{where}: training covers {f['coverage']:.0%} of the observed span "
                           f"(expected >= {min_coverage:.0%}: the trainer ran the whole time)")
            if median > 0 and f["idle_s"] > max_idle_steps * median:
                out.append(f"{where}: the trainer stood idle for {f['idle_s']:.4g} s (more "
                           f"than {max_idle_steps:g} of the seed's {median:.4g} s steps)")
            if median > 0 and abs(f["step_median_s"] - median) > step_rel_tol * median:
                out.append(f"{where}: median inner step {f['step_median_s']:.4g} s, the seed's "
                           f"runs {median:.4g} s")
    return out


def identity_differences(ctx) -> list[str]:
    """The claim's policy runs carry one code identity, and so do its draws: a plugin changed
    between seeds (another version, another source file) is another policy."""
    seen: dict[str, dict[str, list[str]]] = {}
    for pair in ctx.claim.pairs:
        for run_id, role in seed_runs(pair):
            ident = json.dumps(ctx._meta(run_id).get("policy_identity"), sort_keys=True)
            seen.setdefault(role, {}).setdefault(ident, []).append(run_id)
    out = []
    for role, idents in seen.items():
        if len(idents) > 1:
            parts = [f"{_short(i, 80)} ({len(r)} run(s), e.g. {r[0]})" for i, r in idents.items()]
            out.append(f"{role} runs carry {len(idents)} code identities: " + "; ".join(parts))
    return out


def _short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


@check("like_for_like", params={"step_rel_tol": ((int, float), 0.5),
                                "min_training_coverage": ((int, float), 0.95),
                                "max_idle_steps": ((int, float), 20.0)}, tier="matched_budget")
def like_for_like(ctx, spec) -> Outcome:
    expected = ("every run of a seed (policy, draws, no-sync) identical in everything but the "
                "schedule: run.json outside the documented allowlist (backend, engine, SLO, "
                "trainer, merge payload, corridor, campaign, trace), per-request contents, "
                f"merge bytes, trainer steps from start to end of >= "
                f"{spec['min_training_coverage']:.0%} of the span, never idle for more than "
                f"{spec['max_idle_steps']:g} steps, without overlaps, median step within "
                f"{spec['step_rel_tol']:.0%} of the seed's")
    if not ctx.runset.has_logs:
        return not_evaluable(expected, "a summary table carries no run records or logs: "
                             "like-for-like is the table's word", "audit the runs directory")
    bad, n = [], 0
    for pair in ctx.claim.pairs:
        bad += seed_differences(ctx, pair, float(spec["step_rel_tol"]),
                                float(spec["min_training_coverage"]),
                                float(spec["max_idle_steps"]))
        n += len(seed_runs(pair))
    bad += identity_differences(ctx)
    if bad:
        return Outcome(False, expected, "runs differ beyond the schedule: " + _listing(bad, 8),
                       "replay every run of a seed with the same engine, SLO, trainer, payload, "
                       "trace and requests; only the merge schedule may differ")
    return Outcome(True, expected, f"{n} runs over {len(ctx.claim.pairs)} seeds alike but for "
                   "the schedule")
