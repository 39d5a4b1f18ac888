"""CLI commands: ``evalkit audit`` (write the report) and ``evalkit gate`` (CI exit code)."""

from __future__ import annotations

import sys

import click


def _print_checks(claim, tier_name: str, protocol) -> None:
    """The checks that decide whether ``claim`` reaches ``tier_name``: its tier and below."""
    order = protocol.tier_names
    upto = order[:order.index(tier_name) + 1]
    for check in claim.checks:
        if check.tier not in upto:
            continue
        state = "pass" if check.passed else ("not evaluable" if check.passed is None else "FAIL")
        if check.passed is None and not check.blocking:
            state += " (noted)"
        click.echo(f"  [{state}] {check.tier}/{check.name}")
        click.echo(f"      expected: {check.expected}")
        click.echo(f"      found:    {check.found}")
        if check.blocking and check.recommendation:
            click.echo(f"      fix:      {check.recommendation}")


@click.command("audit")
@click.argument("input_path", metavar="INPUT", type=click.Path())
@click.option("--protocol", "protocol", default=None, metavar="NAME|PATH",
              help="bundled protocol name or a TOML file (default: diloco-slo)")
@click.option("--out", "out_dir", default="audit-report", show_default=True,
              type=click.Path(file_okay=False), help="directory for the report")
@click.option("--alpha", type=float, default=None, help="override the protocol's alpha")
@click.option("--seed", type=int, default=0, show_default=True,
              help="seed for Monte Carlo and bootstrap parts (same seed, same audit.json)")
def audit_cmd(input_path, protocol, out_dir, alpha, seed):
    """Audit a runs directory or per-run summary table (CSV/Parquet) and write
    report.html, report.md, audit.json and figures into --out."""
    from evalkit.audit import run_audit

    result = run_audit(input_path, out_dir, protocol=protocol, alpha=alpha, seed=seed)
    click.echo(f"audited {len(result.claims)} claim(s) against protocol "
               f"{result.protocol.name} (alpha = {result.alpha:g})")
    for claim in result.claims:
        click.echo(f"  {claim.regime}/{claim.policy}: {claim.tier or 'no tier'} -- "
                   f"{claim.verdict}")
    for excluded in result.campaign.excluded:
        click.echo(f"  excluded {excluded['run_id']}: {excluded['reason']}")
    click.echo(f"report: {out_dir}/report.html  (also report.md, audit.json)")


@click.command("gate")
@click.argument("input_path", metavar="INPUT", type=click.Path())
@click.option("--policy", required=True, help="the policy whose claim gates the build")
@click.option("--regime", default=None, help="regime of the claim (needed if several)")
@click.option("--tier", default="matched_budget", show_default=True,
              help="tier the policy must reach")
@click.option("--protocol", "protocol", default=None, metavar="NAME|PATH")
@click.option("--alpha", type=float, default=None, help="override the protocol's alpha")
@click.option("--seed", type=int, default=0, show_default=True)
def gate_cmd(input_path, policy, regime, tier, protocol, alpha, seed):
    """Exit 0 when POLICY reaches TIER, 1 when it does not (underpowered included),
    2 on bad input."""
    from evalkit.audit import audit_campaign

    from evalkit.audit.protocol import load_protocol

    proto = load_protocol(protocol).with_alpha(alpha)
    proto.tier(tier)                     # unknown tier -> InputError -> exit 2
    # checks above the gated tier cannot change the verdict: leave them out
    result = audit_campaign(input_path, protocol=proto, seed=seed, max_tier=tier)
    claim = result.claim(policy, regime)
    reached = claim.tier
    ok = reached is not None and proto.tier_names.index(reached) >= proto.tier_names.index(tier)
    verdict = "PASS" if ok else "FAIL"
    click.echo(f"gate {verdict}: {claim.regime}/{claim.policy} reached "
               f"{reached or 'no tier'}; required {tier} (alpha = {proto.alpha:g})")
    click.echo(f"  {claim.verdict}")
    if not ok:
        click.echo(f"  {claim.stop_reason}")
    _print_checks(claim, tier, proto)
    sys.exit(0 if ok else 1)


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(audit_cmd)
    cli.add_command(gate_cmd)
