"""Power of the paired sign-flip test for a few effect sizes and seed counts.

    python examples/power_curve.py [--campaigns 1000]

Per-seed differences d_s ~ Normal(effect, 1) (effect in units of the per-seed noise SD).
Rejection rate at alpha = 0.05 over simulated campaigns; effect 0 shows the type-I error,
bounded by the exact size floor(alpha 2^n) / 2^n.
"""

from __future__ import annotations

import argparse

import numpy as np

from evalkit.stats import seeds_needed, sign_flip_test


def power(effect, n_seeds, alternative, campaigns, rng, alpha=0.05):
    hits = sum(sign_flip_test(rng.normal(effect, 1.0, n_seeds), alternative).p_value <= alpha
               for _ in range(campaigns))
    return hits / campaigns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--campaigns", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    effects = (0.0, 0.25, 0.5, 1.0, 1.5)
    seeds = (5, 6, 10, 20)
    for alternative in ("greater", "two-sided"):
        print(f"alternative={alternative}  (alpha 0.05; needs >= "
              f"{seeds_needed(0.05, alternative)} seeds to reach it at all)")
        print("effect/SD " + "".join(f"  n={n:<5d}" for n in seeds))
        for effect in effects:
            row = [power(effect, n, alternative, args.campaigns, rng) for n in seeds]
            print(f"{effect:9.2f} " + "".join(f"  {p:7.3f}" for p in row))
        print()


if __name__ == "__main__":
    main()
