"""CLI: ``evalkit report AUDIT.json --out DIR`` re-renders a report from its document alone."""

from __future__ import annotations

import os

import click


@click.command("report")
@click.argument("audit_path", metavar="AUDIT.json", type=click.Path())
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory for report.html, report.md, audit.json and figures")
def report_cmd(audit_path, out_dir):
    """Render report.html, report.md and the figures of an audit from its audit.json (or
    the report directory holding it); the runs are not needed."""
    from pathlib import Path

    from evalkit.errors import InputError
    from evalkit.document.schema import REWRITE, read_document
    from evalkit.report.publish import publish
    from evalkit.report.render import render

    doc = read_document(audit_path)
    try:
        files = render(doc)
    except (KeyError, TypeError, ValueError, IndexError) as exc:   # an edited document
        raise InputError(f"the document cannot be drawn ({type(exc).__name__}: {exc})",
                         file=str(audit_path), fix=REWRITE) from exc
    published = publish(Path(out_dir), files)
    if published is not None and published.note:
        click.echo(f"note: {published.note}", err=True)
    click.echo(f"report: {os.path.join(out_dir, 'report.html')}  (also report.md, audit.json; "
               f"{len(doc['claims'])} claim(s) of {doc['provenance'].get('campaign')})")


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(report_cmd)
