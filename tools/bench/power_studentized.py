"""Size and power of the within-seed permutation tests against the paired t-test.

    python tools/bench/power_studentized.py [--campaigns 400] [--seeds 10]

Two-sided alpha = 0.05; rejection rate over simulated campaigns, Monte Carlo p with B = 499.
Model (the paper's regime): seed level V = 6.5% x lognormal(0, 0.25); a matched-random
draw varies run to run with CV 0.35 (normal, or lognormal with ``--noise lognormal``); the policy's run has ``spread`` x that CV
(a fixed schedule varies less than a random one: 0.5) and a mean ``gain`` lower
(G = 1.45 pp).  Rows: equal means (size) at policy spread 0.5 / 1 / 2, and the paper's
effect (power) at spread 0.5.  Columns: studentized (the audit's default), raw-mean
within-seed permutation, paired t-test on d.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats

from evalkit.stats.randomisation import within_seed_permutation_test

CV_DRAW, V_BASE, GAIN = 0.35, 0.065, 0.0145


def _lognormal_cv(rng, mean, cv, size):
    s = math.sqrt(math.log1p(cv * cv))
    return mean * np.exp(rng.normal(-s * s / 2, s, size=size))


def _normal_cv(rng, mean, cv, size):
    """Symmetric run-to-run noise with coefficient of variation ``cv``."""
    return mean * (1.0 + cv * rng.standard_normal(size))


def campaign(rng, n, m, spread, gain, noise=_normal_cv):
    mu = V_BASE * np.exp(rng.normal(0, 0.25, size=(n, 1)))
    draws = noise(rng, mu, CV_DRAW, (n, m))
    return noise(rng, mu[:, 0] - gain, spread * CV_DRAW, n), draws


def rates(n, m, spread, gain, reps, rng, b=499, alpha=0.05, noise=_normal_cv):
    hits = np.zeros(3)
    for r in range(reps):
        pol, draws = campaign(rng, n, m, spread, gain, noise)
        kw = dict(alternative="two-sided", n_resamples=b, rng=r, confidence_level=None)
        hits[0] += within_seed_permutation_test(pol, list(draws), **kw).p_value <= alpha
        hits[1] += within_seed_permutation_test(pol, list(draws), statistic="mean",
                                                **kw).p_value <= alpha
        hits[2] += stats.ttest_1samp(draws.mean(axis=1) - pol, 0.0).pvalue <= alpha
    return hits / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--campaigns", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", choices=("normal", "lognormal"), default="normal",
                    help="run-to-run noise: symmetric, or skewed with the same CV")
    args = ap.parse_args()
    noise = _normal_cv if args.noise == "normal" else _lognormal_cv
    rng = np.random.default_rng(args.seed)
    print("| m | policy spread | gain | studentized | raw mean | paired t |")
    print("|---|---|---|---|---|---|")
    for m in (1, 3, 5):
        for spread, gain in ((1.0, 0.0), (0.5, 0.0), (2.0, 0.0), (0.5, GAIN)):
            s, r, t = rates(args.seeds, m, spread, gain, args.campaigns, rng,
                            noise=noise)
            what = "0 (size)" if gain == 0 else "1.45 pp"
            print(f"| {m} | {spread:g}x | {what} | {s:.3f} | {r:.3f} | {t:.3f} |", flush=True)


if __name__ == "__main__":
    main()
