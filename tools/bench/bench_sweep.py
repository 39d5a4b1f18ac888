"""Benchmark of the sweep path: 1,000 short sim replays through the local executor.

    python tools/bench/bench_sweep.py [--jobs 2] [--seeds 40] [--ref-jobs 250]

The campaign (below) is 40 seeds x (no-sync + 3 policies + 3 x 7 matched-random draws) =
1,000 replays of a 120 s square-wave trace (~220 requests each), every one written as a run
directory (Parquet tables + run.json).  Target: >= 10 replays/s on 2 cores.

Machine speed varies, so a reference is timed in the same run: the bare backend loop, i.e.
``sim.replay()`` on a prefix of the plan in one process, traces built beforehand, nothing
written.  The same prefix through the serial executor gives the sweep's own cost per
replay (trace cache, checks, run.json, Parquet writes); ``sweep / bare`` is the pool's
throughput relative to one bare core (ideal: about the number of workers on an idle
machine).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

CAMPAIGN = """
regime = "sweepbench"
seeds = {seeds}
matched_random_draws = 7
horizon_s = 120.0
merge_duration_s = 4.0
inner_step_s = 0.25
h_min = 40
h_max = 160
[slo]
e2e_s = 8.0
[trace]
generator = "square_wave"
period_s = 40.0
burst_s = 10.0
quiet_rate = 1.0
busy_rate = 4.0
prompt_tokens = "lognormal:256,0.5,16,2048"
output_tokens = "lognormal:64,0.5,1,512"
[[policies]]
name = "fixed_h"
params = {{ H = 100 }}
[[policies]]
name = "wa"
[[policies]]
name = "pressure_gate"
params = {{ theta = 0.6 }}
"""


def bare_loop(camp, jobs) -> float:
    """Seconds for ``sim.replay`` of ``jobs`` in this process, nothing written."""
    from evalkit.replay.backends import sim
    from evalkit.policies import get_policy
    from evalkit.replay.runner import k_observed
    from evalkit.replay.job import _build_trace

    traces = {s: _build_trace(camp, s) for s in sorted({j.seed for j in jobs})}
    ks: dict[str, int] = {}
    t0 = time.perf_counter()
    for job in jobs:
        trace = traces[job.seed]
        if job.kind == "matched_random":
            spec = camp.spec(job.run_id, job.seed, role="matched_random", draw=job.draw,
                             matched_to=job.policy.label, reference_k=ks[job.k_from_run],
                             reference_run_id=job.k_from_run)
            policy = get_policy("matched_random")
        elif job.kind == "no_sync":
            spec, policy = camp.spec(job.run_id, job.seed, role="no_sync"), get_policy("no_sync")
        else:
            spec = camp.spec(job.run_id, job.seed, role="policy")
            policy = get_policy(job.policy.name, **job.policy.params)
        out = sim.replay(spec, trace, policy)
        ks[job.run_id] = k_observed(out.requests, out.merges, spec.horizon_s,
                                    spec.merge_duration_s)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2, help="local worker processes")
    ap.add_argument("--seeds", type=int, default=40, help="25 replays per seed")
    ap.add_argument("--ref-jobs", type=int, default=250,
                    help="replays timed for the bare reference (a prefix of the plan)")
    ap.add_argument("--keep", type=Path, default=None, help="write the runs here and keep them")
    args = ap.parse_args()

    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.campaign import load_campaign, plan_campaign
    from evalkit.replay.executors import warm_imports
    from evalkit.replay.sweep import run_campaign

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweepbench.toml"
        path.write_text(CAMPAIGN.format(seeds=args.seeds))
        camp = load_campaign(path)
        protocol = load_protocol(None)
        jobs = plan_campaign(camp)
        warm_imports(camp)                  # one-off import cost is not per-replay cost
        ref_jobs = jobs[:args.ref_jobs]
        bare_loop(camp, ref_jobs[:5])       # warm caches (numpy, policy modules)
        t_bare = bare_loop(camp, ref_jobs)
        bare_rate = len(ref_jobs) / t_bare
        t0 = time.perf_counter()            # the same replays through the serial executor
        serial = run_campaign(camp, Path(tmp) / "serial", jobs=ref_jobs, progress=False,
                              protocol=protocol)
        t_serial = time.perf_counter() - t0
        assert serial.ok and serial.count("ran") == len(ref_jobs), serial.format()
        serial_rate = len(ref_jobs) / t_serial
        runs = args.keep or Path(tmp) / "runs"
        t0 = time.perf_counter()
        summary = run_campaign(camp, runs, n_jobs=args.jobs, progress=False, protocol=protocol)
        t_sweep = time.perf_counter() - t0
        assert summary.ok and summary.count("ran") == len(jobs), summary.format()
        n_dirs = sum(1 for p in Path(runs).iterdir() if not p.name.startswith("."))
    rate = len(jobs) / t_sweep
    per_worker = t_sweep * args.jobs / len(jobs)
    print(f"campaign: {len(jobs)} replays ({args.seeds} seeds x 25), {n_dirs} run dirs written; "
          f"{os.cpu_count()} CPUs, --jobs {args.jobs}")
    print(f"bare sim.replay loop (1 process, no writes, {len(ref_jobs)} replays): "
          f"{bare_rate:7.1f} replays/s  ({1e3 / bare_rate:.1f} ms/replay)")
    overhead = 1e3 / serial_rate - 1e3 / bare_rate
    print(f"evalkit sweep, serial executor (1 process, same {len(ref_jobs)} replays):    "
          f"{serial_rate:7.1f} replays/s  -> sweep overhead {overhead:.1f} ms/replay "
          f"(checks, run.json, Parquet writes)")
    print(f"evalkit sweep, local executor ({args.jobs} workers, all {len(jobs)}, "
          f"incl. preflight): {rate:7.1f} replays/s  ({t_sweep:.1f} s)")
    print(f"sweep / bare = {rate / bare_rate:.2f} (ideal ~{args.jobs}: {args.jobs} workers, each "
          f"{per_worker * 1e3:.1f} ms/replay of wall time)")
    print(f"target >= 10 replays/s: {'met' if rate >= 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
