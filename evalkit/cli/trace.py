"""CLI commands (trace): import, generate, describe, slice, scale."""

from __future__ import annotations

import json
import re

import click

from evalkit.errors import InputError


def _traces():
    # Imported lazily so `evalkit --help` stays fast.
    from evalkit.replay import traces
    return traces


def _write(trace, out):
    """Write ``trace`` to ``out`` and say what was written."""
    digest = trace.write(out)
    click.echo(f"wrote {out}: {trace.n} requests over {trace.duration_s:.1f} s "
               f"({trace.rate:.3g} req/s)")
    click.echo(f"sha256 {digest}")


@click.group("trace")
def trace_group():
    """Import, generate, inspect and transform request traces."""


@trace_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", required=True,
              type=click.Choice(["azure", "mooncake", "burstgpt", "vllm-bench"]))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="TRACE.parquet")
@click.option("--no-jitter", is_flag=True,
              help="mooncake: keep quantised timestamps as they are (jitter is on by default)")
@click.option("--seed", default=0, show_default=True, type=int, help="seed for the jitter")
@click.option("--sort", is_flag=True, help="sort out-of-order timestamps instead of failing")
def import_cmd(file, fmt, out, no_jitter, seed, sort):
    """Convert FILE to an evalkit trace (one row per request kept)."""
    t = _traces()
    if no_jitter and fmt != "mooncake":
        raise InputError("--no-jitter only applies to --format mooncake", column="--no-jitter",
                         fix="drop --no-jitter")
    trace = t.import_trace(file, fmt, jitter=not no_jitter, seed=seed, sort=sort)
    meta = trace.meta
    dropped = {k: v for k, v in meta.get("dropped", {}).items() if isinstance(v, int)}
    n_dropped = sum(dropped.values())
    why = ", ".join(f"{v} {k}" for k, v in dropped.items() if v) or "none"
    click.echo(f"read {meta.get('rows_read', trace.n)} rows: kept {trace.n}, "
               f"dropped {n_dropped} ({why})")
    for note in (v for k, v in meta.get("dropped", {}).items() if not isinstance(v, int)):
        click.echo(f"note: {note}")
    if "jitter" in meta:
        j = meta["jitter"]
        if j["applied"]:
            click.echo(f"jitter: applied, uniform within {j['bucket_s']:g} s buckets "
                       f"(up to {j['max_requests_per_timestamp']} requests per timestamp), "
                       f"seed {j['seed']}")
        else:
            click.echo(f"jitter: not applied ({j.get('reason', '')})")
        grid = j.get("on_grid_fraction")
        if grid is not None and grid < 0.9:
            click.echo(f"warning: only {grid:.0%} of timestamp gaps are multiples of "
                       f"{j['bucket_s']:g} s: the data may not be quantised on one grid")
    for r in meta.get("repairs", []):
        click.echo(f"repair: {r}")
    _write(trace, out)


_GEN_PARAMS = {
    "rate": "rate", "duration": "duration_s", "burstiness": "burstiness",
    "period": "period_s", "burst": "burst_s", "phase": "phase_s",
    "quiet_rate": "quiet_rate", "busy_rate": "busy_rate",
    "mean_quiet": "mean_quiet_s", "mean_burst": "mean_burst_s",
}


@trace_group.command("generate")
@click.argument("kind", type=click.Choice(["poisson", "gamma", "square-wave", "mmpp"]))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="TRACE.parquet")
@click.option("--seed", required=True, type=int)
@click.option("--name", default=None, help="trace name (default KIND-seedS)")
@click.option("--rate", type=float, help="poisson/gamma: mean requests per second")
@click.option("--duration", type=float, help="length of the trace in seconds")
@click.option("--burstiness", type=float, help="gamma: shape b (1 = Poisson, < 1 burstier)")
@click.option("--period", type=float, help="square-wave: period (s)")
@click.option("--burst", type=float, help="square-wave: busy window per period (s)")
@click.option("--phase", type=float, help="square-wave: start of the first burst (s)")
@click.option("--quiet-rate", type=float, help="square-wave/mmpp: rate outside bursts")
@click.option("--busy-rate", type=float, help="square-wave/mmpp: rate inside bursts")
@click.option("--mean-quiet", type=float, help="mmpp: mean quiet dwell time (s)")
@click.option("--mean-burst", type=float, help="mmpp: mean burst length (s)")
@click.option("--prompt-len", default=None,
              help="512 | lognormal:MEDIAN,SIGMA[,MIN[,MAX]] | resample:TRACE.parquet:prompt_tokens")
@click.option("--output-len", default=None, help="same forms as --prompt-len")
@click.option("--lengths-from", type=click.Path(dir_okay=False), default=None,
              help="resample (prompt, output) pairs jointly from this trace")
def generate_cmd(kind, out, seed, name, prompt_len, output_len, lengths_from, **opts):
    """Generate a seeded synthetic trace of KIND."""
    t = _traces()
    params = {_GEN_PARAMS[k]: v for k, v in opts.items() if v is not None}
    if lengths_from and (prompt_len or output_len):
        raise InputError("--lengths-from resamples both lengths jointly", column="--lengths-from",
                         fix="use either --lengths-from or --prompt-len/--output-len")
    if lengths_from:
        lengths = t.resample(t.read_trace(lengths_from))
    else:
        d = t.DEFAULT_LENGTHS
        lengths = t.Lengths(
            t.parse_length(prompt_len, trace_loader=t.read_trace) if prompt_len else d.prompt,
            t.parse_length(output_len, trace_loader=t.read_trace) if output_len else d.output)
    try:
        trace = t.generate(kind, seed=seed, lengths=lengths, name=name, **params)
    except InputError as exc:
        # Name the CLI option rather than the Python parameter.
        flags = {v: "--" + k.replace("_", "-") for k, v in _GEN_PARAMS.items()}
        if exc.column in flags:
            exc.column = flags[exc.column]
            for py, flag in flags.items():
                exc.message = exc.message.replace(f"'{py}'", flag)
                exc.fix = exc.fix and re.sub(rf"\b{py}\b", flag, exc.fix)
        raise
    _write(trace, out)


@trace_group.command("describe")
@click.argument("trace_path", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="write a PNG here")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@click.option("--bin", "bin_s", type=float, default=None, help="rate bin width (s)")
@click.option("--sort", is_flag=True, help="sort out-of-order timestamps instead of failing")
def describe_cmd(trace_path, plot, as_json, bin_s, sort):
    """Rate over time, burstiness and length distributions of TRACE."""
    t = _traces()
    if bin_s is not None and not bin_s > 0:
        raise InputError(f"--bin must be > 0, got {bin_s}", column="--bin", fix="e.g. --bin 10")
    trace = t.read_trace(trace_path, sort=sort)
    d = t.describe(trace, bin_s=bin_s)
    click.echo(json.dumps(d, indent=2) if as_json else t.format_description(d))
    if plot:
        t.plot_trace(trace, plot, description=d)
        if not as_json:
            click.echo(f"plot: {plot}")


@trace_group.command("slice")
@click.argument("trace_path", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option("--start", required=True, type=float, help="window start (s)")
@click.option("--end", required=True, type=float, help="window end (s), exclusive")
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@click.option("--no-rebase", is_flag=True, help="keep original times (default: start at 0)")
@click.option("--sort", is_flag=True, help="sort out-of-order timestamps instead of failing")
def slice_cmd(trace_path, start, end, out, no_rebase, sort):
    """Keep the requests of TRACE that arrive in [START, END)."""
    t = _traces()
    trace = t.slice_window(t.read_trace(trace_path, sort=sort), start, end,
                           rebase=not no_rebase)
    _write(trace, out)


@trace_group.command("scale")
@click.argument("trace_path", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option("--factor", type=float, default=None,
              help="multiply arrival times by this (2 = half the rate)")
@click.option("--rate", type=float, default=None, help="target mean rate (req/s)")
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@click.option("--sort", is_flag=True, help="sort out-of-order timestamps instead of failing")
def scale_cmd(trace_path, factor, rate, out, sort):
    """Rescale TRACE in time, by --factor or to a target --rate."""
    t = _traces()
    if (factor is None) == (rate is None):
        raise InputError("give exactly one of --factor and --rate", column="--factor/--rate",
                         fix="e.g. --rate 8 or --factor 0.5")
    trace = t.read_trace(trace_path, sort=sort)
    trace = t.time_scale(trace, factor) if factor is not None else t.rescale_rate(trace, rate)
    _write(trace, out)


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(trace_group)
