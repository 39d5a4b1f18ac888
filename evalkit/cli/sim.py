"""CLI: ``evalkit sim fit REAL_RUNS --out twin.toml [--report fit.json]``.

The fit (numpy, scipy, pandas) is imported inside the command, so ``evalkit --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from evalkit import jsonio
from evalkit.errors import InputError


@click.group("sim")
def sim_group():
    """The simulator's twin: fit its service and interference model to real runs."""


FIT_DIGITS = 10      # significant digits of every float in fit.json


@sim_group.command("fit")
@click.argument("runs_dir", type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="twin file to write (TOML)")
@click.option("--report", "report", type=click.Path(path_type=Path), default=None,
              help="fit.json: parameters with bootstrap CIs, leave-one-seed-out errors")
@click.option("--regime", default=None, help="regime to fit (needed when RUNS has several)")
@click.option("--bootstrap", "n_boot", type=int, default=200, show_default=True,
              help="bootstrap resamples of the seeds for the CIs")
@click.option("--seed", type=int, default=0, show_default=True,
              help="RNG seed of the bootstrap and of the predictive replays")
@click.option("--predictive-sims", "n_sims", type=int, default=100, show_default=True,
              help="twin replays per held-out run for the predictive check (0: skip it)")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="progress bar over the predictive replays (stderr)")
def fit_cmd(runs_dir, out, report, regime, n_boot, seed, n_sims, progress):
    """Fit the sim backend's twin to the real runs in RUNS_DIR (one regime)."""
    from evalkit.version import __version__
    from evalkit.replay.backends.sim.fit_check import fit_report
    from evalkit.replay.backends.sim.fit_data import load_real_runs
    from evalkit.replay.backends.sim.twin import Twin

    if n_boot < 20:
        raise InputError(f"--bootstrap must be >= 20, got {n_boot}", column="--bootstrap",
                         fix="use e.g. --bootstrap 200")
    if n_sims != 0 and n_sims < 20:
        raise InputError(f"--predictive-sims must be 0 (skip) or >= 20, got {n_sims}",
                         column="--predictive-sims", fix="use e.g. --predictive-sims 100")
    camp = load_real_runs(runs_dir, regime=regime)
    rep = fit_report(camp, n_boot=n_boot, seed=seed, n_sims=n_sims or None, progress=progress)
    held = rep.heldout
    source = {"runs": camp.source, "regime": camp.regime, "backend": camp.backend,
              "seeds": camp.seeds, "n_runs": len(camp.runs), "evalkit_version": __version__,
              "heldout_v_mae": round(held["v_mae"], 6),
              "heldout_p95_rel_err": round(held["p95_rel_err"], 6)}
    ci = {k: [round(lo, 9), round(hi, 9)] for k, (lo, hi) in sorted(rep.ci.items())}
    notes = list(rep.estimate.notes) + [
        "fitted to real runs; predicts serving given a merge schedule on this rig only",
        "constant slowdowns: no load-dependent interference, no drift of the host's load"]
    sha = Twin(sim=rep.estimate.settings, ci=ci, source=source, notes=notes).write(out)
    if report is not None:
        payload = dict(rep.report, twin={"path": out.name, "sha256": sha})
        report.write_text(jsonio.dumps(payload, FIT_DIGITS, ensure_ascii=True))
    p = rep.report["parameters"]
    click.echo(f"twin: {out} (sha256 {sha[:12]}), {len(camp.runs)} runs of "
               f"{len(camp.seeds)} seeds, regime {camp.regime}")
    for k in ("train_slowdown", "merge_slowdown", "merge_ratio", "iter_base_s",
              "decode_per_seq_s", "merge_duration_mean_s"):
        if k in p:
            lo_hi = p[k]["ci"] or [float("nan")] * 2
            click.echo(f"  {k:24s} {p[k]['value']:.4g}  [{lo_hi[0]:.4g}, {lo_hi[1]:.4g}]")
    verdict = "met" if rep.report["targets"]["met"] else "NOT met"
    click.echo(f"held out (leave one seed out): V MAE {held['v_mae']:.4f}, p95 relative error "
               f"{held['p95_rel_err']:.3f} (in windows {held['p95_in_rel_err']:.3f}, outside "
               f"{held['p95_out_rel_err']:.3f}); targets <= 0.05 / <= 0.3 {verdict}")
    if "predictive" in rep.report:
        for line in predictive_lines(rep.report["predictive"]):
            click.echo(line)
    if report is not None:
        click.echo(f"report: {report}")


def predictive_lines(pred: dict) -> list[str]:
    """The predictive check as printed lines, each sentence derived from its numbers."""
    lo, hi = pred["band"]
    floor = pred["sampling_floor"]
    out = [f"predictive check (leave one seed out, {pred['n_sims']} twin replays per run, "
           f"seed {pred['seed']}): central {pred['level']:.0%} interval, calibrated when "
           f"coverage lies in [{lo:.0%}, {hi:.0%}]"]
    for name, v in pred["variants"].items():
        c = v["coverage"]
        cov, (clo, chi) = c["coverage"], c["coverage_ci95"]
        where = ("inside the band: calibrated" if c["calibrated"] else
                 "below the band: NOT calibrated (intervals too narrow or shifted)"
                 if c["below_band"] else "above the band: NOT calibrated (intervals too wide)")
        out.append(f"  {name:12s} coverage {c['n_inside']}/{c['n_runs']} = {cov:.3f} "
                   f"[{clo:.3f}, {chi:.3f}], {where}; observed V below the interval in "
                   f"{c['n_below']} runs, above it in {c['n_above']}; mean interval width "
                   f"{c['interval_width_mean']:.4f}; PIT histogram (10 bins) "
                   f"{c['pit_histogram']}")
        for g in v["sync_excess"]:
            ci = g["vex_real_ci95"]
            ci_s = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "[no CI]"
            if g["sign_real"] == 0:
                sign = "no real sign (real mean 0)"
            elif g["sign_pred"] == 0:
                sign = "the twin predicts no excess (0)" + (
                    "" if g["real_sign_resolved"] else "; the real CI spans 0")
            elif g["real_sign_resolved"]:
                sign = "sign agrees" if g["sign_agrees"] else "sign WRONG"
            else:
                sign = ("same sign as" if g["sign_agrees"] else "opposite sign to") + \
                    " the real mean, whose CI spans 0 (sign not resolved)"
            within = "inside" if g["pred_inside_real_ci"] else "OUTSIDE"
            out.append(f"    Vex {g['group']:24s} real {g['vex_real_mean']:+.4f} {ci_s}, "
                       f"twin {g['vex_pred_mean']:+.4f} ({sign}; twin {within} the real CI; "
                       f"{g['n_seeds']} seeds)")
    out.append(f"  per-run V MAE {floor['v_mae']:.4f} (descriptive) beside the sampling floor "
               f"of one run's V: {floor['v_noise_floor']:.4f} binomial, "
               f"{floor['v_noise_floor_robust']:.4f} cluster-robust")
    return out


def register(cli):
    cli.add_command(sim_group)
