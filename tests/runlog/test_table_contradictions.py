"""A summary table's columns are checked against each other: a row that contradicts itself
is refused (exit 2 from the CLI) naming the row and the column, never audited on its word."""

from __future__ import annotations

import pytest

from evalkit.errors import InputError
from evalkit.runlog.table import read_summary_table

from tests.support.summary_csv import write_csv

HEAD = "policy,role,seed,draw,violation_rate,n_requests,K,k_observed,run_id,draws_per_row"
GOOD = ["ewma,policy,0,,0.1,100,4,4,a,1", "ewma,matched_random,0,0,0.2,100,4,,b,1"]


def _read(tmp_path, rows, head=HEAD):
    return read_summary_table(write_csv(tmp_path, "\n".join([head, *rows]) + "\n"))


def test_an_honest_table_reads(tmp_path):
    runs, _ = _read(tmp_path, GOOD)
    assert runs.run_id.tolist() == ["a", "b"] and runs.k_observed.tolist() == [4, 4]


@pytest.mark.parametrize("row, column, said", [
    ("ewma,policy,0,,0.1,100,4,2,a,1", "k_observed", "k_observed 2 contradicts K 4"),
    ("ewma,policy,0,,0.105,100,4,4,a,1", "violation_rate", "not a whole number of requests"),
    ("ewma,policy,0,3,0.1,100,4,4,a,1", "draw", "a policy row names draw 3"),
    ("ewma,matched_random,0,1,0.2,100,4,,b,1", "run_id", "run_id 'b' is also row 3"),
])
def test_a_row_that_contradicts_itself_is_refused(tmp_path, row, column, said):
    with pytest.raises(InputError) as err:
        _read(tmp_path, [*GOOD, row])
    assert err.value.column == column and said in err.value.message
    assert "row 4" in err.value.message and err.value.file == "t.csv"


@pytest.mark.parametrize("cells, column, said", [
    ("1.5,0", "exposure_requests", "outside [0, 1]"),
    ("0.5,2.5", "corridor_violations", "not an integer"),
])
def test_counts_and_shares_of_the_rows_requests(tmp_path, cells, column, said):
    rows = [r + ",0.5,0" for r in GOOD] + ["ewma,policy,1,,0.1,100,4,4,c,1," + cells]
    with pytest.raises(InputError) as err:
        _read(tmp_path, rows, HEAD + ",exposure_requests,corridor_violations")
    assert err.value.column == column and said in err.value.message


@pytest.mark.parametrize("v, refused", [("0.1000005", False), ("0.1000015", True)])
def test_a_rate_may_miss_a_whole_count_by_rounding_only(tmp_path, v, refused):
    # 100,000 requests: V x n may miss a whole number by 1e-6 x n = 0.1 (the rate's rounding);
    # 10,000.05 violations read as 10,000, 10,000.15 are refused
    row = f"ewma,policy,1,,{v},100000,4,4,c,1"
    if not refused:
        assert len(_read(tmp_path, [*GOOD, row])[0]) == 3
        return
    with pytest.raises(InputError, match="not a whole number of requests"):
        _read(tmp_path, [*GOOD, row])
