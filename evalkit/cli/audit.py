"""CLI commands: ``evalkit audit`` (write the report), ``evalkit gate`` (CI exit code) and
``evalkit diff`` (what moved between two audits)."""

from __future__ import annotations

import os
import sys

import click

_accept_vouched = click.option(
    "--accept-vouched", is_flag=True, default=False,
    help="checks the input cannot evaluate (a summary table without K, pairing, corridor, "
    "merge-length or open-loop evidence) do not block; the report marks the claim as vouched")

_challenge = click.option(
    "--challenge", "challenge", default=None, type=click.Path(), metavar="CHALLENGE.json",
    help="the reviewer's challenge ('evalkit plan challenge', with its ledger.jsonl beside "
    "it): the plan must have been frozen under it as the claim's first attempt; without it "
    "the campaign is self-registered and stops at matched_budget")


@click.command("audit")
@click.argument("input_path", metavar="INPUT", type=click.Path())
@click.option("--protocol", "protocol", default=None, metavar="NAME|PATH",
              help="bundled protocol name or a TOML file (default: diloco-slo)")
@click.option("--out", "out_dir", default="audit-report", show_default=True,
              type=click.Path(file_okay=False), help="directory for the report")
@click.option("--alpha", type=float, default=None, help="override the protocol's alpha")
@click.option("--seed", type=int, default=0, show_default=True,
              help="seed for Monte Carlo and bootstrap parts (same seed, same audit.json)")
@_accept_vouched
@_challenge
def audit_cmd(input_path, protocol, out_dir, alpha, seed, accept_vouched, challenge):
    """Audit a runs directory or per-run summary table (CSV/Parquet) and write
    report.html, report.md, audit.json and figures into --out."""
    from evalkit.compose import run_audit

    from evalkit.audit.protocol import load_protocol
    from evalkit.runlog.store_url import local_view

    proto = load_protocol(protocol).with_accept_vouched(accept_vouched)
    with local_view(input_path) as (local, view):   # a run store URL: its complete runs
        result = run_audit(local, out_dir, protocol=proto, alpha=alpha, seed=seed,
                           challenge=challenge)
        for note in view.notes() if view is not None else []:
            click.echo(f"  excluded {note}")
    click.echo(f"audited {len(result.claims)} claim(s) against protocol "
               f"{result.protocol.name} (alpha = {result.alpha:g})")
    for claim in result.claims:
        click.echo(f"  {claim.regime}/{claim.policy}: {claim.tier or 'no tier'} -- "
                   f"{claim.verdict}")
    for excluded in result.runset.excluded:
        click.echo(f"  excluded {excluded['run_id']}: {excluded['reason']}")
    published = result.published
    if published is not None and published.note:
        click.echo(f"note: {published.note}", err=True)
    click.echo(f"report: {os.path.join(out_dir, 'report.html')}  (also report.md, audit.json)")


@click.command("gate")
@click.argument("input_path", metavar="INPUT|AUDIT.json", type=click.Path())
@click.option("--policy", required=True, help="the policy whose claim gates the build")
@click.option("--regime", default=None, help="regime of the claim (needed if several)")
@click.option("--tier", default="matched_budget", show_default=True,
              help="tier the policy must reach")
@click.option("--baseline", "baseline", default=None, metavar="OLD/audit.json",
              type=click.Path(), help="an earlier audit: also fail (exit 1) when any claim's "
              "tier is now below the tier it reached there")
@click.option("--accept-protocol-change", is_flag=True, default=False,
              help="with --baseline: a protocol whose rules (content hash) differ from the "
              "baseline's does not fail the gate; the output says the protocol changed")
@click.option("--protocol", "protocol", default=None, metavar="NAME|PATH")
@click.option("--alpha", type=float, default=None, help="override the protocol's alpha")
@click.option("--seed", type=int, default=0, show_default=True)
@_accept_vouched
@_challenge
@click.option("--sequential", is_flag=True, default=False,
              help="decide by the group-sequential test of the mean gain (campaigns planned "
              "as sequential only): exit 0 pass, 1 fail / not better / max seeds reached, "
              "4 continue")
@click.option("--min-effect", type=float, default=None,
              help="--sequential: smallest gain of interest, a share of V (0.005 = 0.5 pp); a "
              "pass needs the mean gain above it (default and lowest allowed: the protocol's "
              "gain_significant.min_effect)")
@click.option("--verbose", is_flag=True, default=False,
              help="every check up to TIER with what it expected and found, the notes and "
              "the excluded runs (default: a one-screen summary)")
def gate_cmd(input_path, policy, regime, tier, baseline, accept_protocol_change, protocol,
             alpha, seed, accept_vouched, challenge, sequential, min_effect, verbose):
    """Exit 0 when POLICY reaches TIER (and, with --baseline, no claim fell below the
    baseline's tier and the protocol's rules are the baseline's), 1 when it does not
    (underpowered included), 2 on bad input.
    With --sequential: 4 when the group-sequential test has not decided yet (run more
    seeds).
    INPUT is a runs directory or summary table (audited here), or the audit.json of
    'evalkit audit' (or its --out directory) under the same rules and seed: read, not
    audited again."""
    from evalkit.audit.gate_api import gate_document

    _, _, _, decision = gate_document(
        input_path, policy, regime, tier, protocol=protocol, alpha=alpha, seed=seed,
        accept_vouched=accept_vouched, challenge=challenge, baseline=baseline,
        accept_protocol_change=accept_protocol_change, sequential=sequential,
        min_effect=min_effect, verbose=verbose,
        notes=lambda note: click.echo(f"excluded {note}", err=True))
    for line in decision.lines:
        click.echo(line)
    sys.exit(decision.exit_code)


@click.command("diff")
@click.argument("old", metavar="OLD/audit.json", type=click.Path())
@click.argument("new", metavar="NEW/audit.json", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "markdown"]), default="text",
              show_default=True, help="markdown: a table for a pull-request comment")
@click.option("--fail-on-protocol-change", is_flag=True, default=False,
              help="exit 1 when the two audits' protocol rules (content hash) differ")
def diff_cmd(old, new, fmt, fail_on_protocol_change):
    """What moved between two audits, per claim: tier, verdict, G and its CI, p.
    Exit 0 whatever moved (use gate --baseline to fail on a drop), 1 with
    --fail-on-protocol-change when the protocol's rules differ; 2 on bad input."""
    from evalkit.report.diff import diff_audits
    from evalkit.document.schema import load_audit

    result = diff_audits(load_audit(old), load_audit(new))
    text = (result.format_markdown(old, new) if fmt == "markdown"
            else result.format_text(old, new))
    click.echo(text, nl=False)
    if fail_on_protocol_change and result.protocol_changed:
        click.echo("diff FAIL: the protocol's rules changed (--fail-on-protocol-change)",
                   err=True)
        sys.exit(1)


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(audit_cmd)
    cli.add_command(gate_cmd)
    cli.add_command(diff_cmd)
