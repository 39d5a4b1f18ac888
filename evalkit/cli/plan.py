"""CLI: ``evalkit plan freeze``, a campaign's design fixed before its runs (pre-registration)."""

from __future__ import annotations

from pathlib import Path

import click

from evalkit.errors import InputError


@click.group("plan")
def plan_group():
    """Campaign plans: the design fixed before the runs (see evalkit.runlog.plan)."""


@plan_group.command("freeze")
@click.argument("campaign", type=click.Path(path_type=Path))
@click.option("--protocol", "protocol", default=None,
              help="protocol the campaign will be audited under (bundled name or .toml file; "
                   "default diloco-slo)")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="plan file to write (e.g. RUNS/plan.json, before 'evalkit sweep --out RUNS')")
def freeze_cmd(campaign, protocol, out):
    """Freeze CAMPAIGN's plan: every planned run, every draw's RNG seed, the protocol's hash,
    alpha, the alternative and the design.  An existing file is never overwritten."""
    from evalkit.replay.plan import freeze_plan
    from evalkit.runlog.plan import plan_sha256, write_plan

    if out.exists():
        raise InputError("the plan file exists already", file=str(out),
                         fix="a plan is frozen once: write it to a new path (or remove the old "
                             "one if no run was written under it)")
    plan = freeze_plan(campaign, protocol)
    write_plan(plan, out)
    click.echo(f"plan of {plan['campaign']['name']}: {len(plan['runs'])} runs, protocol "
               f"{plan['protocol']['name']} v{plan['protocol']['version']} "
               f"(content sha256 {plan['protocol']['content_sha256'][:12]}), alpha "
               f"{plan['alpha']:g} {plan['alternative']}, design {plan['design']['kind']} "
               f"-> {out} (plan sha256 {plan_sha256(plan)[:12]})")


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(plan_group)


def _attach_power() -> None:
    from evalkit.cli.plan_power import power_cmd

    plan_group.add_command(power_cmd)


_attach_power()
