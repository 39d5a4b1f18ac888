"""``ClaimResult``: the sign-flip line from the effective seeds and the oracle claim's bound
note.

The audit's cheap paths give the numbers of the plain ones: column reads = full-table
reads, Phi per run = overlap counted by brute force against the seed's no-sync requests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.evidence import RegimeEvidence
from evalkit.audit.runset import load_runset
from evalkit.errors import InputError


@pytest.mark.parametrize("effective_n, shown", [(1, False), (2, True), (5, True)])
def test_claim_result_sign_flip_from_two_effective_seeds(effective_n, shown):
    from evalkit.audit.claims import ClaimResult

    sf = object()
    fake = SimpleNamespace(ctx=SimpleNamespace(effective_n=effective_n, sign_flip=sf))
    assert (ClaimResult.sign_flip.fget(fake) is sf) is shown


def test_oracle_claim_carries_the_bound_note(tmp_path):
    from evalkit.audit import audit_campaign

    rows = [{"policy": p, "seed": s, "violation_rate": v, "oracle": p == "wa"}
            for s in range(6) for p, v in (("wa", 0.1), ("matched_random", 0.2),
                                           ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    claim = audit_campaign(path).claim("wa")
    assert claim.data.oracle is True
    assert any(n.startswith("oracle policy: a bound") for n in claim.notes), claim.notes


FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "campaigns" / "sim_bursty"


@pytest.fixture(scope="module")
def runset():
    return load_runset(FIXTURE)


def test_columns_equal_full_table(runset):
    for run_id in runset.runs.run_id[:12]:
        got = runset.columns(run_id, "requests", ("arrival_s", "end_s", "first_token_s"))
        full = runset.table(run_id, "requests")
        for col, values in got.items():
            expected = full[col].to_numpy(dtype=float, na_value=np.nan)
            assert values.dtype == np.float64
            assert np.array_equal(values, expected, equal_nan=True)
        merges = runset.columns(run_id, "merges", ("start_s",))["start_s"]
        assert np.array_equal(merges, runset.table(run_id, "merges").start_s.to_numpy(float))
    assert runset.columns(run_id, "merges", ("start_s",)) is \
        runset.columns(run_id, "merges", ("start_s",))          # cached


def test_columns_of_unknown_run_is_an_input_error(runset):
    with pytest.raises(InputError, match="no run directory"):
        runset.columns("no-such-run", "requests", ("arrival_s",))


def test_phi_equals_brute_force_overlap(runset):
    regime = runset.runs.regime.iloc[0]
    ev = RegimeEvidence(runset, regime)
    table = ev.phi_table
    assert len(table) > 10
    runs = runset.runs.set_index("run_id")
    no_sync = {int(r.seed): r for r in runset.runs[
        (runset.runs.role == "no_sync") & (runset.runs.regime == regime)].itertuples()}
    for rec in table.itertuples():
        ns = no_sync[rec.seed]
        req = runset.table(ns.run_id, "requests")
        start = req.arrival_s.to_numpy(float)
        end = req.end_s.to_numpy(float, na_value=np.nan)
        end = np.where(np.isfinite(end), end, float(ns.horizon_s))
        d = float(runs.loc[rec.run_id, "merge_duration_s"])
        starts = runset.table(rec.run_id, "merges").start_s.to_numpy(float)
        # C(u) = requests with start < u + D and end > u, summed over the run's windows
        brute = sum(int(np.count_nonzero((start < u + d) & (end > u))) for u in starts)
        assert rec.phi == brute
        assert rec.vex == pytest.approx(float(runs.loc[rec.run_id, "violation_rate"])
                                        - float(ns.violation_rate), abs=0)
