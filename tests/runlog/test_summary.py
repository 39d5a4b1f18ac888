"""Per-run summary on the fixtures, against brute-force recomputation, and the CLI.

Boundaries of the run summary (``evalkit.runlog.summary``) against a brute-force loop, and
``summarize_runs`` on invalid, unreadable and edge runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import evalkit.runlog.io as io
import evalkit.runlog.summary as summary_mod
from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.runlog import metrics
from evalkit.runlog.design import DESIGN_COLUMNS
from evalkit.runlog.summary import request_numbers, summarize_run, summarize_runs, SUMMARY_COLUMNS
from evalkit.runlog.validate.problem import Problem
from evalkit.runlog.validate.store import ValidationReport
from evalkit.runlog.vinterval import v_interval
from tests.support.tiny_runs import _cp, _merges, _meta, _requests, _write


RUN = "fixture-s0-fixed_h"


@pytest.fixture(scope="module")
def table(fixtures_dir_module):
    return summarize_runs(fixtures_dir_module / "runs")


@pytest.fixture(scope="module")
def fixtures_dir_module(request):
    from pathlib import Path
    return Path(request.config.rootpath) / "fixtures"


@pytest.fixture
def runs(copy_fixture):
    names = ("fixture-s0-no_sync", RUN, "fixture-s1-no_sync")
    return [copy_fixture(f"runs/{n}") for n in names][0].parent


def set_meta(run_dir, **changes):
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def test_columns_order_and_determinism(table, fixtures_dir):
    assert list(table.columns) == list(SUMMARY_COLUMNS) + list(DESIGN_COLUMNS)
    assert len(table) == 12 and table.run_id.is_monotonic_increasing
    pd.testing.assert_frame_equal(table, summarize_runs(fixtures_dir / "runs"))


def test_row_matches_brute_force(table, fixtures_dir):
    run_dir = fixtures_dir / "runs" / RUN
    req = pq.read_table(run_dir / "requests.parquet").to_pandas()
    mer = pq.read_table(run_dir / "merges.parquet").to_pandas()
    meta = json.loads((run_dir / "run.json").read_text())
    row = table.set_index("run_id").loc[RUN]
    slo, horizon = meta["slo"], meta["horizon_s"]
    lat, viol, ttft_viol, good, exposed = [], 0, 0, 0, 0
    for r in req.itertuples():
        done = r.ok and not math.isnan(r.end_s)
        e2e = r.end_s - r.arrival_s if done else math.inf
        ttft = r.first_token_s - r.arrival_s if r.ok and not math.isnan(r.first_token_s) else math.inf
        lat.append(e2e)
        viol += e2e > slo["e2e_s"]
        ttft_viol += ttft > slo["ttft_s"]
        good += done and e2e <= slo["e2e_s"] and ttft <= slo["ttft_s"]
        lo, hi = (r.arrival_s, r.end_s) if done else (r.sent_s, horizon if math.isnan(r.end_s) else r.end_s)
        exposed += any(s < hi and e > lo for s, e in zip(mer.start_s, mer.end_s))
    n = len(req)
    assert row.n_requests == n and row.n_failed == int((~req.ok).sum())
    # V counts every configured SLO (here e2e and TTFT): V = 1 - goodput, not e2e alone
    assert row.violation_rate == pytest.approx(1 - good / n)
    assert row.e2e_violation_rate == pytest.approx(viol / n)
    assert row.violation_rate > row.e2e_violation_rate   # the fixtures' TTFT SLO binds
    assert row.ttft_violation_rate == pytest.approx(ttft_viol / n)
    assert math.isnan(row.tpot_violation_rate)          # no TPOT SLO in the fixtures
    assert row.goodput_rate == pytest.approx(good / n)
    assert row.exposure_requests == pytest.approx(exposed / n)
    finite = np.sort([x for x in lat if x != math.inf])
    assert row.p50_s == pytest.approx(np.quantile(np.append(finite, [np.inf] * (n - len(finite)))[:n], 0.5))
    first = req.arrival_s.min()
    last = min(horizon, max(req.end_s.fillna(horizon).max(), req.arrival_s.max()))
    assert (row.span_start_s, row.span_end_s) == pytest.approx((first, last))
    inside = sum(1 for s, e in zip(mer.start_s, mer.end_s) if s >= first and e <= last)
    assert row.k_total == len(mer) == 5 and row.k_observed == inside == 4   # first merge precedes requests
    covered = sum(max(0.0, min(e, last) - max(s, first)) for s, e in zip(mer.start_s, mer.end_s))
    assert row.exposure_time == pytest.approx(covered / (last - first))
    assert row.arrival_rate_scheduled == pytest.approx((n - 1) / (req.arrival_s.max() - first))
    assert row.send_lag_p99_s == pytest.approx(np.quantile(req.sent_s - req.arrival_s, 0.99))
    assert row.prompt_tokens_total == req.prompt_tokens.sum()
    assert row.output_tokens_total == req.output_tokens[req.ok].sum()
    assert row.slo_e2e_s == slo["e2e_s"] and row.merge_duration_s == meta["merge_duration_s"]


def test_roles_pairing_and_load(table):
    t = table.set_index("run_id")
    no_sync = t[t.role == "no_sync"]
    assert (no_sync.k_total == 0).all() and (no_sync.exposure_requests == 0).all()
    mr = t[t.role == "matched_random"]
    assert (mr.matched_to == "fixed_h").all() and sorted(mr.draw.unique()) == [0, 1]
    assert t.draw[t.role != "matched_random"].isna().all()
    # matched-random draws have the policy's observed K
    for seed in range(3):
        k = t.loc[f"fixture-s{seed}-fixed_h", "k_observed"]
        assert (mr[mr.seed == seed].k_observed == k).all()
    # one trace realisation per seed, shared by its four runs
    per_seed = table.groupby("seed").trace_realisation.nunique()
    assert (per_seed == 1).all() and table.trace_realisation.nunique() == 3
    assert table.step_rate.between(0.45, 0.55).all()
    assert (table.v_ci_low <= table.violation_rate).all() and (table.violation_rate <= table.v_ci_high).all()


def test_summarize_run_matches_table(table, fixtures_dir):
    row = summarize_run(fixtures_dir / "runs" / RUN)
    ref = table.set_index("run_id").loc[RUN]
    for col in SUMMARY_COLUMNS[1:]:
        a, b = row[col], ref[col]
        if isinstance(a, float) and math.isnan(a):
            assert pd.isna(b), col
        elif a is None:
            assert pd.isna(b), col
        else:
            assert a == pytest.approx(b), col


def test_incomplete_excluded_unless_asked(runs):
    set_meta(runs / RUN, complete=False)
    df = summarize_runs(runs)
    assert RUN not in df.run_id.tolist() and df.attrs["excluded"] == [RUN]
    df = summarize_runs(runs, include_incomplete=True)
    assert not df.set_index("run_id").loc[RUN, "complete"]
    for name in ("fixture-s0-no_sync", "fixture-s1-no_sync"):
        set_meta(runs / name, complete=False)
    with pytest.raises(InputError, match="no complete runs"):
        summarize_runs(runs)


def test_missing_runs_dir_is_an_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        summarize_runs(tmp_path / "missing")
    with pytest.raises(InputError, match="no runs found"):
        summarize_runs(tmp_path)


@pytest.mark.parametrize("ext,reader", [(".csv", pd.read_csv), (".parquet", pd.read_parquet),
                                        (".json", lambda p: pd.read_json(p, orient="records"))])
def test_cli_writes_by_extension(runs, tmp_path, ext, reader):
    out = tmp_path / "out" / f"table{ext}"
    result = CliRunner().invoke(cli, ["summarize", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    back = reader(out)
    assert back.run_id.tolist() == sorted(["fixture-s0-no_sync", RUN, "fixture-s1-no_sync"])
    assert back.violation_rate.to_numpy() == pytest.approx(summarize_runs(runs).violation_rate.to_numpy())
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]   # no temp left


def test_cli_prints_readable_table_and_csv(runs):
    result = CliRunner().invoke(cli, ["summarize", str(runs)])
    assert result.exit_code == 0 and RUN in result.output and "violation_rate" in result.output
    result = CliRunner().invoke(cli, ["summarize", str(runs), "--format", "csv"])
    assert result.exit_code == 0 and result.output.splitlines()[0].startswith("run_id,role,policy")


def test_cli_bad_input_exits_2_and_writes_nothing(runs, tmp_path):
    out = tmp_path / "t.csv"
    (runs / RUN / "requests.parquet").write_bytes(b"garbage")
    result = CliRunner().invoke(cli, ["summarize", str(runs), "--out", str(out)])
    assert result.exit_code == 2 and "requests.parquet" in result.output
    assert not out.exists()
    for args in (["--out", str(tmp_path / "t.xlsx")], ["--format", "parquet"]):
        result = CliRunner().invoke(cli, ["summarize", str(runs / "fixture-s0-no_sync"), *args])
        assert result.exit_code == 2, result.output
    assert not (tmp_path / "t.xlsx").exists()
    result = CliRunner().invoke(cli, ["summarize", str(tmp_path / "none"), "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()


def test_cli_reports_excluded_incomplete(runs):
    set_meta(runs / RUN, complete=False)
    result = CliRunner().invoke(cli, ["summarize", str(runs), "--format", "csv"])
    assert result.exit_code == 0 and f"excluded: {RUN}" in result.output


def test_failed_requests_make_infinite_percentiles(runs, tmp_path):
    path = runs / RUN / "requests.parquet"
    df = pq.read_table(path).to_pandas()
    failed = (df.index % 10 == 0) | ~df.ok             # 10% more failed, no end_s
    df.loc[failed, ["ok", "end_s", "first_token_s", "error"]] = [False, np.nan, np.nan, "timeout"]
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    row = summarize_run(runs / RUN)
    assert row["n_failed"] == failed.sum() > 20
    assert row["p95_s"] == math.inf and row["p99_s"] == math.inf and math.isfinite(row["p50_s"])
    assert row["violation_rate"] >= failed.mean()      # every failed request violates
    assert row["span_end_s"] == row["horizon_s"]       # failed requests run until the timeout
    out = tmp_path / "t.json"
    assert CliRunner().invoke(cli, ["summarize", str(runs), "--out", str(out)]).exit_code == 0
    back = pd.read_json(out, orient="records").set_index("run_id")
    assert back.loc[RUN, "p95_s"] == math.inf               # not silently null
    assert math.isnan(back.loc[RUN, "tpot_violation_rate"])


def _set_meta(run_dir: Path, **changes) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


# ============================================================================== summary.py

def _quantile(values, q):
    """Linear interpolation between order statistics; towards an inf is inf."""
    x = sorted(values)
    h = (len(x) - 1) * q
    lo = int(math.floor(h))
    frac = h - lo
    if frac == 0:
        return x[lo]
    if math.isinf(x[lo + 1]) or math.isinf(x[lo]):
        return math.inf
    return x[lo] + frac * (x[lo + 1] - x[lo])


def _brute(req: pd.DataFrame, windows, slo: dict, horizon: float) -> dict:
    lat, ttft, lag = [], [], []
    viol = ttft_viol = tpot_viol = good = exposed = failed = 0
    for r in req.itertuples():
        done = r.ok and math.isfinite(r.end_s)
        failed += not done
        e2e = r.end_s - r.arrival_s if done else math.inf
        t1 = r.first_token_s - r.arrival_s if r.ok and math.isfinite(r.first_token_s) else math.inf
        if done and math.isfinite(r.first_token_s):
            t2 = (r.end_s - r.first_token_s) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        else:
            t2 = math.inf
        lat.append(e2e)
        ttft.append(t1)
        lag.append(r.sent_s - r.arrival_s)
        bad = not done or e2e > slo["e2e_s"]
        viol += e2e > slo["e2e_s"]
        if slo.get("ttft_s") is not None:
            ttft_viol += t1 > slo["ttft_s"]
            bad = bad or t1 > slo["ttft_s"]
        if slo.get("tpot_s") is not None:
            tpot_viol += t2 > slo["tpot_s"]
            bad = bad or t2 > slo["tpot_s"]
        good += not bad
        if done:
            lo, hi = r.arrival_s, r.end_s
        else:
            lo, hi = r.sent_s, (r.end_s if math.isfinite(r.end_s) else max(horizon, r.sent_s))
        exposed += any(s < hi and e > lo for s, e in windows)
    n = len(req)
    bad_n = n - good          # V: failed or any configured SLO missed (vLLM goodput)
    return {"n_requests": n, "n_failed": failed, "violation_rate": bad_n / n,
            "e2e_violation_rate": viol / n,
            "ttft_violation_rate": ttft_viol / n if slo.get("ttft_s") is not None else math.nan,
            "tpot_violation_rate": tpot_viol / n if slo.get("tpot_s") is not None else math.nan,
            "goodput_rate": good / n, "exposure_requests": exposed / n,
            "p50_s": _quantile(lat, 0.5), "p95_s": _quantile(lat, 0.95),
            "p99_s": _quantile(lat, 0.99), "ttft_p95_s": _quantile(ttft, 0.95),
            "send_lag_p99_s": _quantile(lag, 0.99),
            "prompt_tokens_total": int(req.prompt_tokens.sum()),
            "output_tokens_total": int(req.output_tokens[req.ok].sum()),
            "k_total": len(windows), "v_cp": _cp(bad_n, n)}


def _request_frame(rng, n=400, horizon=100.0):
    """Random requests with a few exact ties at the SLOs and one timeout without an end."""
    arrival = np.sort(rng.uniform(0.0, 80.0, n)).round(3)
    sent = arrival + rng.exponential(0.05, n).round(3)
    ttft = rng.gamma(2.0, 0.15, n).round(3)
    tokens = rng.integers(1, 40, n)
    end = sent + ttft + tokens * rng.uniform(0.01, 0.06, n).round(3)
    ok = np.ones(n, dtype=bool)
    end[:6] = arrival[:6] + 2.0            # latency exactly at the e2e SLO: not a violation
    ttft[6:10] = 0.5                        # TTFT exactly at its SLO
    first = np.minimum(sent + ttft, end)
    first[6:10] = arrival[6:10] + 0.5
    end[6:10] = np.maximum(end[6:10], first[6:10])
    ok[20], end[20] = False, np.nan         # timeout: in flight until the horizon
    ok[21] = False                          # error reply with an end
    tokens[22] = 1                          # one token: TPOT 0
    first[23] = np.nan                      # no first token recorded
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival, "sent_s": sent,
                         "first_token_s": first, "end_s": end,
                         "prompt_tokens": rng.integers(5, 50, n), "output_tokens": tokens,
                         "ok": ok, "error": [None if o else "x" for o in ok]})


def _arrays(req: pd.DataFrame) -> dict:
    return {c: req[c].to_numpy(dtype=bool if c == "ok" else float)
            for c in summary_mod.REQUEST_COLUMNS}


@pytest.mark.parametrize("slo", [{"e2e_s": 2.0, "ttft_s": 0.5, "tpot_s": 0.04},
                                 {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None}])
@pytest.mark.parametrize("n_windows", [3, 40])
def test_request_numbers_match_a_brute_force_loop(slo, n_windows):
    """Few windows (tested one by one) and many (searchsorted): same definitions."""
    rng = np.random.default_rng(n_windows)
    req = _request_frame(rng)
    req.loc[24, ["ok", "end_s", "sent_s"]] = [False, np.nan, 85.0]   # sent after every window
    starts = np.sort(rng.choice(np.arange(0.0, 84.0, 2.0), n_windows, replace=False))
    windows = [(s, s + 1.0) for s in starts]
    windows[-1] = (90.0, 91.0)              # reached only by the timeout lifetimes
    got = request_numbers(_arrays(req), {"start_s": np.array([w[0] for w in windows]),
                                         "end_s": np.array([w[1] for w in windows])},
                          None, slo, 2.0, 100.0)
    ref = _brute(req, windows, slo, 100.0)
    for key, value in ref.items():
        if key == "v_cp":
            assert (got["v_cp_low"], got["v_cp_high"]) == pytest.approx(value, rel=1e-9)
        elif isinstance(value, float) and math.isnan(value):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12), key
    assert ref["n_failed"] == 3 and 0 < ref["exposure_requests"] < 1
    assert math.isfinite(ref["p99_s"]) and ref["p99_s"] > ref["p95_s"] > ref["p50_s"]
    violated = ~metrics.slo_flags(req.arrival_s, req.first_token_s, req.end_s,
                                  req.output_tokens, req.ok, slo).good
    assert (got["v_ci_low"], got["v_ci_high"], got["v_ci_clusters"]) == \
        v_interval(req.arrival_s.to_numpy(), violated)[:3]
    assert got["k_total"] == n_windows and got["slo_e2e_s"] == 2.0
    assert (got["merge_duration_s"], got["horizon_s"]) == (2.0, 100.0)


def test_timeout_lifetime_runs_to_the_horizon_in_both_window_paths():
    """A request sent at 50 without an end is in flight over [50, 100]: a window at 60 hits it."""
    req = _requests([10.0, 50.0], [0.5, 0.5], ok=[True, False])
    req.loc[1, "end_s"] = np.nan
    for windows in ([(60.0, 61.0)], [(60.0 + 0.5 * i, 60.2 + 0.5 * i) for i in range(40)]):
        merges = {"start_s": np.array([w[0] for w in windows]),
                  "end_s": np.array([w[1] for w in windows])}
        got = request_numbers(_arrays(req), merges, None, {"e2e_s": 2.0}, 2.0, 100.0)
        assert got["exposure_requests"] == 0.5


def test_touching_a_window_is_not_exposure():
    """Arriving when a window ends, or ending when one starts: zero overlap."""
    req = _requests([20.0, 5.0, 30.0], [1.0, 5.0, 1.0])   # [20, 21], [5, 10], [30, 31]
    for windows in ([(10.0, 20.0)], [(10.0, 20.0)] + [(40.0 + i, 40.5 + i) for i in range(40)]):
        merges = {"start_s": np.array([w[0] for w in windows]),
                  "end_s": np.array([w[1] for w in windows])}
        got = request_numbers(_arrays(req), merges, None, {"e2e_s": 2.0}, 2.0, 100.0)
        assert got["exposure_requests"] == 0.0
    merges = {"start_s": np.array([30.5]), "end_s": np.array([40.0])}
    got = request_numbers(_arrays(req), merges, None, {"e2e_s": 2.0}, 2.0, 100.0)
    assert got["exposure_requests"] == pytest.approx(1 / 3)
    got = request_numbers(_arrays(req), {"start_s": np.zeros(0), "end_s": np.zeros(0)}, None,
                          {"e2e_s": 2.0}, 2.0, 100.0)
    assert got["exposure_requests"] == 0.0 and got["k_total"] == 0


def test_request_numbers_of_one_and_of_no_request():
    one = request_numbers(_arrays(_requests([3.0], [2.0])), {"start_s": [], "end_s": []}, None,
                          {"e2e_s": 2.0}, 2.0, 100.0)
    assert one["n_requests"] == 1 and one["violation_rate"] == 0.0 and one["p50_s"] == 2.0
    assert math.isnan(one["arrival_rate_scheduled"]) and one["goodput_rate"] == 1.0
    with pytest.raises(InputError, match="run has no requests") as err:
        request_numbers(_arrays(_requests([], [])), {"start_s": [], "end_s": []}, None,
                        {"e2e_s": 2.0}, 2.0, 100.0, run="r")
    assert err.value.column == "arrival_s" and err.value.file == "r"


def test_rate_is_gaps_over_their_length():
    rate = summary_mod._rate
    assert rate(np.array([3.0, 7.0])) == 0.25
    assert rate(np.array([4.0, 0.0, 2.0])) == 0.5
    assert rate(np.array([1.0, 1.5])) == 2.0
    assert math.isnan(rate(np.array([2.0]))) and math.isnan(rate(np.zeros(0)))
    assert math.isnan(rate(np.array([5.0, 5.0, 5.0])))


def test_sum_where_counts_nan_as_zero_and_skips_masked_rows():
    mask = np.array([True, False, True, True])
    assert summary_mod._sum_where(np.array([3, 100, 4, 5]), mask) == 12
    assert summary_mod._sum_where(np.array([3.0, 100.0, np.nan, 5.0]), mask) == 8
    assert summary_mod._sum_where(np.array([3.0, 100.0, 4.0, 5.0]), ~mask) == 100


def test_step_rate_of_the_summary():
    merges = {"start_s": np.array([2.0]), "end_s": np.array([4.0])}
    steps = {"start_s": np.array([1.0, 0.0, 5.0]), "end_s": np.array([1.5, 0.5, 10.0])}
    assert summary_mod._step_rate(steps, merges) == pytest.approx(3 / 8)
    one = {"start_s": np.array([0.0]), "end_s": np.array([6.0])}
    assert summary_mod._step_rate(one, merges) == pytest.approx(1 / 4)
    assert math.isnan(summary_mod._step_rate(None, merges))
    assert math.isnan(summary_mod._step_rate({"start_s": np.zeros(0), "end_s": np.zeros(0)},
                                             merges))


def test_summary_row_meta_fields_and_design_columns():
    req = _arrays(_requests([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]))
    merges = {"start_s": np.zeros(0), "end_s": np.zeros(0)}
    meta = _meta("r", complete=True, trace_realisation="real-1")
    row = summary_mod.summarize_arrays(meta, req, merges)
    assert list(row) == list(SUMMARY_COLUMNS)
    assert (row["trace_name"], row["trace_sha256"], row["trace_realisation"]) == ("t", "abc", "real-1")
    assert row["complete"] is True and row["oracle"] is False
    meta = _meta("r", complete=True)
    row = summary_mod.summarize_arrays(meta, req, merges, design=True)
    assert row["trace_realisation"] == "abc"
    assert list(row) == list(SUMMARY_COLUMNS) + list(DESIGN_COLUMNS)
    row = summary_mod.summarize_arrays({**meta, "trace": None}, req, merges)
    assert row["trace_name"] is None and row["trace_realisation"] is None


def test_from_arrow_keeps_integers_exact_and_nulls_as_nan():
    table = pa.table({"a": pa.array([1, 2], pa.int64()), "b": pa.array([1, None], pa.int64()),
                      "c": pa.array([None, None], pa.null()), "d": pa.array([1.5, 2.5], pa.float32()),
                      "ok": pa.array([True, False]), "e": pa.array([1, 2], pa.int32())})
    out = summary_mod._from_arrow(table, ["a", "b", "c", "d", "ok", "e"])
    assert out["a"].dtype == np.int64 and out["a"].tolist() == [1, 2]
    assert out["e"].dtype == np.int64
    assert out["b"].dtype == float and out["b"][0] == 1.0 and math.isnan(out["b"][1])
    assert out["c"].dtype == float and np.isnan(out["c"]).all() and out["c"].size == 2
    assert out["d"].dtype == float and out["d"].tolist() == [1.5, 2.5]
    assert out["ok"].dtype == bool and out["ok"].tolist() == [True, False]
    assert summary_mod._from_arrow(None, ["a"]) is None
    assert summary_mod._from_frame(None, ["a"]) is None


def test_summarize_run_of_a_loaded_run_and_of_a_path_agree(tmp_path):
    path = _write(tmp_path, "r", arrival=[1.0, 2.0, 3.0, 4.0], latency=[0.5, 3.0, 0.5, 0.5],
                  windows=[(2.5, 3.5)])
    by_path = summary_mod.summarize_run(path)
    by_run = summary_mod.summarize_run(io.read_run(path))
    assert pd.Series(by_path).equals(pd.Series(by_run)) and by_path["violation_rate"] == 0.25
    assert by_path["exposure_requests"] == 0.5 and by_path["k_total"] == 1


def test_summarize_runs_names_the_first_invalid_run_and_counts_the_rest(tmp_path):
    for name in ("a", "b", "c"):
        _write(tmp_path, name)
    _set_meta(_write(tmp_path, "d"), complete=False)
    _set_meta(tmp_path / "a", backend="nope")
    with pytest.raises(InputError, match=r"^.*run a: .*backend") as err:
        summarize_runs(tmp_path)
    assert "more" not in str(err.value)
    _set_meta(tmp_path / "c", backend="nope")
    with pytest.raises(InputError, match=r"run a: .*\(\+1 more; run `evalkit validate "):
        summarize_runs(tmp_path)
    _set_meta(tmp_path / "a", backend="sim")
    _set_meta(tmp_path / "c", backend="sim")
    df = summarize_runs(tmp_path)
    assert df.run_id.tolist() == ["a", "b", "c"] and df.attrs["excluded"] == ["d"]


def _fake_report(tmp_path, problems):
    return ValidationReport(runs_dir=tmp_path, run_dirs=[], problems=problems)


def _unreadable(run, path):
    return Problem(run, str(path), None, "cannot read: Permission denied", "chmod",
                   kind="unreadable")


def test_only_unreadable_runs_say_so(tmp_path, monkeypatch):
    report = _fake_report(tmp_path, [_unreadable("b", tmp_path / "b"),
                                     _unreadable("a", tmp_path / "a")])
    monkeypatch.setattr(summary_mod, "validate_runs", lambda *a, **k: report)
    with pytest.raises(InputError, match="no readable runs: cannot read") as err:
        summarize_runs(tmp_path)
    assert err.value.file == str(tmp_path / "b")
    report.problems.append(Problem("c", None, None, "incomplete", "rerun", kind="incomplete"))
    with pytest.raises(InputError, match=r"no complete runs to summarise \(1 incomplete"):
        summarize_runs(tmp_path)


def test_unreadable_runs_listed_once_each_by_run_id(tmp_path):
    report = _fake_report(tmp_path, [
        _unreadable("b", tmp_path / "b" / "run.json"), _unreadable("a", tmp_path / "a"),
        Problem("b", str(tmp_path / "b" / "merges.parquet"), None, "second", "x",
                kind="unreadable")])
    rows = summary_mod.unreadable_runs(report)
    assert [r["run_id"] for r in rows] == ["a", "b"]
    assert rows[1] == {"run_id": "b", "path": str(tmp_path / "b" / "run.json"),
                       "reason": f"unreadable: cannot read: Permission denied "
                                 f"({tmp_path / 'b' / 'run.json'})"}


# ============================================================================ summary edges

@pytest.fixture(scope="module")
def edge_store(tmp_path_factory):
    """Runs at the edges of the scan: one request, one merge, none, identical arrivals, a
    0.5 s arrival window, a horizon before the last end, many windows, TTFT/TPOT SLOs."""
    root = tmp_path_factory.mktemp("edges")
    rng = np.random.default_rng(5)
    slo = {"e2e_s": 2.0, "ttft_s": 0.5, "tpot_s": 0.04}
    req = _request_frame(rng)
    many = [(2.0 * i + 0.5, 2.0 * i + 1.2) for i in range(45)]
    steps = pd.DataFrame({"step": np.arange(30), "start_s": np.arange(30) * 3.0,
                          "end_s": np.arange(30) * 3.0 + 2.5})
    io.write_run(root, _meta("many", slo=slo), req, _merges(many), steps=steps)
    io.write_run(root, _meta("one-merge", slo=slo), _request_frame(rng, n=60),
                 _merges([(30.0, 32.0)]))
    io.write_run(root, _meta("no-merge", role="no_sync", policy="no_sync"),
                 _requests(np.arange(0.0, 20.0), np.full(20, 0.5)), _merges([]))
    io.write_run(root, _meta("single"), _requests([4.0], [3.0]), _merges([(1.0, 2.0)]))
    io.write_run(root, _meta("burst"), _requests(np.full(6, 7.0), [0.5, 3, 3, 0.5, 0.5, 1]),
                 _merges([(7.2, 7.4)]))
    io.write_run(root, _meta("narrow"), _requests([10.0, 10.25, 10.5], [0.5, 0.5, 2.5]),
                 _merges([]))
    late = _requests(np.arange(1.0, 40.0), np.full(39, 1.0))
    late.loc[38, "end_s"] = 45.0
    io.write_run(root, _meta("late", horizon_s=42.0, trace_realisation="tr-9"), late,
                 _merges([(10.0, 12.0), (41.0, 43.0)]))
    return root


def test_summarize_on_edge_runs(edge_store):
    ref = summarize_runs(edge_store, design=False)
    assert list(ref.columns) == list(SUMMARY_COLUMNS)
    assert ref.set_index("run_id").loc["late", "trace_realisation"] == "tr-9"
    by_id = ref.set_index("run_id")
    assert by_id.loc["one-merge", "k_total"] == 1 and by_id.loc["no-merge", "k_total"] == 0
    assert by_id.loc["no-merge", "k_observed"] == 0 and by_id.loc["no-merge", "exposure_time"] == 0
    assert math.isnan(by_id.loc["burst", "arrival_rate_scheduled"])
    assert by_id.loc["narrow", "arrival_rate_scheduled"] == 4.0
    assert by_id.loc["late", "span_end_s"] == 42.0 and by_id.loc["single", "n_requests"] == 1
    assert by_id.loc["many", "k_total"] == 45 and by_id.loc["many", "step_rate"] > 0
    assert math.isfinite(by_id.loc["many", "tpot_violation_rate"])
