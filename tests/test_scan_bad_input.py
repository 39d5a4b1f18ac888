"""scan_runs on bad stores: clear InputErrors naming runs/files; the bucketed exposure lookup."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from evalkit.errors import InputError
from evalkit.runlog import metrics, write_run
from evalkit.runlog import scan as scan_mod
from evalkit.runlog.scan import scan_runs


def _meta(run_id, seed=0):
    return {
        "run_id": run_id, "policy": "wa", "role": "policy", "seed": seed, "draw": None,
        "matched_to": None, "regime": "r", "trace": {"name": "t", "sha256": "x"},
        "backend": "sim", "slo": {"e2e_s": 1.0, "ttft_s": None, "tpot_s": None},
        "merge_duration_s": 2.0, "horizon_s": 100.0,
        "corridor": {"min_gap_s": 1.0, "max_gap_s": 50.0}, "oracle": False,
        "settings": {"requested": {}, "effective": {}}, "rng_seeds": {},
    }


def _write(root, run_id, rng, n=200, merges=((10.0, 12.0), (40.0, 42.0))):
    arrival = np.sort(rng.uniform(1, 80, n))
    end = arrival + rng.gamma(2.0, 0.4, n)
    req = pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival, "sent_s": arrival,
                        "first_token_s": arrival + 0.1, "end_s": end, "prompt_tokens": 5,
                        "output_tokens": 5, "ok": True, "error": None})
    m = np.asarray(merges, float).reshape(-1, 2)
    mer = pd.DataFrame({"merge_idx": np.arange(len(m)), "start_s": m[:, 0], "end_s": m[:, 1]})
    return write_run(root, _meta(run_id), req, mer)


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(3):
        _write(tmp_path, f"run{i}", rng)
    return tmp_path


def _set_meta(run_dir, **changes):
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def test_mixed_schema_versions_name_the_runs(store):
    _set_meta(store / "run2", schema_version=2)
    with pytest.raises(InputError) as err:
        scan_runs(store)
    text = str(err.value)
    assert "mix schema versions" in text and "run2" in text and "run0" in text
    assert "migrate" in text and err.value.column == "schema_version"


def test_unknown_schema_version(store):
    for i in range(3):
        _set_meta(store / f"run{i}", schema_version=7)
    with pytest.raises(InputError, match="unknown schema_version 7"):
        scan_runs(store)


def test_truncated_parquet_names_the_file(store):
    path = store / "run1" / "requests.parquet"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(InputError) as err:
        scan_runs(store)
    assert err.value.file == str(path) and "corrupt" in err.value.fix


def test_missing_merges_file_names_it(store):
    (store / "run0" / "merges.parquet").unlink()
    with pytest.raises(InputError) as err:
        scan_runs(store)
    assert err.value.file.endswith("run0/merges.parquet")


def test_missing_column_named(store):
    path = store / "run1" / "requests.parquet"
    table = pq.read_table(path).drop_columns(["sent_s"])
    pq.write_table(table, path)
    with pytest.raises(InputError) as err:
        scan_runs(store)
    assert err.value.column == "sent_s" and err.value.file == str(path)


def test_empty_and_missing_dirs(tmp_path):
    with pytest.raises(InputError, match="no runs"):
        scan_runs(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        scan_runs(tmp_path / "nope")


def test_only_incomplete_runs(tmp_path):
    rng = np.random.default_rng(2)
    path = _write(tmp_path, "a", rng)
    _set_meta(path, complete=False)
    with pytest.raises(InputError, match="incomplete"):
        scan_runs(tmp_path)


@pytest.mark.parametrize("max_buckets", [3, 4096])
def test_bucketed_exposure_equals_searchsorted(tmp_path, monkeypatch, max_buckets):
    """Many short, touching and nested windows; a tiny bucket cap forces several window ends
    per bucket (wider CASE).  Exposure must equal metrics.request_exposure exactly."""
    monkeypatch.setattr(scan_mod, "MAX_BUCKETS", max_buckets)
    rng = np.random.default_rng(3)
    expected = {}
    for i in range(4):
        starts = np.sort(rng.uniform(0, 90, 25))
        ends = starts + rng.choice([0.05, 0.5, 3.0], 25)
        order = np.argsort(starts)
        # overlapping windows are invalid in a run; make them disjoint or touching
        s, e = starts[order], ends[order]
        for j in range(1, s.size):
            s[j] = max(s[j], e[j - 1]) if rng.random() < 0.5 else max(s[j], e[j - 1] + 0.01)
            e[j] = max(e[j], s[j] + 0.01)
        path = _write(tmp_path, f"x{i}", rng, n=500, merges=np.c_[s, e])
        req = pq.read_table(path / "requests.parquet").to_pandas()
        expected[f"x{i}"] = metrics.request_exposure(req.arrival_s, req.sent_s, req.end_s,
                                                     req.ok, s, e, 100.0)
    got = scan_runs(tmp_path).set_index("run_id")["exposure_requests"]
    for run_id, value in expected.items():
        assert got[run_id] == value
    assert 0 < min(expected.values()) < 1
