"""A level caps the fixed gate's power against a tail-avoiding scheduler (issue 32): a script.

    nice -n 10 python tools/level_power_bound.py [--seed 0] [--campaigns 2000] [--out FILE]

The campaigns are :mod:`inference_study`'s (seed level ``BASE_V`` times lognormal 0.2, m draws
``level * run noise``, one policy run per seed, ``d_s = mean(draws_s) - policy_s``) and the gate
is its ``paired_gate`` (:func:`evalkit.stats.paired.paired_mean_test`, two-sided p <= 0.05,
mean d > 0 and >= min_effect 0.5 pp).  Run noise F: bursty (x4 on 10% of runs) or lognormal
sigma 0.8 / 0.35 (mean 1).  A is an event on one run's noise with P_F(A) = p = 0.1: "the run
caught a burst" (bursty), "the run's noise is in F's upper decile" (lognormal).

The argument.  H0: the policy's runs are independent draws of F (one more draw, equal means).
H1: they are draws of F conditioned on not-A, a scheduler that avoids the tail by design; its
mean is ``E[X | not A] = 1 - gain`` with ``gain = p (E[X | A] - E[X | not A]) / E[X]``.  Under
H0 the policy runs are independent of the levels and draws and of each other, so conditioning
H0 on E = "no policy run is in A" (chance ``(1 - p)^n``) leaves the levels and draws alone and
makes each policy run an independent draw of F given not-A: H0 given E is H1.  For any test,
``P_H0(pass) >= P_H0(pass and E) = (1 - p)^n P_H1(pass)``; a level a caps the power against H1
at ``a / (1 - p)^n``.

Prints (markdown, to ``--out`` or stdout; progress on stderr): the closed-form gains checked by
Monte Carlo and the bound; the gate's false pass under H0 and power against H1 beside the
bound at its measured level; the gate's pass rate under H0 among the campaigns with no policy
run in A beside its pass rate under H1 (the conditioning identity).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inference_study import (BASE_V, SEED_SD, Progress, fmt, lognormal,  # noqa: E402
                             paired_gate, run_noise)

TAIL_SHARE = 0.1                     # p = P_F(A) in every design
BURST = 4.0                          # inference_study's bursty noise: x4 on TAIL_SHARE of runs
BURSTY_SIGMA = 0.35                  # ... around lognormal 0.35
DESIGNS = ("bursty", "lognormal 0.8", "lognormal 0.35")
EVENTS = {"bursty": "the run caught a burst",
          "lognormal 0.8": "noise in F's upper decile",
          "lognormal 0.35": "noise in F's upper decile"}
LEVELS = (0.025, 0.035, 0.05, 0.10)
BOUND_SEEDS = (5, 10, 20)
CELLS = tuple((n, m) for n in (10, 20) for m in (3, 5))
GAIN_SAMPLES = 1_000_000
SE_TOLERANCE = 3.0


def sigma_of(noise: str) -> float:
    return float(noise.split()[1])


def avoided_gain(noise: str, p: float = TAIL_SHARE) -> float:
    """Relative gain of H1 over F's mean, ``1 - E[X | not A] / E[X]``, in closed form.

    Bursty: a burst-free run has mean ``1 / (1 + p (BURST - 1))`` (F's mean is 1).  Lognormal
    ``X = exp(s Z - s^2 / 2)`` with A = {Z > z}, z its (1 - p) quantile:
    ``E[X; Z <= z] = Phi(z - s)``, so ``E[X | not A] = Phi(z - s) / (1 - p)``."""
    if noise == "bursty":
        return 1.0 - 1.0 / (1.0 + p * (BURST - 1.0))
    z = sps.norm.isf(p)
    return 1.0 - sps.norm.cdf(z - sigma_of(noise)) / (1.0 - p)


def power_bound(level: float, n: int, p: float = TAIL_SHARE) -> float:
    """The largest power against H1 a test of level ``level`` on n seeds can have."""
    return min(1.0, level / (1.0 - p) ** n)


def split_noise(rng, noise: str, shape, p: float = TAIL_SHARE):
    """Run noise drawn from F given not-A and from F given A (each an exact conditional law)."""
    if noise == "bursty":
        calm = lognormal(rng, BURSTY_SIGMA, shape) / (1.0 + p * (BURST - 1.0))
        return calm, BURST * lognormal(rng, BURSTY_SIGMA, shape) / (1.0 + p * (BURST - 1.0))
    s = sigma_of(noise)
    z_avoid = sps.norm.ppf((1.0 - p) * (1.0 - rng.random(shape)))      # Z <= its (1-p) quantile
    z_tail = sps.norm.isf(p * (1.0 - rng.random(shape)))                # Z >= it
    return np.exp(s * z_avoid - 0.5 * s * s), np.exp(s * z_tail - 0.5 * s * s)


def h0_policy_noise(rng, noise: str, shape, p: float = TAIL_SHARE):
    """(noise, in_A): one more draw of F, built as its mixture of F given A (share p) and F
    given not-A, so that each run's membership of A is known."""
    avoid, tail = split_noise(rng, noise, shape, p)
    in_tail = rng.random(shape) < p
    return np.where(in_tail, tail, avoid), in_tail


def h1_policy_noise(rng, noise: str, shape, p: float = TAIL_SHARE):
    """A scheduler that avoids A by design: F given not-A."""
    return split_noise(rng, noise, shape, p)[0]


def level_and_draws(rng, c, n, m, noise):
    """(c, n) seed levels and (c, n, m) draws, as :func:`inference_study.campaigns` makes them."""
    level = BASE_V * lognormal(rng, SEED_SD, (c, n))
    return level, level[..., None] * run_noise(rng, noise, (c, n, m))


def gate_passes(policy, draws):
    return paired_gate(draws.mean(2) - policy)[0]


def h0_campaigns(rng, c, n, m, noise):
    """(passed, no policy run in A) per campaign under H0."""
    level, draws = level_and_draws(rng, c, n, m, noise)
    x, in_tail = h0_policy_noise(rng, noise, (c, n))
    return gate_passes(level * x, draws), ~in_tail.any(axis=1)


def h1_campaigns(rng, c, n, m, noise):
    level, draws = level_and_draws(rng, c, n, m, noise)
    return gate_passes(level * h1_policy_noise(rng, noise, (c, n)), draws)


def rate_se(rate: float, count: int) -> float:
    return math.sqrt(max(rate * (1.0 - rate), 0.0) / count) if count else math.nan


def measure_cell(rng, c, n, m, noise, p: float = TAIL_SHARE) -> dict:
    """The gate under H0 (enough campaigns that about c of them have no policy run in A; its
    level is read on the first c) and under H1 (c campaigns)."""
    h0_count = math.ceil(c / (1.0 - p) ** n)
    passed0, clean = h0_campaigns(rng, h0_count, n, m, noise)
    passed1 = h1_campaigns(rng, c, n, m, noise)
    level, power = float(passed0[:c].mean()), float(passed1.mean())
    level_se, power_se = rate_se(level, c), rate_se(power, c)
    shrink = (1.0 - p) ** n
    bound, bound_se = level / shrink, level_se / shrink
    given_clean = float(passed0[clean].mean()) if clean.any() else math.nan
    given_clean_se = rate_se(given_clean, int(clean.sum()))
    return {"level": level, "level_se": level_se, "power": power, "power_se": power_se,
            "bound": bound, "bound_se": bound_se,
            "bound_margin": (power - bound) / math.hypot(power_se, bound_se),
            "h0_count": h0_count, "clean": int(clean.sum()), "clean_share": float(clean.mean()),
            "given_clean": given_clean, "given_clean_se": given_clean_se,
            "false_passes_clean": float((passed0 & clean).sum() / max(int(passed0.sum()), 1)),
            "identity_gap": (given_clean - power) / math.hypot(given_clean_se, power_se)}


def gain_by_monte_carlo(rng, noise, samples=GAIN_SAMPLES):
    """(gain, se): 1 - mean(H1 noise) / mean(F noise as inference_study draws it)."""
    avoid = h1_policy_noise(rng, noise, samples)
    base = run_noise(rng, noise, samples)
    ratio = avoid.mean() / base.mean()
    se = ratio * math.hypot(avoid.std() / avoid.mean(), base.std() / base.mean()) / math.sqrt(
        samples)
    return 1.0 - ratio, se


def closed_form_section(rng, prog) -> list:
    out = ["## The bound in closed form", "",
           f"p = P_F(A) = {TAIL_SHARE:g} in every design. Gain of H1: relative, over F's mean "
           f"(closed form; Monte Carlo on {GAIN_SAMPLES:,} runs of each law beside it, +- one "
           "standard error); on the study's base V of "
           f"{BASE_V * 100:g}% it is the absolute gain in percentage points.", "",
           "| V (run noise F) | event A | gain of H1, closed form | Monte Carlo | "
           "absolute (pp) |", "|---|---|---|---|---|"]
    for noise in DESIGNS:
        prog.step(f"gain of H1, {noise}")
        mc, se = gain_by_monte_carlo(rng, noise)
        gain = avoided_gain(noise)
        out.append(f"| {noise} | {EVENTS[noise]} | {fmt(gain)} | {fmt(mc)} +- {se:.4f} | "
                   f"{gain * BASE_V * 100:.2f} |")
    out += ["", "Largest power against H1 of any test whose false pass under H0 is at most a "
            "(`a / (1 - p)^n`, capped at 1; the same for the three designs, since it depends "
            "on p alone):", "",
            "| a | " + " | ".join(f"n = {n}" for n in BOUND_SEEDS) + " |",
            "|---|" + "---|" * len(BOUND_SEEDS)]
    for a in LEVELS:
        out.append(f"| {a:g} | " + " | ".join(fmt(power_bound(a, n)) for n in BOUND_SEEDS)
                   + " |")
    return out + [""]


def measured_sections(args, prog):
    results = {}
    for i, noise in enumerate(DESIGNS):
        for n, m in CELLS:
            prog.step(f"gate, {noise} n={n} m={m}")
            rng = np.random.default_rng([args.seed, i, n, m])
            results[(noise, n, m)] = measure_cell(rng, args.campaigns, n, m, noise)
    c = args.campaigns
    out = ["## The gate measured against the bound", "",
           f"{c} campaigns under H0 (policy = one more draw) and {c} under H1 (policy = F given "
           "not-A) per cell; +- one standard error. Bound: the measured false pass divided by "
           "(1 - p)^n. Margin: (power - bound) in standard errors of the difference; the "
           f"theorem holds in the measurement when the margin is below {SE_TOLERANCE:g}.", "",
           "| V | n | m | false pass (H0) | power against H1 | bound at the measured level | "
           "margin | power <= bound |", "|---|---|---|---|---|---|---|---|"]
    for (noise, n, m), r in results.items():
        out.append(f"| {noise} | {n} | {m} | {fmt(r['level'])} +- {r['level_se']:.3f} | "
                   f"{fmt(r['power'])} +- {r['power_se']:.3f} | {fmt(r['bound'])} +- "
                   f"{r['bound_se']:.3f} | {r['bound_margin']:.1f} | "
                   f"{'yes' if r['bound_margin'] < SE_TOLERANCE else 'NO'} |")
    out += ["", "## The conditioning identity measured", "",
            "H0 campaigns: ceil(c / (1 - p)^n) per cell, so that about c of them have no "
            "policy run in A (E); the false pass above is read on the first c of them. H0 "
            "given E should pass as often as H1 (gap: their difference in standard errors). "
            "Last column: the share of all H0 passes that came from campaigns with E.",
            "", "| V | n | m | H0 campaigns | with E | share (expected (1 - p)^n) | pass, H0 "
            "given E | pass, H1 | gap | H0 passes with E |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for (noise, n, m), r in results.items():
        out.append(f"| {noise} | {n} | {m} | {r['h0_count']} | {r['clean']} | "
                   f"{r['clean_share']:.4f} ({(1 - TAIL_SHARE) ** n:.4f}) | "
                   f"{fmt(r['given_clean'])} +- {r['given_clean_se']:.3f} | "
                   f"{fmt(r['power'])} +- {r['power_se']:.3f} | {r['identity_gap']:+.1f} | "
                   f"{fmt(r['false_passes_clean'])} |")
    return out + [""], results


def seeds_where_bound_lifts(level: float, p: float = TAIL_SHARE) -> int:
    """The fewest seeds at which a level of ``level`` no longer caps the power below 1."""
    return math.ceil(math.log(level) / math.log(1.0 - p))


def reading(results) -> list:
    bursty = results[("bursty", 10, 5)]
    worst_margin = max(r["bound_margin"] for r in results.values())
    worst_gap = max(abs(r["identity_gap"]) for r in results.values())
    if worst_margin < SE_TOLERANCE:
        bound_held = ("In every cell the measured power is below the bound at the measured level "
                      "or above it by no more than Monte Carlo error")
    else:
        bound_held = ("In some cell the measured power exceeds the bound by more than Monte "
                      "Carlo error, so the model or the gate's code is wrong")
    return ["## Reading", "",
            f"Issue 32 asks the fixed gate for a false pass of at most 0.035 when an "
            f"exchangeable policy (one more draw) meets bursty V. Any gate that meets it finds a "
            f"scheduler that avoids bursts by design, "
            f"{avoided_gain('bursty') * 100:.0f}% better, at most "
            f"{fmt(power_bound(0.035, 10))} of the time at n = 10 seeds and at most "
            f"{fmt(power_bound(0.035, 20))} at n = 20, whatever its statistic: a campaign of "
            f"that scheduler is a campaign of one more draw whose n policy runs caught no burst, "
            f"which one more draw does with chance 0.9^n. The same cap holds on lognormal V "
            f"against a scheduler that avoids the upper decile of the run noise (a "
            f"{avoided_gain('lognormal 0.8') * 100:.0f}% gain at sigma 0.8, "
            f"{avoided_gain('lognormal 0.35') * 100:.1f}% at sigma 0.35). The gate as it is "
            f"(bursty, n 10, m 5) has a false pass of {fmt(bursty['level'])} and power "
            f"{fmt(bursty['power'])} against that scheduler, close to the "
            f"{fmt(bursty['bound'])} its own level allows: "
            f"{bursty['false_passes_clean'] * 100:.0f}% of its false passes are campaigns in "
            f"which the policy caught no burst, and those campaigns are distributed exactly as "
            f"the scheduler's. {bound_held} (largest excess {worst_margin:+.1f} standard "
            f"errors), and H0 restricted to campaigns without a policy run in A passes as often "
            f"as H1 (within {worst_gap:.1f} standard errors). The cap concerns this scheduler, "
            f"not the fixed schedule of the issue's power targets, and it loosens with seeds (a "
            f"level of 0.035 caps nothing from n = {seeds_where_bound_lifts(0.035)}); at "
            f"n <= 20 the issue's level target leaves a test at most "
            f"{fmt(power_bound(0.035, 20))} power against the very scheduler the gate exists to "
            f"find. The tool keeps the level it measures and states the assumption instead: "
            f"`tail_luck` says when the policy's runs missed the draws' upper tail and how "
            f"likely that is by chance, (1 - q)^n, so a reader sees when a pass rests on the "
            f"policy avoiding the tail by design.", ""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=2000, help="campaigns per cell and law")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.campaigns < 2:
        ap.error("--campaigns must be at least 2")
    t0 = time.time()
    prog = Progress(len(DESIGNS) * (1 + len(CELLS)))
    cmd = f"nice -n 10 python tools/level_power_bound.py --seed {args.seed} --campaigns " \
          f"{args.campaigns}"
    lines = ["# The fixed gate's level and power against a tail-avoiding scheduler (issue 32)",
             "", f"Generated by `{cmd}`. Model, the events A and the proof: the script's "
             "docstring. For any test of the campaign, P_H0(pass) >= (1 - p)^n P_H1(pass), "
             "where H0: the policy is one more draw of F, H1: the policy's runs are F given "
             "not-A.", ""]
    lines += closed_form_section(np.random.default_rng([args.seed, 99]), prog)
    measured, results = measured_sections(args, prog)
    lines += measured + reading(results)
    sys.stderr.write(f"\nwall time {time.time() - t0:.0f} s\n")
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
