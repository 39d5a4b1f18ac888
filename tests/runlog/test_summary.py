"""Per-run summary on the fixtures, against brute-force recomputation, and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.runlog.design import DESIGN_COLUMNS
from evalkit.runlog.summary import SUMMARY_COLUMNS, summarize_run, summarize_runs

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
