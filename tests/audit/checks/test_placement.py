"""Decisions of the placement checks (``no_sync_present``, ``load_match``) on a stub
context."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from evalkit.audit.checks import placement as C

from tests.support.decision_stubs import ctx, pair, spec


# ------------------------------------------------------------------------ placement gain

def test_no_sync_present():
    assert C.no_sync_present(ctx(), spec()).passed is True
    out = C.no_sync_present(ctx([pair(0), pair(1, no_sync=False)]), spec())
    assert out.passed is False and "no_sync for seed 1" in out.found and "seed 0" not in out.found


def _lm_table(passed=(True, True), status=("passed", "passed")):
    return pd.DataFrame({"seed": [0, 0], "run_id": ["s0-pol", "s0-d0"],
                         "check": ["n_requests", "step_rate"], "expected": [10.0, 1.0],
                         "found": [10.0, 1.0], "passed": list(passed), "status": list(status),
                         "reason": ["", "missing"]})


def test_load_match_check():
    sp = spec(tolerances={"step_rate": 0.05})
    assert C.load_match(ctx(load_match_table=lambda s: _lm_table()), sp).passed is True
    out = C.load_match(ctx(load_match_table=lambda s: _lm_table((True, False),
                                                                ("passed", "failed"))), sp)
    assert out.passed is False and "step_rate" in out.found
    out = C.load_match(ctx(load_match_table=lambda s: _lm_table(
        (True, False), ("passed", "not evaluable"))), sp)
    assert out.evaluable is False and "missing" in out.found
    out = C.load_match(ctx(load_match_table=lambda s: "not evaluable: no seed"), sp)
    assert out.evaluable is False


def test_load_match_of_a_summary_table_without_load_columns_is_not_evaluable(tmp_path):
    from evalkit.audit.runset import load_runset
    from evalkit.audit.context import ClaimContext
    from evalkit.stats.loadmatch import DEFAULT_TOLERANCES

    rows = [{"policy": p, "seed": s, "violation_rate": v} for s in range(3)
            for p, v in (("wa", 0.1), ("matched_random", 0.2), ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    fake = SimpleNamespace(runset=load_runset(path))
    out = ClaimContext._compute_load_match(fake, dict(DEFAULT_TOLERANCES))
    assert isinstance(out, str) and out.startswith("not evaluable")
    assert "evalkit summarize" in out
