"""evalkit import table: per-run summary rows become runs whose summary gives the rows back."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.interop.summary_table import synthesise_requests
from evalkit.runlog.table import SYNTH_NOTE
from evalkit.runlog.io import iter_run_dirs, read_meta
from evalkit.runlog.summary import summarize_runs

TABLE = """policy,seed,violation_rate,n_requests,K,draw,role,no_sync_violation_rate,regime,draws_per_row
wa,0,0.25,400,5,,policy,0.1,bursty,1
wa,1,0.3,400,5,,policy,0.125,bursty,1
wa,0,0.4,400,5,0,matched_random,,bursty,1
wa,0,0.3575,400,5,1,matched_random,,bursty,1
wa,1,0.35,400,5,0,matched_random,,bursty,1
"""


def _import(tmp_path, text, name="table.csv"):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "runs"
    return CliRunner().invoke(cli, ["import", "table", str(path), "--out", str(out)]), out


def test_round_trip_violation_rates(tmp_path):
    r, out = _import(tmp_path, TABLE)
    assert r.exit_code == 0, r.output
    df = summarize_runs(out).set_index("run_id")
    assert len(df) == 7                        # 5 rows + 2 implied no-sync baselines
    table = pd.read_csv(tmp_path / "table.csv")
    for rec in table.itertuples():
        role = "matched_random" if rec.role == "matched_random" else "policy"
        match = df[(df.seed == rec.seed) & (df.role == role)
                   & ((df.draw == rec.draw) if role == "matched_random" else True)]
        assert len(match) == 1
        row = match.iloc[0]
        assert row.violation_rate == pytest.approx(rec.violation_rate, abs=1e-15)
        assert row.n_requests == rec.n_requests and row.k_observed == rec.K
        assert row.backend == "import"
    ns = df[df.role == "no_sync"].sort_values("seed")
    assert ns.violation_rate.tolist() == pytest.approx([0.1, 0.125], abs=1e-15)
    assert (ns.k_total == 0).all()
    # runs of one seed share a realisation, so pairing is real
    assert df[df.seed == 0].trace_realisation.nunique() == 1
    for d in iter_run_dirs(out):
        assert SYNTH_NOTE in read_meta(d)["notes"]


@pytest.mark.parametrize("n, k", [(7, 0), (1000, 3), (33, 12)])
def test_synthesis_counts_exactly(n, k):
    for v in range(n + 1):
        req, mer, horizon = synthesise_requests(n, v, k)
        lat = req.end_s - req.arrival_s
        assert int((lat > 1.0).sum()) == v and len(req) == n and len(mer) == k
    assert v == n
    assert (mer.start_s >= req.arrival_s.min()).all() and (mer.end_s <= req.end_s.max()).all()
    assert (np.diff(mer.start_s) > 1.0).all() and req.end_s.max() <= horizon


@pytest.mark.parametrize("text, column", [
    ("policy,seed,violation_rate,n_requests,K\nwa,0,0.333,10,2\n", "violation_rate"),
    ("policy,seed,violation_rate,K\nwa,0,0.5,2\n", "n_requests"),
    ("policy,violation_rate,n_requests,K\nwa,0.5,10,2\n", "seed"),
    ("policy,seed,violation_rate,n_requests,K\nwa,zero,0.5,10,2\n", "seed"),
    ("policy,seed,violation_rate,n_requests,K\nwa,0,1.5,10,2\n", "violation_rate"),
    ("policy,seed,violation_rate,n_requests\nwa,0,0.5,10\n", "K"),
    ("policy,seed,violation_rate,n_requests,K,role\nno_sync,0,0.5,10,3,no_sync\n", "K"),
])
def test_bad_tables_exit_2_nothing_written(tmp_path, text, column):
    r, out = _import(tmp_path, text)
    assert r.exit_code == 2, r.output
    assert "table.csv" in r.output and f"'{column}'" in r.output
    assert not out.exists() or not any(out.iterdir())
