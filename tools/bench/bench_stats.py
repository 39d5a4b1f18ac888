"""Benchmark of evalkit.stats against references timed in the same run.

    python tools/bench/bench_stats.py

Prints: exact sign-flip at n = 20 vs scipy's exact permutation_test (ratio, identical p),
exact sign-flip at n = 40, overlap cost Phi of 100,000 F_K schedules of K = 8 against a
100,000-request run (what the audit's plan checks compute) vs a per-schedule Python loop on
a subset, peak extra memory of a Monte Carlo sign-flip with 2,000,000 resamples, and the
draw floor's spread pre-test (499 relabellings of 2000 campaigns, the hot path of every
simulated campaign in ``plan power``) against a plain numpy form of the same statistic with
seeds on the last axis (ratio, identical p), its quartiles against ``np.nanquantile``.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
from scipy import stats

from evalkit.stats import overlap_cost, sample_schedules, sign_flip_test
from evalkit.stats import floored
from evalkit.stats.overlap import RequestIndex


def timed(fn, repeat=3):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def plain_relabelled_p(log_policy, log_draws, has):
    """The spread pre-test's p written plainly (seeds on the last axis, one fancy-indexed
    gather, a fresh array per step): the reference the module's form is timed against."""
    count, (c, n, _) = floored.PRETEST_RELABELLINGS, log_draws.shape
    m = has.sum(axis=2)
    logs = np.where(has, log_draws, 0.0)
    shift = np.nanmean(np.where(m > 0, log_policy - logs.sum(axis=2) / m, np.nan), axis=1)
    pool = np.concatenate([(log_policy - shift[:, None])[..., None], logs], axis=2)
    total = pool.sum(axis=2)
    runs = np.where(np.concatenate([np.ones((c, n, 1), bool), has], axis=2), pool, np.nan)
    spread = floored.MAD_TO_SD * np.nanmedian(np.abs(
        runs - np.nanmedian(runs, axis=2)[..., None]).reshape(c, -1), axis=1)
    cap = np.where(spread > 0, (floored.PRETEST_CAP * spread) ** 2, np.inf)

    def statistic(run, kept, run_total, cap):
        others = (run_total - run) / np.maximum(kept, 1)
        run = run - run.mean(axis=-1, keepdims=True)
        others = others - others.mean(axis=-1, keepdims=True)
        size = (others * others).sum(axis=-1)
        w = np.clip(np.where(size > 0, (run * others).sum(axis=-1) / np.where(
            size > 0, size, 1.0), 0.0), 0.0, 1.0)
        return np.minimum((run - w[..., None] * others) ** 2, cap[..., None]).sum(axis=-1)

    observed = statistic(pool[..., 0], m, total, cap)
    uniform = np.random.default_rng(floored.PRETEST_SEED).random((count, n))
    label = np.floor(uniform[None] * (m[:, None, :] + 1)).astype(np.intp)
    run = pool[np.arange(c)[:, None, None], np.arange(n), label]
    ref = statistic(run, m[:, None, :], total[:, None, :], cap[:, None])
    tie = 1e-9 * np.abs(observed) + 1e-12 * n * np.max(np.where(np.concatenate(
        [np.ones((c, n, 1), bool), has], axis=2), np.abs(pool), 0.0), axis=(1, 2)) ** 2
    below = (ref <= (observed + tie)[:, None]).sum(axis=1)
    return (1.0 + below) / (count + 1.0)


def bench_pretest(rng):
    c, n, m = 2000, 10, 3
    log_draws = 0.35 * rng.standard_normal((c, n, m))
    log_policy = np.where(np.arange(c)[:, None] % 2 == 0, 0.05, 0.35) * rng.standard_normal(
        (c, n))
    has = np.ones((c, n, m), dtype=bool)
    t_ours, ours = timed(lambda: floored.relabelled_spread_p(log_policy, log_draws, has))
    t_ref, ref = timed(lambda: plain_relabelled_p(log_policy, log_draws, has))
    print(f"spread pre-test, {c} campaigns x {n} seeds x {m} draws, "
          f"{floored.PRETEST_RELABELLINGS} relabellings: evalkit {t_ours:.3f} s, plain numpy "
          f"{t_ref:.3f} s, ratio {t_ref / t_ours:.1f}x; identical p={np.array_equal(ours, ref)}")
    values = rng.standard_normal((c, n * m))
    values[rng.random(values.shape) < 0.2] = np.nan
    t_ours, ours = timed(lambda: floored._row_nanquantiles(values, (0.25, 0.75)))
    t_ref, ref = timed(lambda: np.nanquantile(values, [0.25, 0.75], axis=1))
    print(f"quartiles of {c} rows of {n * m} values with NaN: evalkit {t_ours * 1e3:.1f} ms, "
          f"np.nanquantile {t_ref * 1e3:.0f} ms, ratio {t_ref / t_ours:.0f}x; identical="
          f"{all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ours, ref))}")


def main():
    rng = np.random.default_rng(0)
    bench_pretest(rng)
    d20 = rng.normal(0.2, 1.0, 20)
    t_ref, ref = timed(lambda: stats.permutation_test(
        (d20,), np.mean, permutation_type="samples", n_resamples=np.inf,
        alternative="greater", vectorized=True), repeat=1)
    t_ours, ours = timed(lambda: sign_flip_test(d20, "greater"))
    print(f"sign-flip exact n=20: evalkit {t_ours * 1e3:.2f} ms, scipy {t_ref * 1e3:.0f} ms, "
          f"ratio {t_ref / t_ours:.0f}x (target >= 100x); p evalkit {ours.p_value:.10f} "
          f"scipy {ref.pvalue:.10f} identical={ours.p_value == ref.pvalue}")

    d40 = rng.normal(0.2, 1.0, 40)
    t40, r40 = timed(lambda: sign_flip_test(d40, "two-sided"))
    print(f"sign-flip exact n=40: {t40:.3f} s (target < 1 s), null size 2^40, "
          f"p = {r40.p_value:.6g}, exact={r40.exact}")

    n_req = 100_000
    rs = np.sort(rng.uniform(0, 3600, n_req))
    re = rs + rng.exponential(4.0, n_req)
    idx = RequestIndex(rs, re)

    def phi_of_draws():
        draws = sample_schedules(8, (0.0, 3600.0), 8.0, 120.0, 900.0, 100_000, rng=1)
        return overlap_cost(draws, 8.0, index=idx)
    t_phi, phi = timed(phi_of_draws)
    starts = np.sort(rng.uniform(0, 3000, (200, 8)), axis=1)

    def loop():
        return [sum(int(np.count_nonzero((rs < u + 8.0) & (re > u))) for u in row)
                for row in starts]
    t_loop, _ = timed(loop, repeat=1)
    per_sched_loop = t_loop / starts.shape[0]
    assert np.array_equal(idx.cost(starts, 8.0).sum(axis=1), loop())
    print(f"overlap cost: 100,000 F_K schedules K=8 drawn and costed against 100,000 requests "
          f"in {t_phi:.3f} s (target < 1 s); numpy-mask loop would take "
          f"{per_sched_loop * 1e5:.0f} s (ratio {per_sched_loop * 1e5 / t_phi:.0f}x); "
          f"mean Phi = {float(np.mean(phi.phi)):.1f}")

    tracemalloc.start()
    t_mc, mc = timed(lambda: sign_flip_test(rng.normal(0.1, 1, 60), n_resamples=2_000_000,
                                            rng=2), repeat=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"Monte Carlo sign-flip n=60, B=2,000,000: {t_mc:.2f} s, peak traced memory "
          f"{peak / 2 ** 20:.1f} MiB (a full sign matrix would be "
          f"{2_000_000 * 60 * 8 / 2 ** 30:.1f} GiB)")


if __name__ == "__main__":
    main()
