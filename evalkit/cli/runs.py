"""CLI commands on run directories: ``evalkit validate`` and ``evalkit summarize``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalkit import jsonio
from evalkit.errors import InputError

FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json"}
SHORT_COLUMNS = ("run_id", "role", "policy", "seed", "draw", "n_requests", "n_failed",
                 "violation_rate", "v_ci_low", "v_ci_high", "goodput_rate", "p95_s",
                 "k_total", "k_observed", "exposure_requests", "exposure_time",
                 "arrival_rate_achieved")


def _to_json(df) -> str:
    """Records; missing -> null, infinite latencies (failed requests) -> Infinity, not null."""
    return jsonio.dumps(df.to_dict(orient="records"), infinity=True, sort_keys=False,
                        ensure_ascii=True)


def _write_table(df, fmt: str, out: Path) -> None:
    """Write atomically and durably (temporary file, fsync, rename); mode from the umask."""
    from evalkit.fsutil import atomic_write
    from evalkit.runlog import csv_cells

    if out.is_dir():
        raise InputError("--out is a directory", file=str(out),
                         fix="pass a file name ending in .csv, .parquet or .json")

    def write(tmp: Path) -> None:
        if fmt == "csv":
            csv_cells.to_csv(df, tmp)
        elif fmt == "parquet":
            df.to_parquet(tmp, index=False)
        else:
            tmp.write_text(_to_json(df))

    atomic_write(out, write)


def _choose_format(out: Path | None, fmt: str | None) -> str | None:
    if fmt is not None:
        return fmt
    if out is None:
        return None
    if out.suffix.lower() not in FORMATS:
        raise InputError(f"cannot tell the output format from the extension {out.suffix!r}",
                         file=str(out), fix="use .csv, .parquet or .json, or pass --format")
    return FORMATS[out.suffix.lower()]


@click.command("validate")
@click.argument("runs_dir", type=str)
def validate_cmd(runs_dir: str):
    """Check every run under RUNS_DIR (a folder or a run store URL, s3://BUCKET/PREFIX)
    against the run-log format (exit 0 valid, 2 otherwise)."""
    from evalkit.runlog.codes import spec_ref
    from evalkit.runlog.store_url import local_view
    from evalkit.runlog.validate import validate_runs

    with local_view(runs_dir) as (local, view):
        show = view.show if view is not None else str
        report = validate_runs(local)
        for problem in report.problems:
            click.echo(show(f"{problem.format()} [{spec_ref(problem)}]"))
        notes = view.notes() if view is not None else []
        for note in notes:             # runs whose manifest or files the store cannot give
            click.echo(f"error: {note}")
        click.echo(show(report.summary_line()))
    if not report.ok or notes:
        sys.exit(2)


@click.command("summarize")
@click.argument("runs_dir", type=str)
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Write the table here (.csv, .parquet or .json).")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet", "json"]), default=None,
              help="Output format (default: from --out's extension; a readable table otherwise).")
@click.option("--include-incomplete", is_flag=True,
              help="Also summarise runs marked complete: false (never for audits).")
@click.option("--wide", is_flag=True, help="Print every column in the readable table.")
def summarize_cmd(runs_dir: str, out: Path | None, fmt: str | None, include_incomplete: bool,
                  wide: bool):
    """One row per run: V with its Clopper–Pearson CI, latency, K, exposure, load.
    RUNS_DIR is a folder or a run store URL (s3://BUCKET/PREFIX)."""
    from evalkit.runlog.store_url import local_view
    from evalkit.runlog.summary import summarize_runs

    fmt = _choose_format(out, fmt)
    if out is None and fmt == "parquet":
        raise InputError("Parquet cannot be printed", column="--format",
                         fix="pass --out table.parquet")
    with local_view(runs_dir) as (local, view):
        df = summarize_runs(local, include_incomplete=include_incomplete)
        for note in view.notes() if view is not None else []:
            click.echo(f"excluded: {note}", err=True)
    for run in df.attrs.get("excluded", []):
        click.echo(f"excluded: {run} (incomplete run)", err=True)
    for item in df.attrs.get("unreadable", []):
        click.echo(f"excluded: {item['run_id']} ({item['reason']})", err=True)
    for line in df.attrs.get("warnings", []):
        click.echo(line, err=True)
    if out is not None:
        _write_table(df, fmt, out)
        click.echo(f"wrote {len(df)} run(s) to {out}", err=True)
    elif fmt == "csv":
        from evalkit.runlog import csv_cells

        click.echo(csv_cells.to_csv(df), nl=False)
    elif fmt == "json":
        click.echo(_to_json(df), nl=False)
    else:
        import pandas as pd

        shown = df if wide else df.loc[:, list(SHORT_COLUMNS)]
        with pd.option_context("display.width", 200, "display.max_columns", None,
                               "display.float_format", "{:.4g}".format):
            click.echo(shown.to_string(index=False))


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(validate_cmd)
    cli.add_command(summarize_cmd)
