"""CLI commands (imports): ``evalkit import vllm-bench``, ``guidellm``, ``aiperf``,
``inference-perf`` and ``table``."""

from __future__ import annotations

import click


class _RoleChoice(click.Choice):
    """``click.Choice`` over the run-log roles, read on first use: importing
    ``evalkit.runlog`` (pandas, pyarrow) would make every ``evalkit --help`` ~0.7 s slower."""

    def __init__(self):
        super().__init__(())

    @property
    def choices(self):
        from evalkit.runlog.schema import ROLES

        return tuple(ROLES)

    @choices.setter
    def choices(self, value):   # click.Choice.__init__ assigns; the roles come from the schema
        pass


_REPLACE_OPTION = click.option(
    "--replace", is_flag=True, default=False,
    help="Replace a run of the same id already in --out: it is moved aside as "
         ".<id>.replaced-<time>, never deleted.  Without it an existing run is an error.")


def _run_options(fn):
    """The run.json options every importer takes: role, SLOs, merge window and corridor."""
    options = [
        click.option("--role", type=_RoleChoice(), default="policy", show_default=True),
        click.option("--draw", type=int, default=None, help="Draw index (matched_random only)."),
        click.option("--matched-to", default=None,
                     help="Reference policy (matched_random only)."),
        click.option("--slo-e2e", "slo_e2e_s", required=True, type=float,
                     help="End-to-end SLO, s."),
        click.option("--slo-ttft", "slo_ttft_s", type=float, default=None, help="TTFT SLO, s."),
        click.option("--slo-tpot", "slo_tpot_s", type=float, default=None, help="TPOT SLO, s."),
        click.option("--merge-duration", "merge_duration_s", type=float, default=None,
                     help="Nominal merge duration D, s (default: median merge window length)."),
        click.option("--min-gap", "min_gap_s", type=float, default=None,
                     help="Corridor min gap, s."),
        click.option("--max-gap", "max_gap_s", type=float, default=None,
                     help="Corridor max gap, s."),
        click.option("--horizon", "horizon_s", type=float, default=None,
                     help="End of the observed span, s (default: last request end)."),
        click.option("--oracle/--no-oracle", default=False, show_default=True),
        _REPLACE_OPTION,
    ]
    for option in reversed(options):       # decorators apply bottom-up: keep the listed order
        fn = option(fn)
    return fn


@click.group("import")
def import_group():
    """Write results from other tools as evalkit runs (backend 'import')."""


@import_group.command("vllm-bench")
@click.argument("result_json", type=click.Path(dir_okay=False))
@click.option("--out", "runs_dir", required=True, type=click.Path(file_okay=False),
              help="Run store to write the run into.")
@click.option("--merges", type=click.Path(dir_okay=False), default=None,
              help="CSV/JSON of merge windows (start_s, end_s); omit only for --role no_sync.")
@click.option("--merge-clock", type=click.Choice(["relative", "absolute"]), default="relative",
              show_default=True,
              help="relative: merge times are s from the first request's send; absolute: "
                   "on the bench client's perf_counter clock (as start_times).")
@click.option("--policy", required=True)
@click.option("--seed", required=True, type=int)
@click.option("--regime", default="default", show_default=True)
@_run_options
@click.option("--run-id", default=None, help="Default: REGIME-POLICY[-ROLE]-sSEED[-dDRAW].")
@click.option("--trace-name", default=None, help="Default: dataset_name of the result.")
def vllm_bench_cmd(result_json, runs_dir, **kwargs):
    """Import a `vllm bench serve --save-result --save-detailed` RESULT_JSON as one run."""
    from evalkit.interop.vllm_bench import import_vllm_bench

    path = import_vllm_bench(result_json, runs_dir, **kwargs)
    click.echo(f"wrote {path}")


@import_group.command("guidellm")
@click.argument("report", type=click.Path(dir_okay=False))
@click.option("--out", "runs_dir", required=True, type=click.Path(file_okay=False),
              help="Run store to write the runs into (one per benchmark).")
@click.option("--merges", type=click.Path(dir_okay=False), default=None,
              help="CSV/JSON of merge windows (start_s, end_s); omit only for --role no_sync.")
@click.option("--merge-clock", type=click.Choice(["absolute", "relative"]), default="absolute",
              show_default=True,
              help="absolute: Unix seconds, the clock of GuideLLM's timings (each benchmark "
                   "gets the windows in its span); relative: s from the benchmark's first "
                   "arrival (one benchmark only).")
@click.option("--benchmark", "benchmarks", type=int, multiple=True,
              help="Import only benchmark N (0-based, repeatable); default: all.")
@click.option("--incomplete", type=click.Choice(["drop", "violation"]), default="drop",
              show_default=True,
              help="Requests cut off when a benchmark ended: drop them, or count them as "
                   "failed requests.")
@click.option("--policy", required=True)
@click.option("--seed", required=True, type=int)
@click.option("--regime", default=None,
              help="Default: guidellm-STRATEGY (e.g. guidellm-poisson@4.00); with several "
                   "benchmarks the strategy is appended to the given name.")
@_run_options
@click.option("--trace-name", default=None, help="Default: guidellm-STRATEGY.")
def guidellm_cmd(report, runs_dir, benchmarks, **kwargs):
    """Import a GuideLLM REPORT (benchmarks.json): one run per benchmark; errored requests
    are failed requests (SLO violations)."""
    from evalkit.interop.guidellm import import_guidellm

    paths = import_guidellm(report, runs_dir, benchmarks=list(benchmarks) or None,
                            warn=lambda text: click.echo(f"warning: {text}", err=True),
                            **kwargs)
    for path in paths:
        click.echo(f"wrote {path}")


_HARNESS_MERGES = click.option(
    "--merges", type=click.Path(dir_okay=False), default=None,
    help="CSV/JSON of merge windows (start_s, end_s: s from the run's first arrival; one run "
         "only); omit only for --role no_sync.")
_HARNESS_REGIME = click.option(
    "--regime", default=None,
    help="Regime prefix: each run's regime is REGIME-LOAD (default: the tool's name, e.g. "
         "aiperf-concurrency@8).")


@import_group.command("aiperf")
@click.argument("path", type=click.Path())
@click.option("--out", "runs_dir", required=True, type=click.Path(file_okay=False),
              help="Run store to write the runs into (one per profiling run).")
@_HARNESS_MERGES
@click.option("--policy", required=True)
@click.option("--seed", required=True, type=int,
              help="Seed of the first run; repetition i (profile_runs/run_NNNN) gets SEED+i.")
@_HARNESS_REGIME
@_run_options
@click.option("--trace-name", default=None, help="Default: aiperf-LOAD.")
def aiperf_cmd(path, runs_dir, **kwargs):
    """Import NVIDIA AIPerf results: PATH is an artifact directory (its profile_runs/run_NNNN
    repetitions too) or its profile_export_aiperf.json / profile_export.jsonl; each run's
    per-request records become one run, failed requests are violations."""
    from evalkit.interop.aiperf import import_aiperf

    for written in import_aiperf(path, runs_dir, **kwargs):
        click.echo(f"wrote {written}")


@import_group.command("inference-perf")
@click.argument("path", type=click.Path())
@click.option("--out", "runs_dir", required=True, type=click.Path(file_okay=False),
              help="Run store to write the run into.")
@click.option("--tool-version", required=True,
              help="The inference-perf version that wrote the reports (they do not record it; "
                   "`pip show inference-perf` says it).")
@_HARNESS_MERGES
@click.option("--policy", required=True)
@click.option("--seed", required=True, type=int)
@_HARNESS_REGIME
@_run_options
@click.option("--trace-name", default=None, help="Default: inference-perf-LOAD.")
def inference_perf_cmd(path, runs_dir, **kwargs):
    """Import a kubernetes-sigs inference-perf run: PATH is its report directory or its
    per_request_lifecycle_metrics.json (report.request_lifecycle.per_request: true), with
    config.yaml beside it; one stage per run."""
    from evalkit.interop.inference_perf import import_inference_perf

    for written in import_inference_perf(path, runs_dir, **kwargs):
        click.echo(f"wrote {written}")


@import_group.command("table")
@click.argument("summary", type=click.Path(dir_okay=False))
@click.option("--out", "runs_dir", required=True, type=click.Path(file_okay=False),
              help="Run store to write the runs into.")
@_REPLACE_OPTION
def table_cmd(summary, runs_dir, replace):
    """Write a per-run SUMMARY table (CSV/Parquet) as runs with synthesised requests."""
    from evalkit.interop.summary_table import import_summary_table

    paths = import_summary_table(summary, runs_dir, replace=replace)
    click.echo(f"wrote {len(paths)} runs to {runs_dir} (requests synthesised from the table)")


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(import_group)
