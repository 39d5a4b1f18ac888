"""CLI commands: ``evalkit replay`` (one run), ``evalkit sweep`` (a campaign), ``evalkit demo``.

The replay layer (numpy, pandas, pyarrow) is imported inside the commands, so
``evalkit --help`` stays fast.
"""

from __future__ import annotations

import math
import os
import sys
from importlib import resources
from pathlib import Path

import click

from evalkit.errors import EXIT_BAD_INPUT, InputError
from evalkit.limits import capped_name


def _load_trace(path: Path, fmt: str | None):
    from evalkit.replay.traces import import_trace, read_trace

    if not path.exists():
        raise InputError("trace file not found", file=str(path), fix="check the path")
    if fmt in (None, "parquet"):
        if path.suffix not in (".parquet", ".pq") and fmt is None:
            raise InputError("cannot tell the trace format", file=str(path),
                             fix="pass --trace-format azure|burstgpt|mooncake|vllm-bench, or "
                                 "import it with `evalkit trace import`")
        return read_trace(path)
    return import_trace(path, fmt)


@click.command("replay")
@click.option("--trace", "trace_path", required=True, type=click.Path(path_type=Path),
              help="trace Parquet (evalkit trace import/generate) or a raw file with --trace-format")
@click.option("--trace-format", default=None, help="azure|burstgpt|mooncake|vllm-bench|parquet")
@click.option("--policy", required=True,
              help="built-in or plugin name, or package.module:ClassName (evalkit policies list)")
@click.option("--seed", required=True, type=int)
@click.option("--param", "params", multiple=True, help="policy parameter k=v (repeatable)")
@click.option("--backend", default="sim", show_default=True)
@click.option("--backend-config", "backend_cfg", multiple=True, help="backend setting k=v")
@click.option("--sim-params", "sim_params", type=click.Path(path_type=Path), default=None,
              help="sim backend: a twin file from `evalkit sim fit` (--backend-config "
                   "settings override it); run.json records its sha256")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="runs dir")
@click.option("--regime", default="adhoc", show_default=True)
@click.option("--run-id", default=None, help="default: {regime}__{policy}__s{seed}")
@click.option("--horizon-s", type=float, default=None, help="default: the trace's window")
@click.option("--merge-duration-s", type=float, default=8.0, show_default=True)
@click.option("--inner-step-s", type=float, default=0.5, show_default=True)
@click.option("--h-min", type=int, default=128, show_default=True)
@click.option("--h-max", type=int, default=512, show_default=True)
@click.option("--slo-e2e-s", type=float, default=8.0, show_default=True)
@click.option("--reference", type=click.Path(path_type=Path), default=None,
              help="matched_random / calibrated_offline: run directory whose observed K to use")
@click.option("--no-sync-run", "no_sync_run", type=click.Path(path_type=Path), default=None,
              help="oracle policies (calibrated_offline): the recorded no-sync run of the same "
                   "trace and seed, whose request intervals the oracle sees")
@click.option("--endpoint", default=None, help="vllm backend: URL of a running OpenAI server")
@click.option("--model", "served_model", default=None, help="vllm backend: served model name")
@click.option("--serve-vllm", "serve_vllm", default=None,
              help="vllm backend: launch `vllm serve MODEL` for the run")
def replay_cmd(trace_path, trace_format, policy, seed, params, backend, backend_cfg, out,
               regime, run_id, horizon_s, merge_duration_s, inner_step_s, h_min, h_max,
               slo_e2e_s, reference, endpoint=None, served_model=None, serve_vllm=None,
               sim_params=None, no_sync_run=None):
    """Replay one trace under one policy and write a run directory into OUT."""
    from evalkit.replay.job import resolve_inputs
    from evalkit.policies import get_policy, parse_param
    from evalkit.replay.runner import run_one
    from evalkit.replay.spec import ReplaySpec

    trace = _load_trace(trace_path, trace_format)
    kv = dict(parse_param(p) for p in params)
    pol = get_policy(policy, **kv)
    policy = pol.name                   # the registry name, also for package.module:Class
    horizon = horizon_s if horizon_s is not None else float(math.ceil(trace.duration_s))
    role = pol.role
    spec = ReplaySpec(run_id=run_id or capped_name(f"{regime}__{policy}__s{seed}"), seed=seed,
                      regime=regime, role=role, backend=backend,
                      merge_duration_s=merge_duration_s, horizon_s=horizon,
                      inner_step_s=inner_step_s, h_min=h_min, h_max=h_max,
                      slo={"e2e_s": slo_e2e_s, "ttft_s": None, "tpot_s": None},
                      backend_config=dict(parse_param(p) for p in backend_cfg))
    for key, value in (("endpoint", endpoint), ("model", served_model),
                       ("serve_vllm", serve_vllm)):
        if value is not None:
            spec.backend_config[key] = value
    if sim_params is not None:
        if backend != "sim":
            raise InputError(f"--sim-params is a sim backend setting, but --backend is "
                             f"{backend!r}", column="--sim-params",
                             fix="use --backend sim, or drop --sim-params")
        from evalkit.replay.backends.sim.twin import twin_backend_config
        spec.backend_config = twin_backend_config(sim_params, spec.backend_config)
    if reference is None and role == "matched_random" and "k" not in kv:
        raise InputError("matched_random needs K", column="--reference",
                         fix="pass --reference RUN_DIR (its observed K) or --param k=K")
    _check_no_sync_run(pol, no_sync_run)
    # the same resolution as a sweep's job (evalkit.replay.job): paths as given
    spec, extra = resolve_inputs(spec, Path(), k_from=reference, intervals_from=no_sync_run,
                                 trace=trace)
    res = run_one(spec, trace, pol, out, policy_label=policy, extra_requested=extra)
    state = "complete" if res.complete else f"INCOMPLETE ({(res.error or '').splitlines()[0]})"
    click.echo(f"{res.path}: {state}, K observed = {res.k_observed}")
    if not res.complete:      # recorded as an incomplete run; exit 1 is reserved for `gate`
        sys.exit(EXIT_BAD_INPUT)


def _check_no_sync_run(pol, no_sync_run) -> None:
    """An oracle needs the recorded no-sync run (as in a sweep); any other policy takes none."""
    if pol.oracle and no_sync_run is None:
        raise InputError(f"{pol.name} is an oracle: it plans on the request intervals of the "
                         "recorded no-sync run of the same trace and seed, and none was given",
                         column="--no-sync-run",
                         fix="record it first (evalkit replay --policy no_sync with the same "
                             "trace, seed and settings) and pass --no-sync-run RUN_DIR")
    if not pol.oracle and no_sync_run is not None:
        raise InputError(f"--no-sync-run is for oracle policies; {pol.name} is not one",
                         column="--no-sync-run", fix="drop --no-sync-run")


@click.command("sweep")
@click.argument("campaign", type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=str,
              help="runs dir, or a run store URL: s3://BUCKET/PREFIX (gs://, az://)")
@click.option("--executor", "executor", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="local processes, or one Ray task per replay")
@click.option("--address", default=None,
              help="ray: cluster address (HOST:PORT, ray://HOST:PORT or auto); "
                   "default: start a local Ray instance")
@click.option("--jobs", "n_jobs", type=int, default=None,
              help="local: worker processes (default 1); ray: most tasks in flight "
                   "(default: no cap)")
@click.option("--cpus-per-task", type=float, default=None, help="ray: CPUs per replay (default 1)")
@click.option("--gpus-per-task", type=float, default=None, help="ray: GPUs per replay (default 0)")
@click.option("--shard", "shard_spec", default=None, metavar="I/N",
              help="run only part I of N (0-based) of the campaign; a matched-random draw is "
                   "always in the same part as its reference run")
@click.option("--check", "check", is_flag=True,
              help="run nothing: validate every planned run and list those missing, "
                   "incomplete, stale, damaged or unreadable (exit 2 if any)")
@click.option("--progress/--no-progress", default=None, help="progress bar (default: on a tty)")
@click.option("--break-lock", "break_lock", is_flag=True,
              help="first remove the lock left by a sweep that is gone (e.g. of another host, "
                   "which is never taken over automatically); refused while it is held")
@click.option("--until-decided", is_flag=True, default=False,
              help="sequential campaigns: run seeds in batches, audit after each, stop when "
                   "every claim's group-sequential test has decided")
@click.option("--max-seeds", type=int, default=None,
              help="--until-decided: stop after this many seeds (at most the plan's max_seeds)")
@click.option("--batch", type=int, default=None,
              help="--until-decided: seeds per batch (default: the plan's looks: its "
              "first_look, then every batch)")
@click.option("--min-effect", type=float, default=None,
              help="--until-decided: smallest gain of interest (a pass needs the mean gain "
                   "above it; default and lowest allowed: the protocol's "
                   "gain_significant.min_effect)")
def sweep_cmd(campaign, out, executor, address, n_jobs, cpus_per_task, gpus_per_task,
              shard_spec, check, progress, break_lock, until_decided, max_seeds, batch,
              min_effect):
    """Run (or resume) CAMPAIGN.toml: no-sync + policies + matched-random draws per seed."""
    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.campaign import load_campaign, parse_shard
    from evalkit.replay.sweep import check_campaign, run_campaign

    shard = parse_shard(shard_spec) if shard_spec is not None else None
    if n_jobs is not None and n_jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {n_jobs}", column="--jobs",
                         fix="e.g. --jobs 2")
    camp = load_campaign(campaign)
    if break_lock and check:
        raise InputError("--break-lock and --check do not go together", column="--break-lock",
                         fix="--check writes nothing; drop one of them")
    from evalkit.runlog.store_url import is_store_url, local_path, open_store

    if not is_store_url(out):
        out = local_path(out)
    if break_lock:
        from evalkit.replay.storelock import break_leases, break_locks

        notes = (break_leases(open_store(out), shard) if is_store_url(out)
                 else break_locks(out, shard)) or [f"--break-lock: no lock to break in {out}"]
        for note in notes:
            click.echo(f"note: {note}", err=True)
    if until_decided or max_seeds is not None or batch is not None:
        from evalkit.cli.sweep_sequential import until_decided_cmd

        if is_store_url(out):
            raise InputError("--until-decided audits a local runs directory between batches",
                             file=out, column="--until-decided",
                             fix="sweep the batches into a runs directory, or sweep the "
                                 "whole plan into the store without --until-decided")

        sys.exit(until_decided_cmd(camp, out, until_decided, max_seeds, batch, min_effect,
                                   shard, check, n_jobs=n_jobs, progress=progress,
                                   executor_kind=executor, address=address,
                                   cpus_per_task=cpus_per_task, gpus_per_task=gpus_per_task))
    if check:
        report = check_campaign(camp, out, shard=shard)
        click.echo(report.format())
        sys.exit(0 if report.complete else EXIT_BAD_INPUT)
    summary = run_campaign(camp, out, n_jobs=n_jobs, progress=progress, shard=shard,
                           executor_kind=executor, address=address,
                           cpus_per_task=cpus_per_task, gpus_per_task=gpus_per_task,
                           protocol=load_protocol(None))
    click.echo(summary.format())
    if not summary.ok:        # failed or blocked runs are listed above; resume reruns them
        sys.exit(EXIT_BAD_INPUT)


def bundled_campaign() -> Path:
    """The bursty campaign shipped inside the package (examples/bursty.toml links to it)."""
    return Path(str(resources.files("evalkit.replay").joinpath("campaigns/bursty.toml")))


@click.command("demo")
@click.option("--out", "out", default="evalkit-demo", show_default=True,
              type=click.Path(path_type=Path))
@click.option("--jobs", "n_jobs", type=int, default=None,
              help="worker processes (default: number of CPUs, at most 8)")
@click.option("--progress/--no-progress", default=None)
def demo_cmd(out, n_jobs, progress):
    """Sweep the bundled bursty campaign on the simulator, audit it, say where the report is."""
    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.sweep import run_campaign

    n_jobs = n_jobs or min(8, os.cpu_count() or 1)
    runs = out / "runs"
    summary = run_campaign(bundled_campaign(), runs, n_jobs=n_jobs, progress=progress,
                           protocol=load_protocol(None))
    click.echo(summary.format())
    if not summary.ok:
        click.echo("some runs failed; the audit below treats them as missing", err=True)
    audited = False
    try:
        from evalkit.compose import run_audit

        report_dir = out / "report"
        result = run_audit(runs, report_dir)
        verdict = getattr(result, "verdict", None)
        click.echo(f"audit{f' verdict: {verdict}' if verdict else ''}")
        click.echo(f"report: {report_dir / 'report.html'}")
        audited = True
    except ImportError as exc:          # the audit (or a statistic it needs) is not there yet
        click.echo(f"audit not available ({exc}); writing the per-run summary instead", err=True)
    if not audited:
        from evalkit.runlog import csv_cells
        from evalkit.runlog.summary import summarize_runs

        table = summarize_runs(runs)
        path = out / "summary.csv"
        csv_cells.to_csv(table, path)
        click.echo(f"per-run summary: {path}")
    if not summary.ok:
        sys.exit(EXIT_BAD_INPUT)


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(replay_cmd)
    cli.add_command(sweep_cmd)
    cli.add_command(demo_cmd)
