"""``evalkit sweep --until-decided``: option checks and output
(:mod:`evalkit.compose.until_decided`)."""

from __future__ import annotations

import click

from evalkit.errors import EXIT_BAD_INPUT, EXIT_OK, InputError


def until_decided_cmd(camp, out, until_decided: bool, max_seeds, batch, min_effect, shard,
                      check: bool, **sweep_kw) -> int:
    """Run the batches and print each one's verdicts; exit 0 (decided or not: the verdicts
    say which), 2 when runs failed or the options do not fit."""
    from evalkit.compose.until_decided import sweep_until_decided

    if not until_decided:
        raise InputError("--max-seeds and --batch apply to --until-decided only",
                         column="--max-seeds", fix="add --until-decided or drop them")
    if shard is not None or check:
        raise InputError("--until-decided runs whole batches of seeds and audits them; it "
                         "does not combine with --shard or --check", column="--until-decided",
                         fix="drop --shard/--check")
    summary = sweep_until_decided(camp, out, max_seeds=max_seeds, batch=batch,
                                  min_effect=min_effect, **sweep_kw)
    click.echo(summary.format())
    return EXIT_OK if summary.sweep_ok else EXIT_BAD_INPUT
