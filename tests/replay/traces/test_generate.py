"""Generators: rates and burstiness against closed forms / scipy references, determinism."""

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.replay.traces import (
    JointResample, Lengths, fixed, gamma_arrivals, generate, lognormal, mmpp_bursts,
    parse_length, poisson, resample, square_wave,
)
from evalkit.replay.traces.generate import square_wave_schedule


def test_poisson_count_and_exponential_gaps():
    rate, dur = 50.0, 200.0
    t = poisson(rate, dur, rng=1)
    assert abs(len(t) - rate * dur) < 4 * np.sqrt(rate * dur)
    assert t.min() >= 0 and t.max() < dur and np.all(np.diff(t) >= 0)
    assert stats.kstest(np.diff(t), "expon", args=(0, 1 / rate)).pvalue > 1e-3


@pytest.mark.parametrize("b", [0.25, 0.5, 2.0, 4.0])
def test_gamma_burstiness(b):
    rate, dur = 40.0, 250.0
    t = gamma_arrivals(rate, dur, b, rng=7)
    gaps = np.diff(t)
    assert abs(len(t) / dur - rate) / rate < 0.1
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / b, rel=0.15)
    assert stats.kstest(gaps, "gamma", args=(b, 0, 1 / (rate * b))).pvalue > 1e-3


def test_seed_alias_and_seed_required():
    np.testing.assert_array_equal(poisson(5, 50, seed=3), poisson(5, 50, rng=3))
    np.testing.assert_array_equal(square_wave(10, 2, 1, 5, 50, seed=3),
                                  square_wave(10, 2, 1, 5, 50, rng=np.random.default_rng(3)))
    with pytest.raises(InputError, match="seed"):
        poisson(5, 50)
    assert generate("gamma_arrivals", seed=1, rate=1, duration_s=20).meta["generator"] == "gamma"


def test_gamma_with_b1_is_poisson():
    np.testing.assert_array_equal(gamma_arrivals(5, 100, 1.0, rng=3), poisson(5, 100, rng=3))


def test_square_wave_schedule_brute_force():
    edges, rates = square_wave_schedule(10.0, 3.0, 1.0, 9.0, 35.0, phase_s=4.0)
    assert edges[0] == 0 and edges[-1] == 35
    for x in np.linspace(0.01, 34.99, 997):
        i = np.searchsorted(edges, x, side="right") - 1
        busy = (x - 4.0) % 10.0 < 3.0
        assert rates[i] == (9.0 if busy else 1.0)


def test_square_wave_counts_in_busy_and_quiet():
    period, burst, quiet, busy, dur = 20.0, 5.0, 2.0, 30.0, 2000.0
    t = square_wave(period, burst, quiet, busy, dur, rng=11)
    in_burst = (t % period) < burst
    exp_busy, exp_quiet = busy * burst * dur / period, quiet * (period - burst) * dur / period
    assert abs(in_burst.sum() - exp_busy) < 4 * np.sqrt(exp_busy)
    assert abs((~in_burst).sum() - exp_quiet) < 4 * np.sqrt(exp_quiet)


def test_mmpp_dwell_times_and_rates():
    details = {}
    q, b, mq, mb, dur = 1.0, 20.0, 40.0, 10.0, 20000.0
    t = mmpp_bursts(q, b, mq, mb, dur, rng=5, details=details)
    bursts = np.array(details["bursts"])
    lengths = bursts[:-1, 1] - bursts[:-1, 0]          # last one is cut at the end
    assert lengths.mean() == pytest.approx(mb, rel=0.15)
    assert stats.kstest(lengths, "expon", args=(0, mb)).pvalue > 1e-3
    busy_time = (bursts[:, 1] - bursts[:, 0]).sum()
    assert busy_time / dur == pytest.approx(mb / (mq + mb), rel=0.1)
    inside = np.zeros(len(t), bool)
    for a, e in bursts:
        inside |= (t >= a) & (t < e)
    assert abs(inside.sum() - b * busy_time) < 4 * np.sqrt(b * busy_time)
    assert abs((~inside).sum() - q * (dur - busy_time)) < 4 * np.sqrt(q * (dur - busy_time))
    # Non-periodic: onsets are spread out (gaps between onsets have CV near 1, not 0).
    onset_gaps = np.diff(bursts[:, 0])
    assert onset_gaps.std() / onset_gaps.mean() > 0.5


def test_generate_deterministic_and_seed_sensitive():
    kw = dict(rate=5, duration_s=100, burstiness=0.5)
    a, b = generate("gamma", seed=3, **kw), generate("gamma", seed=3, **kw)
    assert a.sha256 == b.sha256 and a.meta == b.meta
    assert generate("gamma", seed=4, **kw).sha256 != a.sha256


def test_generate_lengths_do_not_move_arrivals():
    kw = dict(rate=5, duration_s=100, seed=9)
    a = generate("poisson", lengths=Lengths(fixed(10), fixed(5)), **kw)
    b = generate("poisson", lengths=Lengths(lognormal(100, 1), fixed(7)), **kw)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert set(a.requests["prompt_tokens"]) == {10}


def test_generate_meta_records_parameters():
    t = generate("square-wave", seed=2, period_s=30, burst_s=5, quiet_rate=1, busy_rate=10,
                 duration_s=120)
    assert t.meta["generator"] == "square_wave" and t.meta["seed"] == 2
    assert t.meta["params"]["phase_s"] == 0.0 and t.duration_s == 120
    assert "bursts" in generate("mmpp", seed=1, quiet_rate=1, busy_rate=5, mean_quiet_s=10,
                                mean_burst_s=5, duration_s=60).meta


def test_lognormal_median_and_clipping():
    rng = np.random.default_rng(0)
    x = lognormal(200, 0.8).sample(40000, rng)
    assert np.median(x) == pytest.approx(200, rel=0.03)
    y = lognormal(200, 2.0, min=50, max=400).sample(5000, rng)
    assert y.min() == 50 and y.max() == 400


def test_resample_joint_keeps_pairs_and_marginal_pool():
    src = generate("poisson", seed=1, rate=2, duration_s=50,
                   lengths=Lengths(lognormal(100, 1), lognormal(20, 1)))
    pairs = set(zip(src.requests["prompt_tokens"], src.requests["output_tokens"]))
    t = generate("poisson", seed=2, rate=5, duration_s=50, lengths=resample(src))
    assert set(zip(t.requests["prompt_tokens"], t.requests["output_tokens"])) <= pairs
    assert isinstance(resample(src), JointResample)
    marg = resample(src, "output_tokens").sample(100, np.random.default_rng(0))
    assert set(marg) <= set(src.requests["output_tokens"])


def test_parse_length_forms(tmp_path):
    assert parse_length("512").value == 512
    assert parse_length("fixed:64").value == 64
    ln = parse_length("lognormal:300,0.5,10,900")
    assert (ln.median, ln.sigma, ln.min, ln.max) == (300, 0.5, 10, 900)
    assert parse_length("lognormal:median=300,sigma=0.5").max is None
    src = generate("poisson", seed=1, rate=2, duration_s=20, lengths=Lengths(fixed(3), fixed(4)))
    src.write(tmp_path / "s.parquet")
    from evalkit.replay.traces import read_trace
    r = parse_length(f"resample:{tmp_path / 's.parquet'}:output_tokens", trace_loader=read_trace)
    assert set(r.values) == {4}
    for bad in ("lognormal:300", "gauss:3", "fixed:-1", "lognormal:mu=3,sigma=1"):
        with pytest.raises(InputError):
            parse_length(bad)


def test_generate_bad_parameters_list_valid_ones():
    with pytest.raises(InputError, match="valid parameters: rate, duration_s, burstiness"):
        generate("gamma", seed=1, rate=1, duration_s=10, period_s=3)
    with pytest.raises(InputError, match="missing"):
        generate("poisson", seed=1, rate=1)
    with pytest.raises(InputError, match="unknown trace kind"):
        generate("weibull", seed=1)
    with pytest.raises(InputError) as e:
        generate("gamma", seed=1, rate=1, duration_s=10, burstiness=0)
    assert e.value.column == "burstiness"
    with pytest.raises(InputError, match="longer than period"):
        generate("square_wave", seed=1, period_s=5, burst_s=6, quiet_rate=1, busy_rate=2,
                 duration_s=10)
    with pytest.raises(InputError, match="seed"):
        generate("poisson", seed=None, rate=1, duration_s=10)
