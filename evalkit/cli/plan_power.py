"""``evalkit plan power``: seeds and draws per seed a claim needs, from pilot runs or the
fitted twin (:mod:`evalkit.stats.power`)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import click

from evalkit.errors import InputError


def pilot_from_runs(runs_dir, policy: str | None):
    """(policy label, policy V (n,), draws: n arrays) of a runs directory's claim."""
    from evalkit.runlog.summary import summarize_runs

    table = summarize_runs(runs_dir)
    draws = table[table.role == "matched_random"]
    if policy is None:
        counts = draws.groupby("matched_to").size()
        if counts.empty:
            raise InputError("the pilot has no matched-random draws", file=str(runs_dir),
                             column="role", fix="run a pilot campaign with draws per seed")
        if len(counts) > 1:
            raise InputError("the pilot has draws for several policies: "
                             + ", ".join(sorted(counts.index)), file=str(runs_dir),
                             column="--policy", fix="pick one with --policy")
        policy = str(counts.index[0])
    pol = table[(table.role == "policy") & (table.policy == policy)].set_index("seed")
    mine = draws[draws.matched_to == policy]
    seeds = sorted(set(pol.index) & set(mine.seed))
    if len(seeds) < 2:
        raise InputError(f"policy {policy!r} has a policy run and draws in {len(seeds)} seed(s) "
                         "of the pilot", file=str(runs_dir), column="--policy",
                         fix="a pilot needs >= 2 such seeds (name the policy with --policy)")
    v_pol = [float(pol.loc[s, "violation_rate"]) for s in seeds]
    v_draws = [mine[mine.seed == s].violation_rate.to_numpy(float) for s in seeds]
    return policy, v_pol, v_draws


DESIGN_OPTIONS = ("max_seeds", "block", "first_look", "spending", "gamma", "futility")


def campaign_design(path: Path) -> tuple:
    """(max_seeds, block, first_look, spending, gamma, futility) of a campaign's sequential
    ``[design]``, looking where the gate looks (:func:`evalkit.audit.sequential.planned_looks`:
    batch 1 without a first look looks first at 2 seeds).  Refused beside an option that sets
    the same thing."""
    from click.core import ParameterSource

    from evalkit.audit.sequential import planned_looks
    from evalkit.replay.campaign import load_campaign

    ctx = click.get_current_context()
    clash = [name for name in DESIGN_OPTIONS
             if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if clash:
        option = "--" + clash[0].replace("_", "-")
        raise InputError(f"{option} and --design both set the sequential design",
                         column=option,
                         fix=f"leave {option} out (the campaign's [design] sets it) or drop "
                             "--design")
    spec = load_campaign(path).design
    if spec["kind"] != "sequential":
        raise InputError("the campaign's [design] is fixed: it has no sequential design to "
                         "plan", file=str(path), column="design.kind",
                         fix='write kind = "sequential" under [design], or leave --design out '
                             'and give --max-seeds')
    # the gate's own looks: where they start later than the batch says (a look needs
    # seeds the batch alone does not give), the first look says so
    looks = planned_looks(spec, list(range(spec["max_seeds"])))
    first_look = spec.get("first_look")
    if first_look is None and looks[0] != spec["batch"]:
        first_look = looks[0]
    return (spec["max_seeds"], spec["batch"], first_look, spec["spending"], spec["gamma"],
            spec.get("futility", "zero"))


def _parse_draws(text: str) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise InputError(f"--draws must be a comma-separated list of integers >= 1, got "
                         f"{text!r}", column="--draws", fix="e.g. --draws 1,2,3,5")
    return out


def format_plan(plan, label: str) -> str:
    from evalkit.document.words import pp

    pct = f"{plan.target:.0%}"
    band = f"{plan.interval:.0%}"
    effect = (f"applied as a factor: the policy's V is {1 - plan.relative_gain:.3g} x a draw's"
              if plan.effect == "multiplicative" else "subtracted from every policy run")
    lines = [f"power plan for {label}: gain {pp(plan.gain, signed=False)} pp of V, alpha "
             f"{plan.alpha:g} {plan.alternative}, target power {pct}; within-seed sd of a draw "
             f"{pp(plan.sd_within, signed=False)} pp ({plan.model}); effect {effect}",
             f"[lo, hi]: the {band} interval of each prediction from the pilot's size "
             f"({plan.refits} redraws of the model's variance components"
             f"{' and residual pool' if plan.model.startswith('smoothed') else ''})",
             "",
             f"| draws/seed | fixed-n: seeds for {pct} [lo, hi] | fixed-n: power at {{top}} "
             f"seeds [lo, hi] | sequential: P(pass) by {{top}} [lo, hi] | sequential: seeds "
             f"for {pct} | seeds to a decision: mean [lo, hi] | median | 90th pct | "
             "P(stop: not better, futility) | P(stop: not better, last look) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    top = plan.rows[0].seeds[-1] if plan.rows else 0
    lines[3] = lines[3].replace("{top}", str(top))

    def need(n):
        return str(n) if n is not None else f"> {top}"

    for r in plan.rows:
        lo, hi = r.fixed_seeds_needed_range
        seq = r.sequential_decisions
        m_lo, m_hi = r.mean_seeds_to_decision_range
        lines.append(
            f"| {r.m} | {need(r.fixed_seeds_needed)} [{need(lo)}, {need(hi)}] | "
            f"{r.fixed_power[-1]:.2f} [{r.fixed_power_low[-1]:.2f}, "
            f"{r.fixed_power_high[-1]:.2f}] | {r.sequential_power[-1]:.2f} "
            f"[{r.sequential_power_low[-1]:.2f}, {r.sequential_power_high[-1]:.2f}] | "
            f"{need(r.sequential_seeds_needed)} | {r.mean_seeds_to_decision:.1f} "
            f"[{m_lo:.1f}, {m_hi:.1f}] | {r.median_seeds_to_decision:.0f} | "
            f"{r.p90_seeds_to_decision:.0f} | {seq['stop: not better (futility)']:.2f} | "
            f"{seq['stop: not better (last look)']:.2f} |")
    for kind in ("fixed", "sequential"):
        best = plan.best(kind)
        if best is None:
            lines.append(f"{kind}: no setting on the grid reaches {pct} within {top} seeds")
            continue
        n = best.fixed_seeds_needed if kind == "fixed" else best.sequential_seeds_needed
        lines.append(f"{kind}: fewest runs for {pct} power: {n} seeds x {best.m} draw(s) "
                     f"({n * (best.m + 2)} runs with policy and no-sync runs)")
    lines.extend(pilot_size_lines(plan))
    lines.append(tail_line(plan))
    lines.append(f"method: {plan.method}")
    return "\n".join(lines)


def pilot_size_lines(plan) -> list[str]:
    """How large a pilot would pin each row's powers at the last count to +-tolerance."""
    from evalkit.stats.power import TOLERANCE_COVERAGE

    rows = [r for r in plan.rows if r.fixed_pilot_seeds is not None]
    if not rows:
        return []
    top = rows[0].seeds[-1]
    n0 = plan.n_pilot_seeds

    def words(n):
        return f"{n} (this pilot's {n0} suffice)" if n <= n0 else str(n)

    head = (f"pilot seeds for a prediction within +-{plan.tolerance:g} of the truth "
            f"{TOLERANCE_COVERAGE:.0%} of the time (first order: the refits' spread less its "
            f"Monte Carlo part, shrinking as 1 / pilot seeds; blind to the model's bias on "
            f"bursty V):")
    return [head] + [f"  m = {r.m}: fixed-n power at {top} seeds: {words(r.fixed_pilot_seeds)}; "
                     f"sequential P(pass) by {top}: {words(r.sequential_pilot_seeds)}"
                     for r in rows]


def tail_line(plan) -> str:
    """The pilot's right-tail check in words (:func:`evalkit.stats.power.tail_check`)."""
    t = plan.tail
    if t is None:
        return ("tail check: none (one draw per pilot seed leaves no within-seed residuals to "
                "check)")
    seen = (f"skewness {t.skewness:+.2f} of the pilot's pooled log residuals; p = "
            f"{t.p_value:.3f} that a lognormal pilot of the same seeds and draws shows as much "
            f"({t.simulations} simulated)")
    if t.heavy_right_tail:
        return (f"tail check: HEAVY RIGHT TAIL: {seen}, at most alpha {t.alpha:g}. A few runs "
                f"far above the rest (bursts) are more than a lognormal body allows, and how "
                f"often they come is what a pilot of {plan.n_pilot_seeds} seeds pins down "
                f"worst: read the intervals, not the points, and pilot more seeds "
                f"(tools/POWER_VALIDATION.md, 'The tail check')")
    return (f"tail check: {seen}, above alpha {t.alpha:g}: no sign of a heavier right tail "
            f"than lognormal (a pilot of {plan.n_pilot_seeds} seeds can miss rare bursts, and "
            f"one that missed them predicts too high: tools/POWER_VALIDATION.md, 'The tail "
            f"check')")


def plot_plan(plan, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evalkit.document.words import pp

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, r in enumerate(plan.rows):
        color = f"C{i}"
        ax.plot(r.seeds, r.fixed_power, color=color, label=f"fixed-n, m = {r.m}")
        ax.fill_between(r.seeds, r.fixed_power_low, r.fixed_power_high, color=color,
                        alpha=0.15, lw=0)
        ax.plot(r.seeds, r.sequential_power, color=color, ls="--",
                label=f"sequential (passed by n), m = {r.m}")
    ax.axhline(plan.target, color="grey", lw=0.8)
    ax.set_xlabel("seeds")
    ax.set_ylabel("power")
    ax.set_ylim(0, 1)
    ax.set_title(f"gain {pp(plan.gain, signed=False)} pp, alpha {plan.alpha:g} "
                 f"{plan.alternative}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@click.command("power")
@click.option("--pilot", "pilot", type=click.Path(path_type=Path), default=None,
              help="runs directory of a pilot campaign")
@click.option("--twin", "twin", type=click.Path(path_type=Path), default=None,
              help="campaign TOML on the fitted twin (sim backend): its runs are the pilot")
@click.option("--policy", default=None, help="the pilot policy whose draws model the noise")
@click.option("--gain", type=float, required=True,
              help="V reduction to detect, as a share: e.g. 0.0145 (1.45 pp) for "
              "6.54% -> 5.09%")
@click.option("--alpha", type=float, default=0.05, show_default=True)
@click.option("--alternative", type=click.Choice(["two-sided", "greater"]),
              default="two-sided", show_default=True)
@click.option("--target", type=float, default=0.8, show_default=True, help="target power")
@click.option("--draws", "draws_text", default="1,2,3,5", show_default=True,
              help="draws per seed to compare")
@click.option("--max-seeds", type=int, default=40, show_default=True)
@click.option("--reps", type=int, default=400, show_default=True,
              help="simulated campaigns per setting")
@click.option("--resamples", type=int, default=400, show_default=True,
              help="label sets of the Monte Carlo permutation test")
@click.option("--policy-sd-ratio", type=float, default=None,
              help="override: the policy run's spread (log scale) as a multiple of a draw's; "
              "default: measured from the pilot's policy runs")
@click.option("--effect", type=click.Choice(["multiplicative", "additive"]),
              default="multiplicative", show_default=True,
              help="multiplicative: the policy's V is a draw's x (1 - gain / mean draw V); "
              "additive: gain subtracted from every policy run")
@click.option("--model", "model_kind", type=click.Choice(["smoothed", "lognormal"]),
              default="smoothed", show_default=True,
              help="within-seed noise: a smoothed bootstrap of the pilot's log residuals, or "
              "lognormal (tools/POWER_VALIDATION.md compares them)")
@click.option("--min-effect", type=float, default=None,
              help="the sequential design's null shift, a share of V: a pass needs the mean "
              "gain above it, as the sequential gate; default: the built-in protocol's "
              "gain_significant.min_effect (give yours when you gate with --protocol)")
@click.option("--block", type=int, default=5, show_default=True,
              help="the sequential design looks after every BLOCK seeds")
@click.option("--first-look", type=int, default=None,
              help="the sequential design's first look, at this many seeds (then one every "
              "BLOCK seeds; a campaign's [design] first_look); default: after the first BLOCK")
@click.option("--spending", type=click.Choice(["obrien-fleming", "hwang-shih-decani"]),
              default="obrien-fleming", show_default=True,
              help="the sequential design's alpha-spending function (a campaign's [design] "
              "spending)")
@click.option("--gamma", type=float, default=None,
              help="Hwang-Shih-DeCani's gamma (required with it: -4 resembles O'Brien-Fleming, "
              "1 Pocock)")
@click.option("--futility", type=click.Choice(["zero", "rising"]), default="zero",
              show_default=True,
              help="the sequential design's non-binding futility rule (a campaign's [design] "
              "futility): stop below t = 0 at interim looks, or below a bound rising with the "
              "share of the plan's seeds")
@click.option("--design", "design_from", type=click.Path(dir_okay=False, path_type=Path),
              default=None,
              help="plan the sequential design a campaign's [design] names (max_seeds, batch, "
              "first_look, spending, gamma, futility), with the gate's looks; the options that "
              "set them are then left out")
@click.option("--refits", type=int, default=30, show_default=True,
              help="redraws of the model's variance components (and the smoothed bootstrap's "
              "residual pool) for each prediction's interval (0: none)")
@click.option("--tolerance", type=float, default=0.07, show_default=True,
              help="the band on a predicted power for the pilot size each row estimates "
              "(the pilot seeds for a prediction within +-TOLERANCE of the truth)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None,
              help="write the power curves to this PNG")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None,
              help="write the plan as JSON")
def power_cmd(pilot, twin, policy, gain, alpha, alternative, target, draws_text, max_seeds,
              reps, resamples, policy_sd_ratio, effect, model_kind, min_effect, block,
              first_look, spending, gamma, futility, design_from, refits, tolerance, seed,
              plot, json_out):
    """Seeds and draws per seed that reach the target power for GAIN, for the fixed-n
    seed-level test and for the group-sequential design (distribution of seeds to a
    decision), simulated from a model fitted to the pilot, each with an interval from the
    pilot's size."""
    from evalkit.audit.protocol import load_protocol
    from evalkit.audit.sequential import protocol_min_effect
    from evalkit.stats.power import pilot_model, power_plan

    if (pilot is None) == (twin is None):
        raise InputError("give exactly one of --pilot RUNS and --twin CAMPAIGN.toml",
                         column="--pilot", fix="e.g. --pilot runs/pilot")
    draws = _parse_draws(draws_text)
    if policy_sd_ratio is not None and not policy_sd_ratio >= 0:
        raise InputError("--policy-sd-ratio must be >= 0", column="--policy-sd-ratio",
                         fix="e.g. 1 (as variable as a draw) or 0.5, or leave it out to "
                             "measure the policy's spread from the pilot")
    if design_from is not None:
        max_seeds, block, first_look, spending, gamma, futility = campaign_design(design_from)
    if min_effect is None:
        min_effect = protocol_min_effect(load_protocol(None))
    elif not (math.isfinite(min_effect) and min_effect >= 0):
        raise InputError(f"--min-effect must be a finite share >= 0, got {min_effect}",
                         column="--min-effect",
                         fix="the protocol's gain_significant.min_effect, e.g. 0.005 (0.5 pp)")
    if twin is not None:
        from evalkit.replay.sweep import run_campaign

        with tempfile.TemporaryDirectory(prefix="evalkit-twin-pilot-") as tmp:
            done = run_campaign(twin, Path(tmp) / "runs", progress=False,
                                protocol=load_protocol(None))
            if not done.ok:
                raise InputError("the twin pilot's runs failed:\n" + done.format(),
                                 file=str(twin), fix="fix the campaign and rerun")
            label, v_pol, v_draws = pilot_from_runs(Path(tmp) / "runs", policy)
        source = f"twin campaign {twin.name}"
    else:
        label, v_pol, v_draws = pilot_from_runs(pilot, policy)
        source = f"pilot {pilot.name}"
    try:
        model = pilot_model(v_pol, v_draws, source, policy_sd_ratio=policy_sd_ratio,
                            kind=model_kind)
        plan = power_plan(model, gain, effect=effect, alpha=alpha, alternative=alternative,
                          null_shift=min_effect, target=target, draws=draws,
                          max_seeds=max_seeds, reps=reps, n_resamples=resamples, block=block,
                          spending=spending, gamma=gamma, refits=refits,
                          first_look=first_look, futility=futility, tolerance=tolerance,
                          rng=seed)
    except InputError as err:
        # power_plan names its parameters; here each one is the option of the same name
        if err.column in {"gain", "alpha", "target", "max_seeds", "reps", "block", "refits",
                          "spending", "gamma", "first_look", "tolerance"}:
            raise InputError(err.message, column="--" + err.column.replace("_", "-"),
                             fix=err.fix) from err
        if err.file is None:             # the pilot's runs cannot be modelled: name them
            raise InputError(err.message, file=str(pilot if pilot is not None else twin),
                             column=err.column, fix=err.fix) from err
        raise
    if design_from is not None:
        click.echo(f"sequential design: the [design] of {design_from}")
    click.echo(format_plan(plan, f"{label} ({source}, {model.n_pilot_seeds} seeds)"))
    if plot is not None:
        plot_plan(plan, plot)
        click.echo(f"power curves: {plot}")
    if json_out is not None:
        json_out.write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
        click.echo(f"plan: {json_out}")
