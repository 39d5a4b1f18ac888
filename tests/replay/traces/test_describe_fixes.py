"""trace describe: the partial last bin, gamma-shape MLE on quantised traces; Azure reader:
numeric timestamps and error messages that name the row as written in the file."""

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import integrate, stats

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.traces import Trace, describe, format_description, read_azure
from evalkit.replay.traces.describe import binned_rate
from evalkit.replay.traces.gamma_fit import _log_bucket_probs, gamma_shape_mle


# -- partial last bin ------------------------------------------------------------------------

def test_partial_last_bin_rate_is_over_its_own_width():
    # constant 10 req/s for 125 s with 10 s bins: the last bin covers 5 s only
    arrival = np.arange(1250) / 10.0 + 0.05
    edges, rates = binned_rate(arrival, 125.0, 10.0)
    assert edges[-1] == 125.0 and np.diff(edges)[-1] == pytest.approx(5.0)
    assert rates == pytest.approx(np.full(13, 10.0))       # the old code gave 5.0 at the end
    assert np.sum(rates * np.diff(edges)) == pytest.approx(len(arrival))


def test_describe_reports_and_excludes_a_short_partial_bin():
    arrival = np.arange(1250) / 10.0
    t = Trace.from_arrays(arrival[arrival <= 120.5], np.full(1206, 5), np.full(1206, 5),
                          meta={"window_s": 120.5})
    d = describe(t, bin_s=10.0)
    rot = d["rate_over_time"]
    assert rot["partial_last_bin"] and rot["last_bin_s"] == pytest.approx(0.5)
    assert rot["peak"] == pytest.approx(10.0)              # the 0.5 s bin is not the peak
    assert "partial" in format_description(d)
    full = describe(Trace.from_arrays(arrival[arrival < 120], np.full(1200, 5),
                                      np.full(1200, 5), meta={"window_s": 120.0}), bin_s=10.0)
    assert not full["rate_over_time"]["partial_last_bin"]


def test_plot_draws_partial_bin_at_its_true_width(tmp_path):
    from evalkit.replay.traces import plot_trace
    arrival = np.arange(1250) / 10.0
    t = Trace.from_arrays(arrival, np.full(1250, 5), np.full(1250, 5))
    plot_trace(t, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


# -- gamma shape on quantised timestamps -------------------------------------------------------

@pytest.mark.parametrize("k", [0, 1, 2, 7, 40])
def test_bucket_probability_matches_numerical_integration(k):
    a, s, q = 0.6, 0.08, 0.1
    ref = integrate.quad(lambda g: stats.gamma.pdf(g, a, scale=s) * max(0, 1 - abs(g / q - k)),
                         max(0, (k - 1) * q), (k + 1) * q, points=[k * q], limit=200)[0]
    got = float(np.exp(_log_bucket_probs(np.array([k]), q, a, s))[0])
    assert got == pytest.approx(ref, rel=1e-7, abs=1e-300)


def test_bucket_probabilities_sum_to_one():
    p = np.exp(_log_bucket_probs(np.arange(0, 5000), 0.1, 2.5, 0.04))
    assert p.sum() == pytest.approx(1.0, abs=1e-10)


def _floored_renewal(shape, mean_gap, q, n=4000, seed=1):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.gamma(shape, mean_gap / shape, n)) + rng.uniform(0, 10)
    return np.floor(t / q) * q


@pytest.mark.parametrize("shape", [0.5, 1.0, 3.0])
def test_quantised_mle_recovers_shape_where_positive_gap_fit_explodes(shape):
    t = _floored_renewal(shape, 0.05, 0.1)
    gaps = np.diff(t)
    assert (gaps == 0).mean() > 0.3
    fit = gamma_shape_mle(gaps)
    assert fit.method == "quantised" and fit.resolution_s == pytest.approx(0.1)
    assert fit.shape == pytest.approx(shape, rel=0.15)
    naive = stats.gamma.fit(gaps[gaps > 0], floc=0)[0]     # what describe printed before
    assert abs(np.log(naive / shape)) > 1.5


def test_millisecond_timestamps_with_float_noise():
    rng = np.random.default_rng(3)
    t = np.round(np.cumsum(rng.gamma(0.7, 0.002 / 0.7, 3000)) * 1000) / 1000 + 1.7e9
    d = describe(Trace.from_arrays(t - t[0], np.full(3000, 5), np.full(3000, 5)))
    ia = d["interarrival"]
    assert ia["n_zero_gaps"] > 300
    assert ia["gamma_shape_mle_method"] == "quantised"
    assert ia["gamma_shape_mle"] == pytest.approx(0.7, rel=0.2)


def test_too_coarse_grid_gives_no_shape_instead_of_a_number():
    # 16 arrivals per 1 s bucket: only the mean is identifiable
    t = _floored_renewal(1.0, 1 / 16, 1.0, n=2000)
    fit = gamma_shape_mle(np.diff(t))
    assert fit.shape is None and "not identifiable" in fit.note


def test_exact_gaps_use_the_ordinary_mle_and_degenerate_cases_say_why():
    rng = np.random.default_rng(0)
    g = rng.gamma(0.4, 1.0, 3000)
    assert gamma_shape_mle(g).shape == pytest.approx(stats.gamma.fit(g, floc=0)[0], rel=1e-9)
    assert gamma_shape_mle(np.full(50, 0.2)).shape is None            # periodic
    ties = np.concatenate([rng.gamma(0.4, 1.0, 500), np.zeros(100)])  # off-grid, 17 % zero
    fit = gamma_shape_mle(ties)
    assert fit.shape is None and "simultaneous" in fit.note
    few = np.concatenate([rng.gamma(0.4, 1.0, 2000), np.zeros(3)])
    assert gamma_shape_mle(few).method == "positive gaps only"


# -- Azure reader ----------------------------------------------------------------------------

def _azure(path, stamps):
    n = len(stamps)
    pd.DataFrame({"TIMESTAMP": stamps, "ContextTokens": [100] * n,
                  "GeneratedTokens": [10] * n}).to_csv(path, index=False)
    return path


def test_azure_numeric_timestamps_are_seconds(tmp_path):
    t = read_azure(_azure(tmp_path / "n.csv", [-5, -2.5, 0, 7]))
    assert list(t.arrival_s) == pytest.approx([0.0, 2.5, 5.0, 12.0])  # not the year -5
    assert t.meta["timestamp_kind"] == "numeric seconds" and t.meta["t0_value"] == -5.0
    t = read_azure(_azure(tmp_path / "i.csv", [0, 1, 2, 3]))
    assert list(t.arrival_s) == [0.0, 1.0, 2.0, 3.0]


def test_azure_mixed_column_names_row_and_value_as_written(tmp_path):
    p = _azure(tmp_path / "m.csv", ["2023-11-16 18:17:03.0", "-5", "2023-11-16 18:17:04.0"])
    with pytest.raises(InputError) as e:
        read_azure(p)
    msg = e.value.format()
    assert e.value.column == "TIMESTAMP" and "data row 2: '-5'" in msg
    assert "np." not in msg and "mixes numbers and datetimes" in msg


def test_azure_bad_token_count_names_value_not_numpy_repr(tmp_path):
    p = tmp_path / "t.csv"
    pd.DataFrame({"TIMESTAMP": [0, 1, 2], "ContextTokens": [5, "many", 2],
                  "GeneratedTokens": [1, 2, 3]}).to_csv(p, index=False)
    with pytest.raises(InputError) as e:
        read_azure(p)
    assert e.value.column == "ContextTokens" and "data row 2: 'many'" in e.value.message
    assert "np." not in e.value.format()


def test_cli_describe_and_import_exit_2_on_bad_azure(tmp_path):
    p = _azure(tmp_path / "m.csv", ["2023-11-16 18:17:03.0", "soon"])
    r = CliRunner().invoke(cli, ["trace", "import", str(p), "--format", "azure",
                                 "--out", str(tmp_path / "o.parquet")])
    assert r.exit_code == 2 and "data row 2: 'soon'" in r.output
    good = _azure(tmp_path / "g.csv", list(np.floor(np.linspace(0, 50, 400))))
    r = CliRunner().invoke(cli, ["trace", "import", str(good), "--format", "azure",
                                 "--out", str(tmp_path / "g.parquet")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["trace", "describe", str(tmp_path / "g.parquet")])
    assert r.exit_code == 0 and "quantised" in r.output, r.output
