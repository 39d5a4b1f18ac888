"""The ``evalkit`` entry point.  Command modules add themselves via ``register(cli)``."""

from __future__ import annotations

import importlib
import sys

import click

from evalkit import __version__
from evalkit.errors import InputError

COMMAND_MODULES = ("runs", "trace", "replay", "audit", "imports")


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            click.echo(f"error: {exc.format()}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="evalkit")
def cli():
    """Audit whether a claimed serving-SLO improvement is real."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"evalkit.cli.{_name}").register(cli)


def main(argv=None):
    cli.main(args=argv, prog_name="evalkit")


if __name__ == "__main__":
    main()
