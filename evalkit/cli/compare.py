"""CLI command: ``evalkit compare A B`` (and ``--plan``): is serving configuration B better
than A, metric by metric, with an exit code for CI."""

from __future__ import annotations

import click

EXIT_HELP = """\b
Exit codes: 0 no gated metric fails (or report only), 1 B is significantly
worse AND the CI lies beyond --max-regression on some metric, 2 bad input,
4 with --plan-file: not decided yet, run the next block of pairs."""


def _slo(e2e, ttft, tpot):
    if e2e is None:
        if ttft is not None or tpot is not None:
            raise click.BadParameter("--slo-ttft / --slo-tpot need --slo-e2e too",
                                     param_hint="--slo-e2e")
        return None
    for name, value in (("--slo-e2e", e2e), ("--slo-ttft", ttft), ("--slo-tpot", tpot)):
        if value is not None and not 0 < value < float("inf"):
            raise click.BadParameter("must be a positive number of seconds", param_hint=name)
    return {"e2e_s": e2e, "ttft_s": ttft, "tpot_s": tpot}


def _effects(raw) -> dict:
    out = {}
    for item in raw:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: write METRIC=VALUE (in the metric's unit)",
                                     param_hint="--effect")
        try:
            number = float(value)
        except ValueError:
            raise click.BadParameter(f"{item!r}: {value!r} is not a number",
                                     param_hint="--effect") from None
        if not number > 0:
            raise click.BadParameter(f"{item!r}: the effect must be > 0", param_hint="--effect")
        out[name] = number
    return out


@click.command("compare", epilog=EXIT_HELP)
@click.argument("a", type=click.Path(path_type=str))
@click.argument("b", type=click.Path(path_type=str))
@click.option("--metric", "metrics", multiple=True,
              help="Metric to compare (repeatable): violation_rate, goodput, "
                   "ttft|tpot|e2e_p50|p90|p99.  Default: the protocol's claims.")
@click.option("--margin", default=None,
              help="Equivalence margin for every metric: a number in the metric's unit, or "
                   "'5%' of A's mean (default: the protocol's per metric).")
@click.option("--max-regression", default=None,
              help="CI gate: exit 1 when B is significantly worse AND the CI lies beyond this "
                   "regression (number in the metric's unit, or 'X%' of A's mean).")
@click.option("--protocol", "protocol_file", default=None, type=click.Path(path_type=str),
              help="Comparison protocol TOML (claims, directions, margins, alpha).")
@click.option("--alpha", type=float, default=None, help="Overrides the protocol's alpha.")
@click.option("--slo-e2e", "slo_e2e", type=float, default=None,
              help="End-to-end SLO, s (needed by violation_rate and goodput for harness files).")
@click.option("--slo-ttft", "slo_ttft", type=float, default=None, help="TTFT SLO, s.")
@click.option("--slo-tpot", "slo_tpot", type=float, default=None, help="TPOT SLO, s.")
@click.option("--pair-by", default="auto", show_default=True,
              type=click.Choice(["auto", "seed", "trace", "repetition", "none"]),
              help="How runs of A and B are paired (auto: seed, else trace, else repetition "
                   "index; none: unpaired on purpose).")
@click.option("--benchmark", default=None,
              help="The GuideLLM benchmark (e.g. constant@4.00) to take from multi-benchmark "
                   "reports.")
@click.option("--tool-version", default=None,
              help="The inference-perf version, for inference-perf reports (they do not "
                   "record it).")
@click.option("--plan", "make_plan", is_flag=True, default=False,
              help="A and B are a pilot: print how many interleaved A/B pairs to run and in "
                   "which order (and write plan.json into --out).")
@click.option("--effect", "effects", multiple=True,
              help="With --plan: METRIC=E, the effect to detect (default: the margin).")
@click.option("--power", type=float, default=None,
              help="With --plan: target power (default: the protocol's).")
@click.option("--looks", type=int, default=4, show_default=True,
              help="With --plan: blocks of pairs, a decision after each.")
@click.option("--plan-file", default=None, type=click.Path(path_type=str),
              help="Decide under a plan written by --plan (each look at alpha / looks).")
@click.option("--out", "out_dir", default=None, type=click.Path(path_type=str),
              help="Write compare.html, compare.md and compare.json (plan.json with --plan).")
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print compare.json instead of the text summary.")
def compare_cmd(a, b, metrics, margin, max_regression, protocol_file, alpha, slo_e2e,
                slo_ttft, slo_tpot, pair_by, benchmark, tool_version, make_plan, effects, power,
                looks,
                plan_file, out_dir, as_json):
    """Compare serving configuration B with A: a verdict per metric (better / equivalent
    within the margin / not yet known -- N more paired runs would decide / worse)."""
    from pathlib import Path

    from evalkit.compare.document import CompareOptions, compare_sides, exit_code_of
    from evalkit.compare.plan import plan_document, read_plan
    from evalkit.compare.protocol import load_protocol, parse_amount
    from evalkit.compare.render import render_text, write_files
    from evalkit.errors import InputError
    from evalkit.jsonio import dumps, read_json
    from evalkit.limits import MAX_IMPORT_JSON_BYTES

    if alpha is not None and not 0 < alpha < 0.5:
        raise click.BadParameter("must be in (0, 0.5)", param_hint="--alpha")
    if make_plan and plan_file:
        raise click.BadParameter("--plan makes a plan; --plan-file decides under one",
                                 param_hint="--plan-file")
    protocol = load_protocol(protocol_file)
    plan = None
    if plan_file is not None:
        plan = read_plan(read_json(plan_file, limit=MAX_IMPORT_JSON_BYTES, what="plan"),
                         file=plan_file)
    options = CompareOptions(
        metrics=list(metrics),
        margin=None if margin is None else parse_amount(margin, what="--margin"),
        max_regression=None if max_regression is None else parse_amount(
            max_regression, what="--max-regression"),
        alpha=alpha, slo=_slo(slo_e2e, slo_ttft, slo_tpot), pair_by=pair_by,
        benchmark=benchmark, tool_version=tool_version, plan=plan)
    doc = compare_sides(a, b, protocol, options)
    if make_plan:
        target = protocol.power if power is None else power
        if not 0.5 <= target < 1:
            raise click.BadParameter("must be in [0.5, 1)", param_hint="--power")
        planned = plan_document(doc, effect=_effects(effects), power=target, looks=looks,
                                alpha=doc["protocol"]["alpha"])
        if out_dir is not None:
            from evalkit.fsutil import atomic_write

            text = dumps(planned)
            atomic_write(Path(out_dir) / "plan.json", lambda tmp: tmp.write_text(text))
        click.echo(dumps(planned) if as_json else _plan_text(planned), nl=not as_json)
        return 0
    if out_dir is not None:
        try:
            write_files(doc, out_dir)
        except OSError as exc:
            raise InputError(f"cannot write the comparison: {exc.strerror or exc}",
                             file=out_dir, column="--out",
                             fix="choose a writable directory") from None
    click.echo(dumps(doc) if as_json else render_text(doc), nl=False)
    return exit_code_of(doc)


def _plan_text(plan: dict) -> str:
    lines = [f"run {plan['pairs_max']} interleaved A/B pairs in {plan['looks']} block(s) of "
             f"{plan['block']} (power {plan['power']:g}, alpha {plan['alpha']:g}, each look at "
             f"{plan['alpha_per_look']:.4g}: {plan['rule']})"]
    for r in plan["metrics"]:
        lines.append(f"  {r['metric']}: pilot SD of the difference {r['sd_pilot']:.4g} "
                     f"{r['unit']}; detect {r['effect']:.4g}: {r['pairs_detect']} pairs; "
                     f"equivalence within {r['margin'] if r['margin'] is None else format(r['margin'], '.4g')}: "
                     f"{r['pairs_equivalent']} pairs")
    order = plan["order"]
    shown = ", ".join(f"{i + 1}: {o}" for i, o in enumerate(order[:8]))
    lines.append(f"order (pair: runs): {shown}{', ...' if len(order) > 8 else ''}")
    lines.append("after each block: evalkit compare A B --plan-file plan.json "
                 "(exit 4: run the next block)")
    return "\n".join(lines) + "\n"


def register(cli) -> None:
    cli.add_command(compare_cmd)
