"""CLI: ``evalkit plan challenge`` (the reviewer's nonce) and ``evalkit plan freeze``, a
campaign's design fixed before its runs (pre-registration), under a challenge or self-registered."""

from __future__ import annotations

import hashlib
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
@click.option("--challenge", "challenge_file", type=click.Path(path_type=Path), default=None,
              help="the reviewer's challenge ('evalkit plan challenge'): the draws' RNG seeds "
                   "and the seed order are derived from it; the freeze is appended to the "
                   "ledger.jsonl beside it (without it the plan is self-registered)")
def freeze_cmd(campaign, protocol, out, challenge_file):
    """Freeze CAMPAIGN's plan: every planned run, every draw's RNG seed, the protocol's hash,
    alpha, the alternative and the design.  An existing file is never overwritten."""
    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.plan import freeze_plan
    from evalkit.runlog.challenge import (append_attempt, claim_attempts, load_challenge,
                                          read_ledger)
    from evalkit.runlog.plan import plan_sha256, write_plan

    if out.exists():
        raise InputError("the plan file exists already", file=str(out),
                         fix="a plan is frozen once: write it to a new path (or remove the old "
                             "one if no run was written under it)")
    challenge = load_challenge(challenge_file) if challenge_file is not None else None
    if challenge is not None:
        read_ledger(challenge_file)          # a broken ledger is refused before anything
    plan = freeze_plan(campaign, load_protocol(protocol), challenge,
                       str(challenge_file) if challenge_file else None)
    write_plan(plan, out)
    sha = plan_sha256(plan)
    click.echo(f"plan of {plan['campaign']['name']}: {len(plan['runs'])} runs, protocol "
               f"{plan['protocol']['name']} v{plan['protocol']['version']} "
               f"(content sha256 {plan['protocol']['content_sha256'][:12]}), alpha "
               f"{plan['alpha']:g} {plan['alternative']}, design {plan['design']['kind']} "
               f"-> {out} (plan sha256 {sha[:12]})")
    if challenge is None:
        click.echo("self-registered: no challenge, so the audit cannot take the draw seeds "
                   "and seed order as chosen by anyone but the campaign's author (tiers above "
                   "matched_budget need 'evalkit plan freeze --challenge')")
        return
    entry = append_attempt(challenge_file, plan, sha)
    settings = plan["campaign"]["settings"]
    for label in sorted({p["label"] for p in settings["policies"]}):
        k = len(claim_attempts(read_ledger(challenge_file), settings["regime"], label))
        note = "" if k == 1 else (f" -- only the first attempt counts: the audit refuses "
                                  f"this one for {settings['regime']}/{label}")
        click.echo(f"challenge {challenge['id']}: attempt {k} at {settings['regime']}/"
                   f"{label} (ledger entry {entry['seq']}, commitment "
                   f"{plan['challenge']['commitment'][:12]}){note}")


@plan_group.command("challenge")
@click.argument("campaign", type=click.Path(path_type=Path))
@click.option("--protocol", "protocol", default=None,
              help="protocol the campaign will be audited under (bundled name or .toml file; "
                   "default diloco-slo)")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="challenge file to write, in the reviewer's keeping (the CI baseline, the "
                   "reviewer's repository); its ledger.jsonl goes beside it")
def challenge_cmd(campaign, protocol, out):
    """Issue a challenge for CAMPAIGN (the reviewer runs this once the campaign file is
    fixed): a random nonce with an id and the time, bound to the campaign file's and the
    protocol's hashes.  An existing file is never overwritten."""
    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.campaign import load_campaign
    from evalkit.runlog.challenge import issue_challenge, write_challenge

    camp = load_campaign(campaign)          # a campaign that does not load is refused now
    proto = load_protocol(protocol)
    doc = issue_challenge(hashlib.sha256((camp.text or "").encode()).hexdigest(),
                          proto.name, proto.content_sha256)
    write_challenge(doc, out)
    click.echo(f"challenge {doc['id']} for {camp.regime} (campaign sha256 "
               f"{doc['campaign_sha256'][:12]}, protocol {proto.name} content sha256 "
               f"{proto.content_sha256[:12]}) -> {out}; keep it where the campaign's author "
               "cannot rewrite it")


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(plan_group)


def _attach_power() -> None:
    from evalkit.cli.plan_power import power_cmd

    plan_group.add_command(power_cmd)


_attach_power()
