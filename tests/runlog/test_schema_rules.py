"""The run.json rules kept in runlog/schema.py (Slo, identity, run ids) and the one Parquet
column reader (runlog/io.read_columns), each at its edges."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from evalkit.errors import InputError
from evalkit.interop._meta import check_identity, default_run_id
from evalkit.runlog.io import read_columns, read_table
from evalkit.runlog.schema import Slo, identity_problems, role_problem, run_id


@pytest.mark.parametrize("e2e, ok", [(0.0, False), (-1.0, False), (5e-324, True), (1.0, True),
                                     (math.inf, False), (math.nan, False), (True, False),
                                     ("1", False), (None, False)])
def test_slo_e2e_must_be_a_positive_finite_number(e2e, ok):
    found = Slo.check({"e2e_s": e2e, "ttft_s": None, "tpot_s": None})
    assert (found == []) is ok
    if not ok:
        (problem,) = found
        assert problem.key == "slo.e2e_s"
        assert problem.message.startswith("must be a positive number of seconds, got ")


@pytest.mark.parametrize("sub", ["ttft_s", "tpot_s"])
@pytest.mark.parametrize("value, ok", [(None, True), (0.0, False), (5e-324, True), (-0.1, False)])
def test_slo_ttft_tpot_are_null_or_positive(sub, value, ok):
    found = Slo.check({"e2e_s": 2.0, sub: value})
    assert (found == []) is ok
    if not ok:
        assert [p.key for p in found] == [f"slo.{sub}"]
        assert "null or a positive number" in found[0].message


def test_slo_must_be_an_object_and_reads_back():
    (problem,) = Slo.check([1.0])
    assert problem.key == "slo" and "must be an object" in problem.message
    slo = Slo.from_dict({"e2e_s": 2, "ttft_s": 0.5})
    assert slo == Slo(2.0, 0.5, None) and slo.to_dict() == {"e2e_s": 2.0, "ttft_s": 0.5,
                                                            "tpot_s": None}
    with pytest.raises(InputError, match="positive number") as err:
        Slo.from_dict({"e2e_s": 0})
    assert err.value.column == "slo.e2e_s"


@pytest.mark.parametrize("meta, keys", [
    ({"role": "matched_random", "draw": 0, "matched_to": "wa", "policy": "matched_random"}, []),
    ({"role": "matched_random", "draw": None, "matched_to": "wa"}, ["draw"]),
    ({"role": "matched_random", "draw": 0, "matched_to": None}, ["matched_to"]),
    ({"role": "policy", "draw": 0, "matched_to": "wa", "policy": "wa"}, ["draw", "matched_to"]),
    ({"role": "no_sync", "policy": "wa"}, ["policy"]),
    ({"role": "no_sync", "policy": "no_sync", "oracle": True}, ["oracle"]),
    ({"role": "policy", "policy": "no_sync"}, ["role"]),
    ({"role": "policy", "policy": "wa", "oracle": True}, []),
    ({"role": "no_sync"}, []),          # a missing policy is the required-key rule's
])
def test_identity_rules(meta, keys):
    assert [p.key for p in identity_problems(meta)] == keys


def test_importers_raise_the_first_identity_problem_with_the_formats_wording():
    assert role_problem("policy") is None and role_problem("baseline").key == "role"
    with pytest.raises(InputError, match="unknown role 'baseline'"):
        check_identity("baseline", None, None, where="x.json")
    with pytest.raises(InputError, match="needs its draw index") as err:
        check_identity("matched_random", None, "wa", where="x.json")
    assert err.value.column == "draw" and err.value.file == "x.json"
    with pytest.raises(InputError, match="must name the policy") as err:
        check_identity("matched_random", 0, "", where="x.json")   # empty names nothing
    assert err.value.column == "matched_to"
    with pytest.raises(InputError, match="only matched_random runs have draw"):
        check_identity("policy", 3, None, where="x.json")
    check_identity("policy", None, "wa", where="x.json")    # dropped by import_meta, as before
    check_identity("matched_random", 2, "wa", where="x.json")


def test_run_ids_of_both_conventions():
    assert run_id("bursty", "wa", 3) == "bursty__wa__s3"
    assert run_id("bursty", "mr-wa", 3, 1) == "bursty__mr-wa__s3__d1"
    assert default_run_id("r", "wa", "policy", 0, None) == "r-wa-s0"
    assert default_run_id("r", "matched_random", "matched_random", 2, 5, "wa") == \
        "r-matched_random-wa-s2-d5"
    assert default_run_id("r", "wa", "matched_random", 2, 5, "wa") == "r-wa-matched_random-s2-d5"
    assert default_run_id("a b", "x/y", "no_sync", 1, None) == "a_b-x_y-no_sync-s1"
    assert default_run_id(".x", "wa", "policy", 0, None) == "x-wa-s0"   # never a hidden name
    long = run_id("r", "P" * 5000, 0)
    assert len(long.encode()) <= 200 and long != run_id("r", "P" * 4999 + "Q", 0)


@pytest.fixture
def run_dir(tmp_path):
    df = pd.DataFrame({"a": np.arange(4, dtype=np.int64), "b": [0.5, None, 1.5, 2.0],
                       "c": ["x", None, "y", "z"]})
    df.to_parquet(tmp_path / "requests.parquet")
    return tmp_path


def test_read_columns_reads_what_is_asked_in_that_order(run_dir):
    table = read_columns(run_dir, "requests", ["b", "a"])
    assert table.column_names == ["b", "a"] and table.column("b").null_count == 1
    assert read_columns(run_dir, "requests").column_names[:3] == ["a", "b", "c"]
    pd.testing.assert_frame_equal(read_table(run_dir, "requests"),
                                  pq.read_table(run_dir / "requests.parquet").to_pandas())


def test_read_columns_errors_name_the_file_and_column(run_dir):
    with pytest.raises(InputError, match="column is missing from requests.parquet") as err:
        read_columns(run_dir, "requests", ["a", "nope"])
    assert err.value.column == "nope" and err.value.file.endswith("requests.parquet")
    with pytest.raises(InputError, match="merges.parquet is missing"):
        read_columns(run_dir, "merges", ["start_s"])
    (run_dir / "requests.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="cannot read Parquet: corrupt or truncated") as err:
        read_columns(run_dir, "requests")
    assert err.value.file.endswith("requests.parquet") and "damaged" in err.value.fix
