"""``evalkit gate --sequential``: the claim's verdict from its e-process
(:mod:`evalkit.audit.sequential`), printed with the numbers it rests on."""

from __future__ import annotations

import click

from evalkit.errors import InputError


def sequential_gate(result, claim, protocol, tier: str, min_effect: float,
                    with_baseline: bool) -> int:
    """Print the verdict of ``claim`` and return its exit code (0 pass, 1 fail, futile,
    exhausted or refused, 4 continue)."""
    from evalkit.audit.sequential import sequential_verdicts

    if with_baseline:
        raise InputError("--baseline compares fixed-design tiers; it does not combine with "
                         "--sequential", column="--baseline",
                         fix="drop --baseline, or gate without --sequential")
    verdicts = sequential_verdicts(result, protocol, tier, min_effect)
    mine = next(v for v in verdicts if (v.regime, v.policy) == (claim.regime, claim.policy))
    for line in mine.lines():
        click.echo(line)
    others = [v for v in verdicts if v is not mine]
    if others:
        click.echo("  other claims: " + "; ".join(f"{v.regime}/{v.policy} {v.decision}"
                                                  for v in others))
    return mine.exit_code


def fixed_gate_note(result) -> str | None:
    """A note for a fixed-design gate on a campaign planned as sequential."""
    from evalkit.audit.sequential import planned_design

    design, _, _ = planned_design(result.campaign)
    if design is None:
        return None
    return ("this campaign was planned as sequential: if it was stopped on its results "
            "(sweep --until-decided), the fixed-n p ignores that; decide with --sequential")
