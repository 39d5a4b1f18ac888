"""Recorded outputs of the F_K sampler and the randomisation tests, for bit-identity checks.

``python tests/recorded/stats_cases.py`` rewrites ``stats_outputs.json`` from the current code
(it was recorded from the code before the samplers and the tests were merged into one
module each); ``tests/stats/test_package_recorded.py`` compares the code against it.  Arrays are
stored as the sha256 of their float64 bytes (bit-identity), scalars as ``repr``.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUTPUTS = HERE / "stats_outputs.json"

# (k, span, duration, min_gap, max_gap, n, seed, keyword arguments)
SCHEDULES = {
    "edges_auto": (4, (0.0, 190.0), 8.0, 20.0, 80.0, 500, 1, {"train_start": 0.0}),
    "edges_box": (3, (0.0, 200.0), 8.0, 20.0, 80.0, 300, 2, {"method": "reject-box"}),
    "edges_seq": (4, (0.0, 90.0), 6.0, 5.0, 30.0, 300, 3,
                  {"method": "sequential", "train_start": -3.0}),
    "edges_tight_auto": (12, (0.0, 130.0), 8.0, 2.0, 12.0, 200, 4, {}),
    "edges_run_end": (5, (12.5, 303.0), 8.0, 40.0, 100.0, 50, 5,
                      {"train_start": 0.0, "run_end": 320.0}),
    "edges_k1": (1, (0.0, 300.0), 8.0, 20.0, 200.0, 100, 6, {}),
    "edges_fixed": (3, (0.0, 38.0), 10.0, 5.0, 10.0, 100, 7, {}),
    "edges_forced": (2, (0.0, 122.0), 2.0, 5.0, 40.0, 5, 8, {}),
    "edges_k0": (0, (0.0, 100.0), 8.0, 10.0, 200.0, 5, 9, {}),
    "fixture_like": (6, (3.1, 283.0), 8.0, 25.0, 60.0, 1, 10,
                     {"train_start": 0.0, "run_end": 300.0}),
    "inf_auto": (3, (0.0, 100.0), 5.0, 10.0, math.inf, 300, 11, {}),
    "inf_train_start": (2, (0.0, 100.0), 5.0, 10.0, math.inf, 300, 12, {"train_start": 20.0}),
    "inf_k1": (1, (0.0, 100.0), 5.0, 10.0, math.inf, 50, 13, {}),
    "free_box": (8, (0.0, 600.0), 8.0, 30.0, 90.0, 300, 14,
                 {"edges": False, "method": "reject-box"}),
    "free_auto_box": (3, (0.0, 300.0), 8.0, 20.0, 200.0, 300, 15, {"edges": False}),
    "free_k1": (1, (0.0, 100.0), 5.0, 10.0, 20.0, 50, 16, {"edges": False}),
    "free_fixed": (3, (0.0, 100.0), 5.0, 20.0, 20.0, 10, 17, {"edges": False}),
    "free_inf": (3, (0.0, 100.0), 5.0, 10.0, math.inf, 100, 18, {"edges": False}),
}

SIGNFLIP = {   # name -> (n, seed of the data, keyword arguments)
    "exact_8": (8, 1, {}),
    "exact_13_two": (13, 2, {"alternative": "two-sided"}),
    "exact_17_less": (17, 3, {"alternative": "less"}),        # Monte Carlo CI
    "mc_20": (20, 4, {"n_resamples": 5000, "rng": 7}),
    "mc_45": (45, 5, {"alternative": "two-sided"}),
    "ties": (6, 6, {"ties": True}),
    "level_90": (9, 7, {"confidence_level": 0.9, "atol": 1e-3}),
}

PERMUTATION = {  # name -> (draws per seed, seed of the data, keyword arguments)
    "stud_m2": ((2, 2, 2, 2, 2, 2), 1, {}),
    "stud_mixed": ((1, 2, 3, 1, 2), 2, {"alternative": "two-sided"}),
    "stud_mc": ((3,) * 14, 3, {"n_resamples": 3000, "rng": 5}),
    "mean_m2": ((2, 2, 2, 2, 2, 2, 2), 4, {"statistic": "mean"}),
    "mean_mixed_less": ((1, 3, 2, 4, 1), 5, {"statistic": "mean", "alternative": "less"}),
    "mean_mc": ((2,) * 30, 6, {"statistic": "mean", "alternative": "two-sided"}),
    "mean_big_ci": ((3,) * 9, 7, {"statistic": "mean"}),          # Monte Carlo CI
    "one_draw": ((1,) * 9, 8, {}),
    "one_draw_mean": ((1,) * 9, 8, {"statistic": "mean"}),
    "no_ci": ((2, 2, 2, 2), 9, {"confidence_level": None}),
}


def digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(a, dtype=float)).tobytes()).hexdigest()


def signflip_data(n: int, seed: int, ties: bool = False) -> np.ndarray:
    d = np.random.default_rng(seed).normal(0.05, 0.1, n)
    if ties:
        d[:3] = [0.0, 0.1, -0.1]
    return d


def permutation_data(m, seed: int):
    rng = np.random.default_rng(100 + seed)
    policy = rng.uniform(0.0, 0.3, len(m))
    draws = [rng.uniform(0.0, 0.5, k) for k in m]
    return policy, draws


def result_record(res) -> dict:
    out = {k: repr(v) for k, v in res.to_dict().items()}
    out["null_distribution"] = digest(res.null_distribution(max_points=5000, seed=3))
    return out


def schedule_outputs_one(name: str) -> dict:
    from evalkit.stats import sample_schedules

    k, span, d, lo, hi, n, seed, kw = SCHEDULES[name]
    s = sample_schedules(k, span, d, lo, hi, n, np.random.default_rng(seed), **kw)
    return {"shape": list(s.shape), "sha256": digest(s),
            "first": [repr(float(x)) for x in s[0]] if s.size else []}


def schedule_outputs() -> dict:
    return {name: schedule_outputs_one(name) for name in SCHEDULES}


def signflip_outputs() -> dict:
    from evalkit.stats import sign_flip_test

    out = {}
    for name, (n, seed, kw) in SIGNFLIP.items():
        kw = dict(kw)
        d = signflip_data(n, seed, kw.pop("ties", False))
        out[name] = result_record(sign_flip_test(d, **kw))
    return out


def permutation_outputs() -> dict:
    from evalkit.stats import within_seed_permutation_test

    out = {}
    for name, (m, seed, kw) in PERMUTATION.items():
        policy, draws = permutation_data(m, seed)
        out[name] = result_record(within_seed_permutation_test(policy, draws, **kw))
    return out


def power_outputs() -> dict:
    """Recorded from the sign-flip ``seeds_needed(alpha, alternative)`` and
    ``min_attainable_p(n, ...)`` and the permutation test's ``seeds_needed(m, alpha,
    alternative)`` and ``min_attainable_p(m, ...)``; now one function each."""
    from evalkit.stats.randomisation import min_attainable_p, seeds_needed

    out = {}
    for alt in ("greater", "less", "two-sided"):
        out[f"sf_seeds_needed_{alt}"] = [seeds_needed(a, alt) for a in (0.05, 0.01, 0.2)]
        out[f"perm_seeds_needed_{alt}"] = [seeds_needed(a, alt, m=m)
                                           for m in (1, 2, 5) for a in (0.05, 0.01)]
        out[f"sf_min_p_{alt}"] = [repr(min_attainable_p(n, alt, b))
                                  for n in (2, 5, 12) for b in (None, 999)]
        out[f"perm_min_p_{alt}"] = [repr(min_attainable_p(m, alt, b))
                                    for m in ((1, 1, 1), (2, 3, 4, 1)) for b in (None, 99)]
    return out


def outputs() -> dict:
    return {"schedules": schedule_outputs(), "sign_flip": signflip_outputs(),
            "permutation": permutation_outputs(), "power": power_outputs()}


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1]))
    OUTPUTS.write_text(json.dumps(outputs(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUTPUTS}")
