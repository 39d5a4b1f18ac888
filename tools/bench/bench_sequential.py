"""Benchmark: the sequential gate's group-sequential look against references timed in the same run.

    python tools/bench/bench_sequential.py [--sizes 10,20,40] [--looks 3,5] [--repeat 5]
                                           [--out bench_sequential.json]

What ``evalkit gate --sequential`` runs per claim (:func:`evalkit.audit.sequential.verdict_for`):
the design's boundaries (:func:`evalkit.stats.group_sequential.design`: O'Brien-Fleming
spending by recursive integration, t-type boundaries; the gate computes them once per plan's
looks and level) and the walk over the looks (:func:`evalkit.stats.group_sequential.decide`:
the t statistic of the first ``n_k`` per-seed differences against each boundary).  Per plan
size (maximum seeds x number of looks, a look after each block of ``ceil(max / looks)``
seeds) it times, best of ``--repeat``:

- the boundaries, against the fixed gate's test on the same seeds
  (:func:`evalkit.stats.paired.paired_mean_test`, two-sided, with its 95% CI, as the audit
  runs it);
- the walk, per look walked, against scipy's ``ttest_1samp`` on the last walked look's seeds
  (the same t statistic, one-sided, shifted by min_effect);
- the claim's verdict as wired (boundaries cached, as on every claim after a plan's first),
  against the fixed gate's test.

Times are printed with the ratios derived from them; the ratios, not the times, carry over
between machines.  The data: one simulated campaign per size (matched-random V lognormal with
mean 0.0654 and CV 0.35, 3 draws per seed; the policy 22% better with the same CV), the
bundled protocol's alpha and min_effect, a plan of one claim.  The bench checks that its walk
decides as the gate's verdict does before it reports a time.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
from scipy import stats

from evalkit.audit.protocol import load_protocol
from evalkit.audit.sequential import look_floors, verdict_for
from evalkit.stats.group_sequential import decide, design
from evalkit.stats.paired import paired_mean_test
from evalkit.stats.power import sequential_looks

V_RANDOM = 0.0654            # the paper's random-placement V
GAIN = 0.22                  # the paper's relative gain (6.54% -> 5.10%)
CV = 0.35
DRAWS = 3
PROTOCOL = load_protocol()   # two-sided alpha 0.05, min_effect 0.5 pp


def timed(fn, repeat: int, min_time: float) -> float:
    """Best seconds per call over ``repeat`` batches; a batch repeats ``fn`` until it has run
    ``min_time`` seconds (sub-millisecond calls are below the clock's resolution alone)."""
    best = math.inf
    for _ in range(repeat):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            spent = time.perf_counter() - start
            if spent >= min_time:
                break
        best = min(best, spent / calls)
    return best


def lognormal(rng, mean: float, cv: float, shape) -> np.ndarray:
    s2 = math.log(1.0 + cv * cv)
    return rng.lognormal(math.log(mean) - s2 / 2.0, math.sqrt(s2), shape)


def campaign(rng, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Policy V (seeds,) and its matched-random draws (seeds, DRAWS)."""
    draws = lognormal(rng, V_RANDOM, CV, (seeds, DRAWS))
    policy = lognormal(rng, V_RANDOM * (1.0 - GAIN), CV, seeds)
    return policy, draws


def plan_looks(max_seeds: int, looks: int) -> tuple:
    """Cumulative seeds at each look: a look after each block of ceil(max / looks) seeds."""
    return sequential_looks(max_seeds, -(-max_seeds // looks))


def bench_size(rng, max_seeds: int, looks: int, repeat: int, min_time: float) -> dict:
    policy, draws = campaign(rng, max_seeds)
    d = draws.mean(axis=1) - policy
    alpha = PROTOCOL.alpha / 2.0 if PROTOCOL.alternative == "two-sided" else PROTOCOL.alpha
    shift = float(PROTOCOL.checks["gain_significant"].params["min_effect"])
    at = plan_looks(max_seeds, looks)
    spec = {"kind": "sequential", "alpha": PROTOCOL.alpha, "max_seeds": max_seeds,
            "batch": at[0], "planned_claims": [["regime", "policy"]]}
    claim = {"regime": "regime", "policy": "policy", "checks": [],
             "tail_luck": None, "level_trend": None,
             "units": [{"seed": s, "v_policy": float(v), "v_draws": [float(x) for x in row]}
                       for s, (v, row) in enumerate(zip(policy, draws))]}
    order = list(range(max_seeds))

    def verdict():
        return verdict_for(claim, PROTOCOL, PROTOCOL.tier_names[-1], spec, order, 1, shift)

    gs = design(at, alpha)
    floors = look_floors(claim["units"], order, at)
    walk = decide(d, gs, null_shift=shift, variance_floor=floors)
    wired = verdict()
    if wired.looks != at or wired.seeds_used != walk.seeds_used or \
            (wired.decision == "pass") != (walk.decision == "pass"):
        raise AssertionError(f"{max_seeds} seeds, looks {at}: the timed walk ({walk.decision} "
                             f"at {walk.seeds_used} seeds) is not the gate's verdict "
                             f"({wired.decision} at {wired.seeds_used} seeds, looks "
                             f"{wired.looks})")
    walked = len(walk.looks)
    last = d[:walk.seeds_used] - shift
    t_design = timed(lambda: design(at, alpha), repeat, min_time)
    t_fixed = timed(lambda: paired_mean_test(d, PROTOCOL.alternative, null_shift=shift),
                    repeat, min_time)
    t_walk = timed(lambda: decide(d, gs, null_shift=shift, variance_floor=floors), repeat,
                   min_time)
    t_ttest = timed(lambda: stats.ttest_1samp(last, 0.0, alternative="greater"), repeat,
                    min_time)
    t_verdict = timed(verdict, repeat, min_time)
    per_look = t_walk / walked
    return {"max_seeds": max_seeds, "looks": list(at), "decision": walk.decision,
            "looks_walked": walked, "seeds_used": walk.seeds_used,
            "design_s": t_design, "fixed_test_s": t_fixed, "walk_s": t_walk,
            "walk_per_look_s": per_look, "ttest_1samp_s": t_ttest, "verdict_s": t_verdict,
            "design_per_fixed_test": t_design / t_fixed,
            "look_per_ttest": per_look / t_ttest,
            "verdict_per_fixed_test": t_verdict / t_fixed}


def run(sizes, looks, repeat: int, min_time: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rows = [bench_size(rng, n, k, repeat, min_time) for n in sizes for k in looks]
    return {"seed": seed, "repeat": repeat, "min_time_s": min_time, "draws_per_seed": DRAWS,
            "cv": CV, "gain": GAIN, "v_random": V_RANDOM, "rows": rows}


HEADER = ("| max seeds | looks at | boundaries ms | fixed test ms | boundaries / fixed test | "
          "walked (seeds) | walk ms per look | ttest_1samp ms | look / ttest_1samp | "
          "verdict ms | verdict / fixed test |")


def report(res: dict) -> str:
    lines = [f"one simulated campaign per size: V lognormal mean {res['v_random']}, CV "
             f"{res['cv']}, {res['draws_per_seed']} draws per seed, policy "
             f"{res['gain']:.0%} better; best of {res['repeat']}; ms = milliseconds per call",
             "", HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for r in res["rows"]:
        lines.append(
            f"| {r['max_seeds']} | {', '.join(map(str, r['looks']))} | "
            f"{r['design_s'] * 1e3:.4g} | {r['fixed_test_s'] * 1e3:.4g} | "
            f"{r['design_per_fixed_test']:.3g} | {r['looks_walked']} ({r['seeds_used']}) | "
            f"{r['walk_per_look_s'] * 1e3:.4g} | {r['ttest_1samp_s'] * 1e3:.4g} | "
            f"{r['look_per_ttest']:.3g} | {r['verdict_s'] * 1e3:.4g} | "
            f"{r['verdict_per_fixed_test']:.3g} |")
    return "\n".join(lines)


def _whole_numbers(least: int):
    def parse(text: str) -> tuple:
        try:
            values = tuple(int(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole "
                                             "numbers (e.g. 10,20,40)") from None
        if any(v < least for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= {least}")
        return values
    return parse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_whole_numbers(2), default=(10, 20, 40),
                    help="maximum seeds of the plans (each >= 2)")
    ap.add_argument("--looks", type=_whole_numbers(1), default=(3, 5),
                    help="number of looks of the plans (each >= 1)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.05,
                    help="seconds a timed batch runs at least")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the numbers as JSON here")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    if not args.min_time >= 0:
        ap.error(f"--min-time must be a number of seconds >= 0, got {args.min_time}")
    for n in args.sizes:
        for k in args.looks:
            if plan_looks(n, k)[0] < 2:
                ap.error(f"--sizes {n} with --looks {k}: the first look would come after "
                         f"{plan_looks(n, k)[0]} seed(s) and a t statistic needs 2; use at "
                         f"most {n // 2} looks for {n} seeds")
    res = run(args.sizes, args.looks, args.repeat, args.min_time, args.seed)
    print(report(res))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
