"""CLI: ``evalkit policies list`` -- every policy a campaign or ``--policy`` can name."""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass, field

import click

from evalkit.errors import EXIT_BAD_INPUT, InputError


@dataclass
class PolicyRow:
    name: str
    source: str                         # "built-in" | "entry point (dist version)"
    spec: str                           # what resolves it: the name, or module:Class
    oracle: bool | None
    params: dict = field(default_factory=dict)   # parameter -> default ("required" if none)
    requires_signals: tuple = ()        # scraped engine signals it reads
    error: str | None = None            # a plugin that does not load


def _defaults(cls) -> dict:
    from evalkit.policies import param_defaults
    return {k: ("required" if v is inspect.Parameter.empty else v)
            for k, v in param_defaults(cls).items()}


def policy_rows() -> list[PolicyRow]:
    """Built-ins, then installed entry points (sorted); a broken plugin is a row with error."""
    from evalkit.policies import POLICIES, policy_entry_points, resolve_policy

    rows = [PolicyRow(name, "built-in", name, cls.oracle, _defaults(cls),
                      cls.requires_signals) for name, cls in POLICIES.items()]
    for name, ep in sorted(policy_entry_points().items()):
        dist = getattr(ep, "dist", None)
        source = (f"entry point ({dist.name} {dist.version})" if dist is not None
                  else "entry point")
        if name in POLICIES:
            rows.append(PolicyRow(name, source, ep.value, None,
                                  error="shadowed by the built-in of the same name; rename "
                                        "the entry point"))
            continue
        try:
            cls = resolve_policy(name)
        except InputError as exc:
            rows.append(PolicyRow(name, source, ep.value, None, error=exc.format()))
            continue
        rows.append(PolicyRow(name, source, ep.value, cls.oracle, _defaults(cls),
                              cls.requires_signals))
    return rows


def _fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={v!r}" if v != "required" else f"{k} (required)"
                     for k, v in params.items()) or "(none)"


@click.group("policies")
def policies_group():
    """Scheduling policies: built-in and installed plugins."""


@policies_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="one JSON document instead of text")
def list_cmd(as_json: bool):
    """Each policy with its parameters, defaults, oracle status and where it comes from.

    Exit 2 when an installed plugin does not load (it is listed with the error)."""
    rows = policy_rows()
    if as_json:
        click.echo(json.dumps([r.__dict__ for r in rows], indent=2, default=repr))
    else:
        for r in rows:
            oracle = {True: "oracle", False: "causal", None: "?"}[r.oracle]
            click.echo(f"{r.name}  [{r.source}; {oracle}]  {r.spec if r.spec != r.name else ''}"
                       .rstrip())
            click.echo(f"    {'ERROR: ' + r.error if r.error else _fmt_params(r.params)}")
            if r.requires_signals:
                click.echo(f"    reads engine signals: {', '.join(r.requires_signals)}")
    broken = [r.name for r in rows if r.error]
    if broken:
        click.echo(f"error: plugin(s) {', '.join(broken)} cannot be used (see above)",
                   err=True)
        sys.exit(EXIT_BAD_INPUT)


def register(cli):
    cli.add_command(policies_group)
