"""Deployable checks: a registered, non-oracle policy class on a real serving sidecar."""

from __future__ import annotations

import numpy as np

from evalkit.audit.checks.core import (Outcome, _listing, check, needs_real_backend,
                                       not_evaluable)
from evalkit.audit import registry
from evalkit.errors import InputError
from evalkit.runlog.schema import BACKENDS, SERVER_TIMING_COLUMNS
from evalkit.runlog.server_view import SERVER_VIEW_KEY, server_view_problem

__all__ = ["not_oracle", "real_sidecar", "server_timing_faults", "server_view_faults",
           "sidecar_evidence"]

TIER = "deployable"
_LIST = (list,)
# the backends a campaign file can name (imported runs have no campaign to change)
CAMPAIGN_BACKENDS = tuple(b for b in BACKENDS if b != "import")
# the columns a real sidecar's client writes per metrics scrape (evalkit/runlog/FORMAT.md 4.5)
SCRAPE_COLUMNS = ("t_s", "scrape_ok", "arrivals_seen", "queue_running", "queue_waiting")
# slack of the join, beyond each scrape's own latency: the client's clock reads around a scrape
JOIN_SLACK_S = 0.25
# the request columns a real sidecar's client writes from each response's server_timing
SERVER_COLUMNS = tuple(SERVER_TIMING_COLUMNS.values())


def sidecar_evidence(runset, run_id: str) -> str | None:
    """None when the run carries what only a real serving sidecar's client writes: metrics
    scrapes (signals.parquet rows with ``scrape_ok``) whose counts join the client's own
    requests (``arrivals_seen`` = requests sent by then; the server's running + waiting
    gauges no more than the requests in flight) and agree with run.json's scrape counts;
    otherwise why not.  The backend string is never evidence.  Found once per run: the
    deployable tier and the transfer tier both ask."""
    key = ("sidecar_evidence", run_id)
    if key not in runset._cache:
        runset._cache[key] = _sidecar_evidence(runset, run_id)
    return runset._cache[key]


def _sidecar_evidence(runset, run_id: str) -> str | None:
    try:
        sig = runset.table(run_id, "signals")
    except (InputError, OSError):
        return "no signals.parquet (no metrics scrape was recorded)"
    missing = [c for c in SCRAPE_COLUMNS if c not in sig.columns]
    if missing:
        return (f"signals.parquet has no {', '.join(missing)}: the simulator's signals, not a "
                "sidecar's metrics scrape")
    ok = sig[sig.scrape_ok.fillna(False).astype(bool)]
    if ok.empty:
        return "no successful metrics scrape"
    effective = ((runset.meta(run_id).get("settings") or {}).get("effective") or {})
    said = (effective.get("scrapes"), effective.get("scrapes_ok"))
    if said != (len(sig), len(ok)):
        return (f"run.json says {said[0]} scrapes ({said[1]} ok), signals.parquet has "
                f"{len(sig)} ({len(ok)} ok)")
    req = runset.table(run_id, "requests")
    sent = np.sort(req.sent_s.to_numpy(dtype=float, na_value=np.nan))
    sent = sent[np.isfinite(sent)]
    ends = req.end_s.to_numpy(dtype=float, na_value=np.inf)
    ends = np.sort(np.where(np.isfinite(ends), ends, np.inf))
    t = ok.t_s.to_numpy(dtype=float)
    lat = (ok.scrape_latency_s.to_numpy(dtype=float, na_value=0.0)
           if "scrape_latency_s" in ok.columns else np.zeros(len(ok)))
    lo, hi = t - np.maximum(lat, 0.0) - JOIN_SLACK_S, t + JOIN_SLACK_S
    seen = ok.arrivals_seen.to_numpy(dtype=float, na_value=np.nan)
    off = ~((seen >= np.searchsorted(sent, lo, side="right"))
            & (seen <= np.searchsorted(sent, hi, side="right")))
    if off.any():
        i = int(np.argmax(off))
        return (f"{int(off.sum())} of {len(ok)} scrapes do not join the client's requests "
                f"(at t = {t[i]:.3g} s the scrape saw {seen[i]:g} arrivals, the client had "
                f"sent {int(np.searchsorted(sent, t[i], side='right'))})")
    in_flight = (np.searchsorted(sent, hi, side="right")
                 - np.searchsorted(ends, lo, side="left"))
    gauges = (ok.queue_running.to_numpy(dtype=float, na_value=0.0)
              + ok.queue_waiting.to_numpy(dtype=float, na_value=0.0))
    over = gauges > in_flight
    if over.any():
        i = int(np.argmax(over))
        return (f"{int(over.sum())} of {len(ok)} scrapes report more requests running or "
                f"waiting than the client had in flight (at t = {t[i]:.3g} s: {gauges[i]:g} > "
                f"{int(in_flight[i])})")
    return None


def server_timing_faults(runset, run_id: str, allowance_s: float,
                         min_share: float) -> tuple[str | None, str | None]:
    """``(fault, unrecorded)``: why the run's requests do not carry a real sidecar's own
    timings within the client's latency (``server_total_s <= end_s - sent_s + allowance_s``
    for at least ``min_share`` of its completed requests; a completed request without a
    server time counts against it), or, for a run whose requests table has none of the
    ``server_*_s`` columns (written before the client recorded them) and no server view
    (:func:`server_view_faults`, vLLM), why it cannot be judged.  Both None when the
    timings hold."""
    req = runset.table(run_id, "requests")
    present = [c for c in SERVER_COLUMNS if c in req.columns]
    if not present:
        return server_view_faults(runset, run_id, req, allowance_s)
    if len(present) < len(SERVER_COLUMNS):
        missing = sorted(set(SERVER_COLUMNS) - set(present))
        return f"{run_id}: requests.parquet has {', '.join(present)} without " \
               f"{', '.join(missing)}", None
    done = req[req.ok.fillna(False).astype(bool)] if "ok" in req.columns else req
    client = (done.end_s.to_numpy(dtype=float, na_value=np.nan)
              - done.sent_s.to_numpy(dtype=float, na_value=np.nan))
    server = done.server_total_s.to_numpy(dtype=float, na_value=np.nan)
    if not len(done):
        return f"{run_id}: no completed request to hold the server's timings against", None
    within = np.isfinite(server) & np.isfinite(client) & (server <= client + allowance_s)
    share = float(within.mean())
    if share < min_share:
        return (f"{run_id}: {share:.1%} of {len(done)} completed requests have a server "
                f"time within the client's latency + {allowance_s:g} s (needs "
                f"{min_share:.0%}; {int(np.isnan(server).sum())} without one)"), None
    return None, None


def server_view_faults(runset, run_id: str, req, allowance_s: float
                       ) -> tuple[str | None, str | None]:
    """``(fault, unrecorded)`` for a run whose server returns no per-request timings (vLLM)
    but whose backend recorded the server's aggregate view (``settings.effective.server_view``:
    its /metrics e2e latency histogram's count and sum deltas over the run).  The server must
    have counted the client's completed requests (``requests - rig_requests`` between the
    completed count and that plus the failed ones) and its summed e2e time must be at most
    the client's summed latency (plus the rig's own probe requests' bound) + ``requests x
    allowance_s``.  Without a view, or with an unavailable one, the run is not evaluable."""
    effective = (runset.meta(run_id).get("settings") or {}).get("effective") or {}
    if SERVER_VIEW_KEY not in effective:
        return None, f"{run_id}: recorded before server timings (no server_*_s columns)"
    view = effective[SERVER_VIEW_KEY]
    problem = server_view_problem(view)
    if problem is not None:
        return f"{run_id}: run.json settings.effective.{problem}", None
    if view["available"] is False:
        return None, f"{run_id}: the server's view was not recorded ({view.get('reason')})"
    ok = req.ok.fillna(False).astype(bool).to_numpy() if "ok" in req.columns \
        else np.ones(len(req), dtype=bool)
    completed, failed = int(ok.sum()), int((~ok).sum())
    counted = view["requests"] - view["rig_requests"]
    if not completed <= counted <= completed + failed:
        return (f"{run_id}: the server counted {counted:g} requests of the run, the client "
                f"completed {completed} ({failed} failed or cancelled)"), None
    latency = (req.end_s.to_numpy(dtype=float, na_value=np.nan)
               - req.sent_s.to_numpy(dtype=float, na_value=np.nan))
    client_s = float(np.nansum(latency)) + view["rig_latency_bound_s"]
    bound = client_s + view["requests"] * allowance_s
    if not view["e2e_sum_s"] <= bound:
        return (f"{run_id}: the server's summed e2e time {view['e2e_sum_s']:.6g} s exceeds "
                f"the client's summed latency {client_s:.6g} s + {view['requests']:g} x "
                f"{allowance_s:g} s"), None
    return None, None


@check("not_oracle", tier=TIER)
def not_oracle(ctx, spec) -> Outcome:
    """Oracle status from the code each policy run records (``policy_identity``: class path
    and source sha256) resolved against the built-ins and installed entry points, and from a
    causality probe of that code; never from a name the run gives.  Code that cannot be
    resolved or probed fails closed (not evaluable)."""
    expected = ("the policy code each run records resolves to an installed, non-oracle class "
                "whose past decisions do not change with the future (causality probe)")
    if not ctx.runset.has_logs:
        if ctx.claim.oracle:
            return Outcome(False, expected, "oracle = true: the policy saw future information",
                           "report it as a bound, never as a deployable controller")
        return not_evaluable(expected, "a summary table names no policy class: its oracle "
                             "column is the table's word", "audit the runs directory")
    cache = ctx.runset._cache
    if "installed_classes" not in cache:    # one scan of the entry points per audit
        cache["installed_classes"] = registry.installed_classes()
    classes = cache["installed_classes"]
    status = {r: registry.code_identity_status(ctx._meta(r), classes)
              for r in ctx.claim.policy_runs.run_id.tolist()}
    seers = [f"{r}: {why}" for r, (o, why) in status.items() if o]
    if seers:
        return Outcome(False, expected, "oracle: " + _listing(seers, 3),
                       "report it as a bound, never as a deployable controller")
    unknown = [f"{r}: {why}" for r, (o, why) in status.items() if o is None]
    if unknown:
        return not_evaluable(expected, _listing(unknown, 3),
                             "replay the policy with the installed code, registered as a "
                             "built-in or under the entry-point group evalkit.policies (the "
                             "audit never imports a package.module:Class a run names)")
    return Outcome(True, expected, next(iter(status.values()))[1])


@check("real_sidecar", params={"real_backends": (_LIST, ["torch", "vllm"]),
                               "server_time_allowance_s": ((int, float), 0.05),
                               "server_time_min_share": ((int, float), 0.99)}, tier=TIER)
def real_sidecar(ctx, spec) -> Outcome:
    """Every run of the claim's seeds (policy, draws, no-sync) on a real sidecar, shown by
    what only a real sidecar's client writes (:func:`sidecar_evidence`: metrics scrapes
    joined to its requests; :func:`server_timing_faults`: the server's own per-request
    timings within the client's latency), never by run.json's backend string.  A vLLM run
    has no per-request server timings; its backend records the server's aggregate view
    (/metrics histogram deltas) instead, held against the client's requests as counts and
    summed time (:func:`server_view_faults`).  A claim the campaign replayed on the
    simulator only is not evaluable (missing runs: the campaign lines that switch the
    backend), and so is one whose runs carry neither server timings nor a server view;
    one with some runs off a real sidecar, or labelled real without the evidence, fails."""
    backends = spec["real_backends"]
    allowance, min_share = spec["server_time_allowance_s"], spec["server_time_min_share"]
    expected = (f"every run of the claim's seeds (policy, draws, no-sync) on a real sidecar "
                f"({'/'.join(backends)}), shown by its metrics scrapes joined to the client's "
                f"requests and server times (server_total_s) within the client's latency + "
                f"{allowance:g} s for at least {min_share:.0%} of its requests")
    ids = []
    for p in ctx.claim.pairs:
        ids += [p.policy_run] + p.draws.run_id.tolist()
        ids += [p.no_sync.run_id] if p.no_sync is not None else []
    runs = ctx.runset.runs.set_index("run_id")
    got = runs.loc[ids, "backend"]
    if got.isna().all() or not ctx.runset.has_logs:
        return not_evaluable(expected, "no run logs: a summary table's backend column is its "
                             "word", "audit the run logs")
    found = sorted(set(got.fillna("unknown")))
    off = [f"{r} ({b})" for r, b in zip(ids, got.fillna("unknown")) if b not in backends]
    if not off:
        unshown = [f"{r}: {why}" for r in ids
                   if (why := sidecar_evidence(ctx.runset, r)) is not None]
        timing = {r: server_timing_faults(ctx.runset, r, allowance, min_share)
                  for r in ids} if not unshown else {}
        unshown += [fault for fault, _ in timing.values() if fault is not None]
        unrecorded = [why for _, why in timing.values() if why is not None]
        if not unshown and unrecorded:
            return not_evaluable(expected, "not evaluable: " + _listing(unrecorded, 3),
                                 "replay with this evalkit's client, which records the "
                                 "sidecar's server_timing per request")
        if not unshown:
            return Outcome(True, expected, "backends: " + ", ".join(found) + f"; {len(ids)} "
                           "runs with metrics scrapes that join the client's requests and "
                           f"server times within the client's latency + {allowance:g} s")
        return Outcome(False, expected, f"labelled {', '.join(found)} but without a real "
                       "sidecar's evidence: " + _listing(unshown, 3),
                       "replay on a real serving sidecar with its metrics scrape on; a "
                       "backend name in run.json is not evidence")
    said = "backends: " + ", ".join(found) + "; not real: " + _listing(off, 4)
    sweepable = [b for b in backends if b in CAMPAIGN_BACKENDS]
    if sweepable and len(off) == len(ids) and set(found) <= set(CAMPAIGN_BACKENDS):
        # the campaign never planned a real sidecar: nothing failed, its lines are named
        return needs_real_backend(expected, said, sweepable)
    return Outcome(False, expected, said,
                   "replay the policy and its baselines on a real serving sidecar")
