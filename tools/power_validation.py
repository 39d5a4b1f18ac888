"""Does `evalkit plan power` predict the power of the truth it simulates?

For each truth below, thousands of campaigns drawn from the truth itself give the true power
of the gate's fixed-n seed-level test at n seeds and of its group-sequential design (a look
every 5 seeds up to 20).  Then many 10-seed pilots are drawn from the same truth; from each
one the planner (:func:`evalkit.stats.power.power_plan`) predicts those powers with its
interval.  The table counts how often the prediction lies within +-0.07 of the truth and how
often the interval covers it.  Beside it, the previous planner's model (each simulated seed
resamples one pilot seed's centred draws around its mean, the policy as variable as a draw)
predicts from the same pilots, for the prediction error the model choice is decided by.

Truths: a seed level lognormal (sd 0.3 of log V) around V = 6.54% shared by the seed's runs;
run noise lognormal with mean 1 (sigma 0.35 or 0.8) or bursty (sigma 0.35, x4 on 10% of
runs); the policy is one more draw or a fixed schedule (lognormal sigma 0.05 around the
draws' mean), times 0.78 (the effect: 22%).  m = 3 draws per seed, alpha 0.05 one-sided.

``--oracle`` gives the planner the lognormal truths' own parameters instead of a pilot's;
``--pilot-size`` prints the pilot seeds each plan names for a power within +-0.07;
``--tail-check`` how often each truth's pilots are flagged heavy-tailed, and the
predictions' error and coverage among flagged and other pilots.

Run from the repository root: ``python -m tools.power_validation > tools/POWER_VALIDATION.md``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from evalkit.stats.group_sequential import design
from evalkit.stats.power import (PASS, fixed_gate_passes, group_sequential_batch,
                                 look_floors_batch, pilot_model, power_plan, sequential_looks,
                                 sign_flip_p_batch)

V0 = 0.0654
SEED_SD = 0.3
EFFECT = 0.22
M = 3
ALPHA = 0.05
ALT = "greater"
FIXED_N = (10, 20)
SEQ_MAX, SEQ_BLOCK = 20, 5
SEQ_DESIGN = design(sequential_looks(SEQ_MAX, SEQ_BLOCK), ALPHA)
PILOT_SEEDS = 10
TOLERANCE = 0.07
TRUTHS = [(noise, policy) for noise in ("lognormal 0.35", "lognormal 0.8", "bursty x4 on 10%")
          for policy in ("one more draw", "fixed schedule 0.05")]


def run_noise(rng, noise: str, size) -> np.ndarray:
    """Mean-1 run noise of one kind."""
    sigma = {"lognormal 0.35": 0.35, "lognormal 0.8": 0.8, "bursty x4 on 10%": 0.35}[noise]
    x = np.exp(rng.normal(-0.5 * sigma ** 2, sigma, size))
    if noise.startswith("bursty"):
        x = x * np.where(rng.random(size) < 0.10, 4.0, 1.0) / 1.3
    return x


def campaign_parts(rng, truth, reps: int, n: int, m: int = M):
    """Seed levels (reps, n), the draws' mean-1 run noise (reps, n, m) and the policy's
    (reps, n) of campaigns of one truth, before the effect."""
    noise, policy_kind = truth
    level = V0 * np.exp(rng.normal(-0.5 * SEED_SD ** 2, SEED_SD, (reps, n)))
    run = run_noise(rng, noise, (reps, n, m))
    if policy_kind == "one more draw":
        own = run_noise(rng, noise, (reps, n))
    else:
        own = np.exp(rng.normal(-0.5 * 0.05 ** 2, 0.05, (reps, n)))
    return level, run, own


def campaigns(rng, truth, reps: int, n: int, m: int = M, effect: float = EFFECT):
    """Policy V (reps, n) and draws (reps, n, m) of campaigns of one truth."""
    level, run, own = campaign_parts(rng, truth, reps, n, m)
    return level * own * (1.0 - effect), level[..., None] * run


def true_power(rng, truth, reps: int) -> dict:
    policy, draws = campaigns(rng, truth, reps, max(max(FIXED_N), SEQ_MAX))
    d = draws.mean(axis=-1) - policy
    out = {}
    for n in FIXED_N:       # the gates' own tests: the draw-floored t-test, floored looks
        out[f"fixed n={n}"] = float(np.mean(fixed_gate_passes(policy[:, :n], draws[:, :n],
                                                              ALT, ALPHA)))
    floors = look_floors_batch(policy[:, :SEQ_MAX], draws[:, :SEQ_MAX], SEQ_DESIGN.looks)
    decision, used = group_sequential_batch(d[:, :SEQ_MAX], SEQ_DESIGN, variance_floor=floors)
    out[f"sequential <= {SEQ_MAX}"] = float(np.mean(decision == PASS))
    out["mean seeds"] = float(used.mean())
    return out


def old_model_power(rng, policy, draws, reps: int) -> dict:
    """The previous planner's prediction: resampled centred draws, policy as a draw."""
    means = np.array([d.mean() for d in draws])
    gain = EFFECT * float(np.mean(means))
    res = [(d - d.mean()) * np.sqrt(d.size / (d.size - 1)) for d in draws]
    top = max(max(FIXED_N), SEQ_MAX)
    pick = rng.integers(0, len(draws), (reps, top))
    noise = np.stack([np.stack([rng.choice(res[k], M + 1) for k in row]) for row in pick])
    lvl = means[pick]
    d = (lvl[..., None] + noise[..., 1:]).mean(axis=-1) - (lvl + noise[..., 0] - gain)
    out = {}
    for n in FIXED_N:
        out[f"fixed n={n}"] = float(np.mean(sign_flip_p_batch(d[:, :n], 400, rng, ALT)
                                            <= ALPHA))
    decision, _ = group_sequential_batch(d[:, :SEQ_MAX], SEQ_DESIGN)
    out[f"sequential <= {SEQ_MAX}"] = float(np.mean(decision == PASS))
    return out


def validation_plan(model, reps: int, refits: int, rng):
    """The plan every truth is predicted with: the fixed n's and the sequential design."""
    return power_plan(model, EFFECT, relative=True, alpha=ALPHA, alternative=ALT, draws=(M,),
                      max_seeds=max(max(FIXED_N), SEQ_MAX), seeds_grid=FIXED_N + (SEQ_MAX,),
                      reps=reps, n_resamples=400, block=SEQ_BLOCK, refits=refits, rng=rng)


def row_powers(row) -> dict:
    """key -> (point, low, high) of a plan row's fixed-n and sequential powers."""
    out = {f"fixed n={n}": (row.fixed_power[i], row.fixed_power_low[i],
                            row.fixed_power_high[i])
           for i, n in enumerate(row.seeds) if n in FIXED_N}
    # the sequential design runs to max_seeds: its power is P(better) by the last count
    out[f"sequential <= {SEQ_MAX}"] = (row.sequential_power[-1], row.sequential_power_low[-1],
                                       row.sequential_power_high[-1])
    return out


def predictions(rng, truth, reps: int, refits: int, kinds) -> dict:
    """model -> key -> (point, low, high) of one pilot ('old': point only)."""
    policy, draws = campaigns(rng, truth, 1, PILOT_SEEDS)
    out = {}
    for kind in kinds:
        row = validation_plan(pilot_model(policy[0], list(draws[0]), kind=kind), reps,
                              refits, rng).rows[0]
        new = row_powers(row)
        new["mean seeds"] = (row.mean_seeds_to_decision, *row.mean_seeds_to_decision_range)
        out[kind] = new
    old = old_model_power(rng, policy[0], list(draws[0]), reps)
    out["old"] = {k: (v, np.nan, np.nan) for k, v in old.items()}
    return out


def oracle_rows(rng, reps: int) -> list[str]:
    """The planner given the lognormal truths' own parameters (no pilot): what it predicts
    when nothing is estimated, beside the truth."""
    import dataclasses
    import math
    out = ["| truth | quantity | truth | planner at the true parameters |", "|---|---|---|---|"]
    for truth in TRUTHS:
        if not truth[0].startswith("lognormal"):
            continue
        sigma = float(truth[0].split()[1])
        sigma_p = sigma if truth[1] == "one more draw" else 0.05
        policy, draws = campaigns(rng, truth, 1, PILOT_SEEDS)
        model = dataclasses.replace(pilot_model(policy[0], list(draws[0]), kind="lognormal"),
                                    mu=math.log(V0), tau=SEED_SD, sigma_within=sigma,
                                    sigma_policy=sigma_p)
        model = dataclasses.replace(model, mean_draw=V0 * math.exp(0.5 * SEED_SD ** 2
                                                                    + 0.5 * sigma ** 2))
        plan = power_plan(model, EFFECT, relative=True, alpha=ALPHA, alternative=ALT,
                          draws=(M,), max_seeds=max(max(FIXED_N), SEQ_MAX),
                          seeds_grid=FIXED_N + (SEQ_MAX,), reps=reps, block=SEQ_BLOCK,
                          refits=0, rng=rng)
        row = plan.rows[0]
        got = {f"fixed n={n}": p for n, p in zip(row.seeds, row.fixed_power) if n in FIXED_N}
        got[f"sequential <= {SEQ_MAX}"] = row.sequential_power[-1]
        for key, value in true_power(rng, truth, reps).items():
            if key in got:
                out.append(f"| {truth[0]}, policy {truth[1]} | {key} | {value:.3f} | "
                           f"{got[key]:.3f} |")
    return out


def pilot_size_rows(rng, pilots: int, reps: int, refits: int,
                    truth_reps: int = 8000) -> list[str]:
    """The pilot size each plan names for a power within +-0.07 (``fixed_pilot_seeds``,
    ``sequential_pilot_seeds``), over ``pilots`` 10-seed pilots of each truth."""
    out = ["| truth | quantity | truth | pilot seeds named: median | 25th pct | 75th pct |",
           "|---|---|---|---|---|---|"]
    for truth in TRUTHS:
        truth_vals = true_power(rng, truth, truth_reps)
        named = {f"fixed n={n}": [] for n in FIXED_N}
        named[f"sequential <= {SEQ_MAX}"] = []
        for _ in range(pilots):
            policy, draws = campaigns(rng, truth, 1, PILOT_SEEDS)
            model = pilot_model(policy[0], list(draws[0]))
            for n in FIXED_N:
                plan = power_plan(model, EFFECT, relative=True, alpha=ALPHA, alternative=ALT,
                                  draws=(M,), max_seeds=n, seeds_grid=(n,), reps=reps,
                                  block=SEQ_BLOCK, refits=refits, rng=rng)
                named[f"fixed n={n}"].append(plan.rows[0].fixed_pilot_seeds)
                if n == SEQ_MAX:
                    named[f"sequential <= {SEQ_MAX}"].append(
                        plan.rows[0].sequential_pilot_seeds)
        for key, got in named.items():
            q25, q50, q75 = np.percentile(got, [25, 50, 75])
            out.append(f"| {truth[0]}, policy {truth[1]} | {key} | {truth_vals[key]:.3f} | "
                       f"{q50:.0f} | {q25:.0f} | {q75:.0f} |")
    return out


def tail_check_rows(rng, pilots: int, reps: int, refits: int,
                    truth_reps: int = 8000) -> list[str]:
    """How often each plan's tail check flags a heavy right tail, and the predictions' error
    and interval coverage among the flagged and the other pilots (the smoothed model)."""
    out = ["| truth | flagged | quantity | truth | flagged: mean err | flagged: covers | "
           "not flagged: mean err | not flagged: covers |", "|---|---|---|---|---|---|---|---|"]
    for truth in TRUTHS:
        truth_vals = true_power(rng, truth, truth_reps)
        flags, got = [], []
        for _ in range(pilots):
            policy, draws = campaigns(rng, truth, 1, PILOT_SEEDS)
            plan = validation_plan(pilot_model(policy[0], list(draws[0])), reps, refits, rng)
            flags.append(plan.tail.heavy_right_tail)
            got.append(row_powers(plan.rows[0]))
        flags = np.array(flags)
        for key in got[0]:
            cells = []
            for mask in (flags, ~flags):
                picked = [g[key] for g, keep in zip(got, mask) if keep]
                if not picked:
                    cells += ["-", "-"]
                    continue
                err = np.mean([p - truth_vals[key] for p, _, _ in picked])
                cover = np.mean([lo <= truth_vals[key] <= hi for _, lo, hi in picked])
                cells += [f"{err:+.3f}", f"{cover:.2f}"]
            out.append(f"| {truth[0]}, policy {truth[1]} | {flags.sum()}/{flags.size} | {key} | "
                       f"{truth_vals[key]:.3f} | " + " | ".join(cells) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=60)
    ap.add_argument("--truth-reps", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--refits", type=int, default=40)
    ap.add_argument("--kinds", default="lognormal,smoothed",
                    help="the planner's models to validate")
    ap.add_argument("--oracle", action="store_true",
                    help="only the planner at the lognormal truths' own parameters")
    ap.add_argument("--pilot-size", action="store_true",
                    help="only the pilot size each plan names for a power within +-0.07")
    ap.add_argument("--tail-check", action="store_true",
                    help="only the tail check's flag rate and the predictions by flag")
    args = ap.parse_args(argv)
    if args.tail_check:
        print("\n".join(tail_check_rows(np.random.default_rng(20261207), args.pilots,
                                         args.reps, args.refits, args.truth_reps)))
        return 0
    if args.pilot_size:
        print("\n".join(pilot_size_rows(np.random.default_rng(20261206), args.pilots,
                                         args.reps, args.refits, args.truth_reps)))
        return 0
    if args.oracle:
        print("\n".join(oracle_rows(np.random.default_rng(20261205), args.truth_reps)))
        return 0
    kinds = tuple(k for k in args.kinds.split(",") if k)
    start = time.time()
    rng = np.random.default_rng(20261205)
    print("# plan power against the simulated truth\n")
    print(f"Generated by `python -m tools.power_validation --pilots {args.pilots} "
          f"--truth-reps {args.truth_reps} --reps {args.reps} --refits {args.refits}`. "
          f"Each truth: {args.truth_reps} campaigns give the true power; {args.pilots} "
          f"pilots of {PILOT_SEEDS} seeds x {M} draws each give a prediction (the planner: "
          f"{args.reps} campaigns, interval from {args.refits} redraws of the model's "
          f"variance components and, for the smoothed model, of its residual pool, central "
          f"80%). Effect {EFFECT:.0%} (multiplicative), alpha {ALPHA} "
          f"one-sided; sequential: a look every {SEQ_BLOCK} seeds up to {SEQ_MAX}. "
          f"'within' = share of pilots whose prediction is within +-{TOLERANCE} of the "
          "truth (mean seeds: +-10%); 'covers' = share whose interval holds the truth; 'mean "
          "err' = mean (prediction - truth); model 'lognormal' and 'smoothed' (bootstrap of "
          "the log residuals) are the planner's two models; 'old' = the previous planner's "
          "model (resampled centred draws, policy as variable as a draw) on the same "
          "pilots.\n")
    print("| truth | quantity | truth | model | mean prediction | mean err | "
          "within | covers | mean interval width |")
    print("|---|---|---|---|---|---|---|---|---|")
    for truth in TRUTHS:
        truth_vals = true_power(rng, truth, args.truth_reps)
        pilots = [predictions(rng, truth, args.reps, args.refits, kinds)
                  for _ in range(args.pilots)]
        for key, value in truth_vals.items():
            tol = TOLERANCE if key != "mean seeds" else 0.1 * value
            fmt = ".1f" if key == "mean seeds" else ".3f"
            for kind in (*kinds, "old"):
                if key not in pilots[0][kind]:
                    continue
                got = np.array([p[kind][key] for p in pilots])
                pts, lo, hi = got[:, 0], got[:, 1], got[:, 2]
                has_interval = kind != "old"
                print(f"| {truth[0]}, policy {truth[1]} | {key} | {value:{fmt}} | {kind} | "
                      f"{pts.mean():{fmt}} | {np.mean(pts - value):+{fmt}} | "
                      f"{np.mean(np.abs(pts - value) <= tol):.2f} | "
                      + (f"{np.mean((lo <= value) & (value <= hi)):.2f} | "
                         f"{np.mean(hi - lo):{fmt}} |" if has_interval else "- | - |"),
                      flush=True)
    print(f"ran in {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
