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

from evalkit.stats._result import DEFAULT_RTOL
from evalkit.stats.sequential import anytime_e_process, label_values_equal_m
from evalkit.stats.studentized import t_from_sums

V_RANDOM, V_POLICY = 0.0654, 0.0509
ALPHA, TARGET = 0.05, 0.8


EXACT_LABEL_SETS = 4096      # enumerate every label set up to here, Monte Carlo beyond
_CHUNK_ELEMENTS = 1 << 20    # bound on (R, b, n) temporaries


def permutation_p_batch(vals: np.ndarray, n_resamples: int, rng: np.random.Generator,
                        alternative: str = "two-sided") -> np.ndarray:
    """The audit's within-seed permutation p of many campaigns at once: studentized.

    vals: (R, n, m + 1) label values (index 0 observed).  Returns (R,).  The statistic is
    the audit's default, ``t = mean(d) / se(d)`` recomputed for every label set, with its
    tie tolerance (:func:`evalkit.stats.studentized.t_from_sums`); with one draw per seed
    every relabelling is a sign flip and the raw mean orders label sets as t does, so the
    raw sum is used there, as the audit does.  Up to :data:`EXACT_LABEL_SETS` label sets the
    p-value is exact (every label set; p = k / L, the identity included, so it never goes
    below the smallest attainable p); beyond, the same ``n_resamples`` random label sets
    serve every campaign, p = (k + 1) / (B + 1) -- the audit's Monte Carlo rule (it
    enumerates further, up to 2^22 label sets; B random ones estimate that p within Monte
    Carlo error, at a cost a simulation of many campaigns can carry).  Two-sided = 2 min.
    """
    reps, n, size = vals.shape
    exact = float(size) ** n <= EXACT_LABEL_SETS
    if exact:
        grids = np.meshgrid(*[np.arange(size)] * n, indexing="ij")
        labels = np.column_stack([g.reshape(-1) for g in grids])
    else:
        labels = rng.integers(0, size, size=(n_resamples, n))
    # one seed has no se: t is undefined, and the raw sum orders its m + 1 label sets
    ge, le = _label_counts(vals, labels, studentized=size > 2 and n >= 2)
    if exact:
        pg, pl = ge / labels.shape[0], le / labels.shape[0]
    else:
        pg, pl = (ge + 1) / (n_resamples + 1), (le + 1) / (n_resamples + 1)
    return {"greater": pg, "less": pl,
            "two-sided": np.minimum(1.0, 2 * np.minimum(pg, pl))}[alternative]


def _label_counts(vals: np.ndarray, labels: np.ndarray,
                  studentized: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per campaign, label sets whose statistic reaches the observed one from above / below.

    vals: (R, n, m + 1); labels: (L, n).  Returns two (R,) counts.  Raw sum: tolerance
    ``1e-9 x mean |d(j)| x n`` (the raw engine's); studentized: ``1e-9 x max(1, |t|)``,
    none for an infinite t (the studentized engine's).
    """
    reps, n, _ = vals.shape
    if studentized:
        obs = t_from_sums(vals[:, :, 0].sum(axis=1), (vals[:, :, 0] ** 2).sum(axis=1), n)
        finite = np.isfinite(obs)
        tol = np.where(finite, DEFAULT_RTOL * np.maximum(1.0, np.abs(np.where(finite, obs, 0))),
                       0.0)
    else:
        obs = vals[:, :, 0].sum(axis=1)
        tol = DEFAULT_RTOL * np.maximum(1e-300, np.abs(vals).mean(axis=(1, 2))) * n
    lo_bound, hi_bound = (obs - tol)[:, None], (obs + tol)[:, None]
    ge = np.zeros(reps)
    le = np.zeros(reps)
    seeds = np.arange(n)
    step = max(1, _CHUNK_ELEMENTS // max(1, reps * n))
    for lo in range(0, labels.shape[0], step):
        x = vals[:, seeds[None, :], labels[lo:lo + step]]           # (R, b, n)
        stat = (t_from_sums(x.sum(axis=2), np.einsum("rbn,rbn->rb", x, x), n)
                if studentized else x.sum(axis=2))                  # (R, b)
        ge += (stat >= lo_bound).sum(axis=1)
        le += (stat <= hi_bound).sum(axis=1)
    return ge, le


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
