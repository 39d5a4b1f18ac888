"""Coverage of the per-run V interval when violations cluster in episodes.

Requests arrive as a Poisson process; violations are likelier inside episodes of fixed
length that start at Poisson times (the run's E[V] is known in closed form).  The interval
must cover E[V] >= 0.93 when episodes are as long as the old fixed blocks (60 s in 600 s
runs, 20 s in 100 s runs), with few large clusters, and at V = 1% where many runs have no
violation at all (the old interval fell back to independent requests there: 0.44).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.runlog.vinterval import (_bandwidth, cluster_counts, episode_blocks, robust_v_fit,
                                      segments, v_interval)


def run(rng, horizon, length, episodes, p_in, p_out, rate):
    n = rng.poisson(rate * horizon)
    t = np.sort(rng.uniform(0, horizon, n))
    hit = np.zeros(n, dtype=bool)
    for start in rng.uniform(0, horizon - length, rng.poisson(episodes)):
        hit |= (t >= start) & (t < start + length)
    return t, rng.random(n) < np.where(hit, p_in, p_out)


def truth(horizon, length, episodes, p_in, p_out, rate):
    """E[V]: a time t is inside an episode with probability 1 - exp(-episodes q(t))."""
    grid = np.linspace(0, horizon, 200_001)
    q = (np.clip(grid, 0, horizon - length) - np.clip(grid - length, 0, horizon - length)) / (
        horizon - length)
    return float(np.mean(p_out + (p_in - p_out) * (1 - np.exp(-episodes * q))))


CASES = {
    "60 s episodes in 600 s runs": dict(horizon=600, length=60, episodes=4, p_in=0.5,
                                        p_out=0.02, rate=5),
    "20 s episodes in 100 s runs": dict(horizon=100, length=20, episodes=4, p_in=0.5,
                                        p_out=0.02, rate=10),
    "few large clusters": dict(horizon=600, length=80, episodes=4, p_in=0.4, p_out=0.01,
                               rate=5),
    "V = 1% with zero-violation runs": dict(horizon=600, length=10, episodes=0.6, p_in=1.0,
                                            p_out=0.0, rate=5),
}


def coverage(case, reps, seed):
    kw = CASES[case]
    target = truth(**kw)
    rng = np.random.default_rng(seed)
    hits = zeros = 0
    for _ in range(reps):
        t, v = run(rng, **kw)
        low, high, _, _ = v_interval(t, v)
        hits += low <= target <= high
        zeros += not v.any()
    return hits / reps, zeros


@pytest.mark.parametrize("case", ["60 s episodes in 600 s runs",
                                  "V = 1% with zero-violation runs"])
def test_coverage_fast(case):
    cov, zeros = coverage(case, 120, 1)
    assert cov >= 0.93
    if case.startswith("V = 1%"):
        assert zeros >= 40                      # the runs the old interval got wrong


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_coverage_at_least_093(case):
    # measured at 400 runs, seeds 1-5: 0.96-0.98, 0.96-0.98, 0.95-0.97, 0.97-0.99 (old
    # fixed blocks: 0.84, 0.92, 0.80, 0.44; autocorrelation bandwidth without the episode
    # floor: 0.96-0.98, 0.91-0.94, 0.94-0.96, 0.97-0.99)
    cov, _ = coverage(case, 400, 2)
    assert cov >= 0.93 - math.sqrt(0.93 * 0.07 / 400)


def test_bandwidth_follows_the_episode_length():
    # residuals correlated over 12 blocks (a 60 s episode in 5 s blocks): the bandwidth
    # reaches past them; white noise: none
    rng = np.random.default_rng(3)
    white = rng.normal(size=400)
    assert _bandwidth(white - white.mean())[0] <= 2
    ep = np.convolve(rng.normal(size=420), np.ones(12), "valid")[:400]
    m, _ = _bandwidth(ep - ep.mean())
    assert 8 <= m <= 30


def test_zero_violations_bound_rests_on_clusters_not_requests():
    t = np.linspace(0, 600, 6000)
    low, high, _, _ = v_interval(t, np.zeros(6000, dtype=bool))
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 20))     # 20 clusters
    t = np.linspace(0, 100, 1000)
    assert v_interval(t, np.zeros(1000, dtype=bool))[1] == pytest.approx(1 - 0.025 ** 0.1)


def test_segments_find_an_episode_and_nothing_in_a_constant_rate():
    # independent reference: the rate steps 0.02 -> 0.5 -> 0.02 at blocks 20 and 50
    rng = np.random.default_rng(5)
    n_b = np.full(80, 20.0)
    rate = np.where((np.arange(80) >= 20) & (np.arange(80) < 50), 0.5, 0.02)
    v_b = rng.binomial(20, rate).astype(float)
    cuts = [a for a, _ in segments(n_b, v_b)]
    assert len(cuts) == 3 and abs(cuts[1] - 20) <= 1 and abs(cuts[2] - 50) <= 1
    assert 28 <= episode_blocks(n_b, v_b) <= 32
    flat = rng.binomial(20, np.full(80, 0.2)).astype(float)
    assert segments(n_b, flat) == [(0, 80)] and episode_blocks(n_b, flat) == 0.0


def test_a_run_inside_one_long_episode_is_read_as_few_clusters():
    # 100 s, an episode from 4 s to 96 s with a 3 s dip: the autocorrelation dies within
    # the short dips (20 clusters or more), the episode floor does not (about 2)
    for seed in (6, 7):
        rng = np.random.default_rng(seed)
        t = np.sort(rng.uniform(0, 100, 1000))
        inside = (t > 4) & (t < 96) & ~((t > 50) & (t < 53))
        v = rng.random(t.size) < np.where(inside, 0.5, 0.02)
        n_b, v_b, kind = cluster_counts(t, v)
        _, _, _, clusters = robust_v_fit(n_b, v_b, kind)
        assert clusters <= 3.0
        r = v_b - v.mean() * n_b
        assert n_b.size / (1 + 2 * _bandwidth(r)[0]) >= 20       # without the floor


def test_segmentation_threshold_just_below_and_above():
    # two blocks of 100 requests, 10 and a violations: split iff 2 log LR > 3 log 2
    from scipy import optimize

    def ll(k, n, p):                     # binomial log-likelihood without the coefficient
        return k * math.log(p) + (n - k) * math.log(1 - p)

    def lr(a):
        p = (10 + a) / 200
        return 2 * (ll(10, 100, 0.10) + ll(a, 100, a / 100) - ll(10, 100, p) - ll(a, 100, p))

    at = optimize.brentq(lambda a: lr(a) - 3 * math.log(2), 10.5, 30)
    n_b = np.array([100.0, 100.0])
    assert segments(n_b, np.array([10.0, at - 1e-6])) == [(0, 2)]
    assert segments(n_b, np.array([10.0, at + 1e-6])) == [(0, 1), (1, 2)]


if __name__ == "__main__":          # the coverage table: python tests/<this file>
    for name, kw in CASES.items():
        target, covs, widths = truth(**kw), [], []
        for seed in range(1, 6):
            rng = np.random.default_rng(seed)
            hits = 0
            for _ in range(400):
                t, v = run(rng, **kw)
                low, high, _, _ = v_interval(t, v)
                hits += low <= target <= high
                widths.append(high - low)
            covs.append(hits / 400)
        print(f"{name:34s} coverage (seeds 1-5) {min(covs):.3f}-{max(covs):.3f}  "
              f"mean width {np.mean(widths):.3f}  median {np.median(widths):.3f}")


def _episodes_run(starts, length=30.0, horizon=600.0, rate=5.0):
    """Deterministic arrivals at ``rate``/s; every second request inside an episode violates."""
    t = np.arange(0.0, horizon, 1.0 / rate)
    inside = np.zeros(t.size, dtype=bool)
    for s in starts:
        inside |= (t >= s) & (t < s + length)
    return t, inside & (np.arange(t.size) % 2 == 0)


def test_a_run_with_few_episodes_is_flagged_and_one_with_many_is_not():
    one = v_interval(*_episodes_run([200.0]))
    assert one.episodes == 1 and one.few_clusters
    low, high, clusters, kind = one                         # still the 4-tuple it was
    assert (low, high, clusters, kind) == tuple(one)[:4] and kind == "time blocks"
    four = v_interval(*_episodes_run([40.0, 180.0, 320.0, 460.0]))
    assert four.episodes == 4 and four.few_clusters
    many = v_interval(*_episodes_run(np.arange(10.0, 590.0, 60.0), length=20.0))
    assert many.episodes >= 5 and not many.few_clusters
    # no change of rate: nothing clustered to count, not flagged
    t = np.arange(0.0, 600.0, 0.2)
    flat = v_interval(t, np.arange(t.size) % 7 == 0)
    assert flat.episodes == 0 and not flat.few_clusters
    assert not v_interval(t, np.zeros(t.size, dtype=bool)).few_clusters


def test_few_bursts_with_a_violation_are_flagged():
    arrival = np.repeat(np.arange(20) * 15.0, 16)            # 20 bursts of 16 identical
    bad = np.zeros(arrival.size, dtype=bool)
    bad[:16 * 3] = True                                      # three bursts violate
    res = v_interval(arrival, bad)
    assert res[3] == "identical-arrival bursts" and res.episodes == 3 and res.few_clusters
    bad[:16 * 8] = True
    assert not v_interval(arrival, bad).few_clusters


EPISODE_COUNTS = {"about one episode": dict(horizon=600, length=60, episodes=1, p_in=0.5,
                                            p_out=0.02, rate=5),
                  "about twenty episodes": dict(horizon=600, length=10, episodes=20, p_in=0.5,
                                                p_out=0.02, rate=5)}


@pytest.mark.slow
def test_coverage_at_one_and_at_many_episodes_per_run():
    # measured at 200 runs: 0.57 at about one episode (runs with < 5 episodes: 0.99 of them),
    # 0.985 at about twenty (flagged: 0.03 of them) -- the module docstring's numbers
    out = {}
    for name, kw in EPISODE_COUNTS.items():
        target = truth(**kw)
        rng = np.random.default_rng(3)
        hits = flagged = 0
        for _ in range(200):
            t, v = run(rng, **kw)
            res = v_interval(t, v)
            hits += res[0] <= target <= res[1]
            flagged += res.few_clusters or res.episodes == 0
        out[name] = (hits / 200, flagged / 200)
    assert out["about one episode"][0] < 0.75 and out["about one episode"][1] > 0.9
    assert out["about twenty episodes"][0] >= 0.95 and out["about twenty episodes"][1] < 0.1
