"""Benchmark: the sequential gate against the fixed design at the paper's effect.

    python tools/bench/bench_sequential.py [--reps 1000] [--out bench_sequential.json]

Model: matched-random V lognormal with mean 0.0654 (the paper's random-placement V) and a
within-seed coefficient of variation ``cv``; the policy run is one more such run shifted by
the paper's gain 0.0654 - 0.0509 = 0.0145 (same spread).  Per draws-per-seed m:

- fixed design: the fewest seeds N at which the within-seed permutation test (Monte Carlo,
  two-sided, alpha = 0.05) has power >= 0.8;
- sequential gate with the same power and alpha: the smallest seed budget N_seq at which the
  e-process has crossed 1/alpha in >= 80% of campaigns, and the mean (and 90th percentile)
  number of seeds it runs, stopping at the crossing or at N_seq;
- false passes under the null (policy = one more draw, skewed V: cv = 0.8) with a look after
  every seed up to N_seq: the fixed-n p (stop at the first p <= alpha) against the e-process.

Then, planned at the paper's effect (CV 0.15), the true gain half, equal or twice as large:
the fixed design still runs its planned seeds, the sequential gate stops when it crosses.

Also the e-process's false-pass rate at equal means when the policy's spread differs from
its draws' (ratio of sds 0.25 ... 4): exchangeability is then false although the means agree.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from evalkit.stats.power import permutation_p_batch
from evalkit.stats.sequential import anytime_e_process, label_values_equal_m

V_RANDOM, V_POLICY = 0.0654, 0.0509
ALPHA, TARGET = 0.05, 0.8


def lognormal(rng, mean, cv, shape):
    s2 = math.log(1 + cv ** 2)
    return rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), shape)


def campaigns(rng, reps, n, m, cv, gain, policy_ratio=1.0):
    """Policy V (reps, n) and draws (reps, n, m); the policy's spread x policy_ratio."""
    draws = lognormal(rng, V_RANDOM, cv, (reps, n, m))
    policy = lognormal(rng, V_RANDOM, cv * policy_ratio, (reps, n)) - gain
    return policy, draws


def fixed_power(rng, policy, draws, b, stop_at=None):
    """Power at n = 1, 2, ... seeds (up to the first n reaching ``stop_at``, if given)."""
    vals = label_values_equal_m(policy, draws)
    out = []
    for n in range(1, policy.shape[1] + 1):
        out.append(float(np.mean(permutation_p_batch(vals[:, :n], b, rng) <= ALPHA)))
        if stop_at is not None and out[-1] >= stop_at:
            break
    return out


def crossings(policy, draws):
    e = anytime_e_process(policy, draws, "two-sided")
    hit = e >= 1 / ALPHA
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, policy.shape[1] + 1)


def peeking_false_pass(rng, policy, draws, b):
    """Share of campaigns whose fixed-n p reaches alpha at some look n = 2 .. N."""
    vals = label_values_equal_m(policy, draws)
    passed = np.zeros(policy.shape[0], dtype=bool)
    for n in range(2, policy.shape[1] + 1):
        passed |= permutation_p_batch(vals[:, :n], b, rng) <= ALPHA
    return float(passed.mean())


def first_reaching(power, target=TARGET):
    return next((n for n, p in enumerate(power, 1) if p >= target), None)


def run(reps, b, max_seeds, cvs, ms, seed):
    rng = np.random.default_rng(seed)
    gain = V_RANDOM - V_POLICY
    rows = []
    for cv in cvs:
        for m in ms:
            pol, dr = campaigns(rng, reps, max_seeds, m, cv, gain)
            fixed = fixed_power(rng, pol, dr, b, stop_at=TARGET)
            n_fixed = first_reaching(fixed)
            cross = crossings(pol, dr)
            seq = [float(np.mean(cross <= n)) for n in range(1, max_seeds + 1)]
            n_seq = first_reaching(seq)
            row = {"cv": cv, "m": m, "fixed_seeds": n_fixed, "sequential_budget": n_seq}
            if n_seq is not None:
                stop = np.minimum(cross, n_seq)
                row.update(mean_seeds=float(stop.mean()),
                           p90_seeds=float(np.percentile(stop, 90)),
                           sequential_power=seq[n_seq - 1])
                looks = n_seq
            else:
                row.update(mean_seeds=None, p90_seeds=None, sequential_power=seq[-1])
                looks = max_seeds
            n0, d0 = campaigns(rng, reps, looks, m, 0.8, 0.0)
            row["null_fixed_peeking"] = peeking_false_pass(rng, n0, d0, b)
            row["null_sequential"] = float(np.mean(crossings(n0, d0) <= looks))
            row["looks"] = looks
            rows.append(row)
    # planned at the paper's effect (cv 0.15): the true gain half, once or twice as large
    planned = {r["m"]: r for r in rows if r["cv"] == 0.15}
    misplanned = []
    for m, r in planned.items():
        if r["sequential_budget"] is None or r["fixed_seeds"] is None:
            continue
        for factor in (0.5, 1.0, 2.0):
            pol, dr = campaigns(rng, reps, r["sequential_budget"], m, 0.15, gain * factor)
            cross = crossings(pol, dr)
            fixed = fixed_power(rng, pol[:, :r["fixed_seeds"]], dr[:, :r["fixed_seeds"]], b)
            misplanned.append({
                "m": m, "gain_factor": factor, "fixed_seeds": r["fixed_seeds"],
                "fixed_power": fixed[-1], "sequential_budget": r["sequential_budget"],
                "sequential_power": float(np.mean(cross <= r["sequential_budget"])),
                "mean_seeds": float(np.minimum(cross, r["sequential_budget"]).mean())})
    spread = []
    for m in ms:
        for ratio in (0.25, 0.5, 1.0, 2.0, 4.0):
            pol, dr = campaigns(rng, reps, 60, m, 0.3, 0.0, policy_ratio=ratio)
            spread.append({"m": m, "policy_sd_ratio": ratio,
                           "false_pass_60_looks": float(np.mean(crossings(pol, dr) <= 60))})
    return {"gain": gain, "v_random": V_RANDOM, "v_policy": V_POLICY, "alpha": ALPHA,
            "target_power": TARGET, "reps": reps, "resamples": b, "max_seeds": max_seeds,
            "seed": seed, "rows": rows, "misplanned": misplanned, "spread": spread}


def report(res) -> str:
    def n(x):
        return "-" if x is None else (f"{x:.1f}" if isinstance(x, float) else str(x))

    lines = [f"gain {res['gain']:.4f} ({res['v_random']:.2%} -> {res['v_policy']:.2%}), "
             f"alpha {res['alpha']} two-sided, power {res['target_power']:.0%}, "
             f"{res['reps']} campaigns per cell, B = {res['resamples']}", "",
             "| within-seed CV | draws/seed | fixed design: seeds | sequential: budget for "
             "the same power | sequential: mean seeds | 90th pct | null false pass, fixed-n "
             "p with a look per seed | null false pass, sequential |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['cv']} | {r['m']} | {n(r['fixed_seeds'])} | "
                     f"{n(r['sequential_budget'])} | {n(r['mean_seeds'])} | "
                     f"{n(r['p90_seeds'])} | {r['null_fixed_peeking']:.3f} ({r['looks']} "
                     f"looks) | {r['null_sequential']:.3f} |")
    lines += ["", "| draws/seed | true gain / planned | fixed: seeds | fixed: power | "
              "sequential: budget | sequential: power | sequential: mean seeds |",
              "|---|---|---|---|---|---|---|"]
    for r in res["misplanned"]:
        lines.append(f"| {r['m']} | {r['gain_factor']} | {r['fixed_seeds']} | "
                     f"{r['fixed_power']:.2f} | {r['sequential_budget']} | "
                     f"{r['sequential_power']:.2f} | {r['mean_seeds']:.1f} |")
    lines += ["", "| draws/seed | policy sd / draw sd | e-process false pass, equal means, "
              "60 looks |", "|---|---|---|"]
    for s in res["spread"]:
        lines.append(f"| {s['m']} | {s['policy_sd_ratio']} | {s['false_pass_60_looks']:.3f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--max-seeds", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = run(args.reps, args.resamples, args.max_seeds, (0.15, 0.3), (1, 3, 5), args.seed)
    res["seconds"] = time.perf_counter() - t0
    print(report(res))
    print(f"\n{res['seconds']:.0f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
