"""Every rule of run.json's validation, pinned by the exact set of keys it flags.

Each case changes one thing in a valid run.json and names every key that must be reported:
a check that stops firing, fires on a valid neighbour, or blames another key fails here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from evalkit.runlog.schema import REQUIRED_META
from evalkit.runlog.validate.meta import _check_meta

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "runs"
POLICY = "fixture-s0-fixed_h"
DRAW = "fixture-s0-matched_random-d0"


def _meta(run: str) -> dict:
    return json.loads((FIXTURES / run / "run.json").read_text())


def flagged(meta: dict, run: str) -> set[str]:
    return {p.column for p in _check_meta(meta, FIXTURES / run, run) if p.severity == "error"}


def _edit(base: dict, path: str, value) -> dict:
    meta = copy.deepcopy(base)
    *head, last = path.split(".")
    target = meta
    for key in head:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return meta


_DELETE = object()


def test_the_fixture_runs_are_valid():
    assert flagged(_meta(POLICY), POLICY) == set()
    assert flagged(_meta(DRAW), DRAW) == set()


@pytest.mark.parametrize("key", REQUIRED_META)
def test_each_required_key_missing_is_named(key):
    meta = _edit(_meta(POLICY), key, _DELETE)
    assert key in flagged(meta, POLICY)


POLICY_CASES = [
    ("run_id", "", {"run_id"}), ("run_id", 5, {"run_id"}), ("run_id", "other", {"run_id"}),
    ("policy", "", {"policy"}), ("regime", "  ", {"regime"}), ("regime", 3, {"regime"}),
    ("role", "judge", {"role"}), ("backend", "gpu", {"backend"}),
    ("seed", 2 ** 63, {"seed"}), ("seed", 2 ** 63 - 1, set()), ("seed", 0, set()),
    ("seed", -1, {"seed"}), ("seed", -(2 ** 63), {"seed"}), ("seed", -(2 ** 63) - 1, {"seed"}),
    ("seed", 1.0, {"seed"}), ("seed", False, {"seed"}),
    ("draw", 0, {"draw"}), ("matched_to", "ewma", {"matched_to"}),
    ("oracle", "yes", {"oracle"}), ("oracle", True, set()), ("complete", 1, {"complete"}),
    ("complete", False, set()),
    ("merge_duration_s", -1.0, {"merge_duration_s"}), ("merge_duration_s", 1e-9, set()),
    ("merge_duration_s", True, {"merge_duration_s"}), ("horizon_s", "300", {"horizon_s"}),
    ("horizon_s", 1, set()),
    ("evalkit_version", "", {"evalkit_version"}), ("created_at", None, {"created_at"}),
    ("settings", [], {"settings"}), ("host", "h", {"host"}), ("rng_seeds", None, {"rng_seeds"}),
    ("settings", {}, set()),
    ("trace_realisation", "", {"trace_realisation"}), ("trace_realisation", 7,
                                                       {"trace_realisation"}),
    ("trace_realisation", _DELETE, set()),
    ("trace", "t", {"trace"}), ("trace.sha256", _DELETE, {"trace.sha256"}),
    ("trace.name", "", {"trace.name"}),
    ("slo", [5.0], {"slo"}), ("slo.e2e_s", 0, {"slo.e2e_s"}), ("slo.e2e_s", 0.001, set()),
    ("slo.e2e_s", _DELETE, {"slo.e2e_s"}),
    ("slo.ttft_s", None, set()), ("slo.ttft_s", -1.0, {"slo.ttft_s"}),
    ("slo.tpot_s", "0.1", {"slo.tpot_s"}), ("slo.tpot_s", 0.05, set()),
    ("corridor", [20, 200], {"corridor"}), ("corridor.min_gap_s", -1.0, {"corridor.min_gap_s"}),
    ("corridor.min_gap_s", 0.0, set()), ("corridor.min_gap_s", 200.0, set()),
    ("corridor.min_gap_s", 200.5, {"corridor"}), ("corridor.max_gap_s", None,
                                                  {"corridor.max_gap_s"}),
    ("corridor.max_gap_s", "200", {"corridor.max_gap_s"}),
]


@pytest.mark.parametrize("path, value, expected", POLICY_CASES)
def test_policy_run_json_rule(path, value, expected):
    assert flagged(_edit(_meta(POLICY), path, value), POLICY) == expected


DRAW_CASES = [
    ("draw", None, {"draw"}), ("draw", -1, {"draw"}), ("draw", True, {"draw"}),
    ("draw", 2 ** 63, {"draw"}), ("draw", 2 ** 63 - 1, set()), ("draw", 0, set()),
    ("matched_to", None, {"matched_to"}), ("matched_to", "", {"matched_to"}),
    ("matched_to", 3, {"matched_to"}), ("policy", "no_sync", {"role"}),
]


@pytest.mark.parametrize("path, value, expected", DRAW_CASES)
def test_matched_random_run_json_rule(path, value, expected):
    assert flagged(_edit(_meta(DRAW), path, value), DRAW) == expected


def test_no_sync_role_rules():
    meta = _edit(_meta(POLICY), "role", "no_sync")
    assert flagged(meta, POLICY) == {"policy"}                 # its policy must be no_sync
    meta["policy"] = "no_sync"
    assert flagged(meta, POLICY) == set()
    meta["oracle"] = True
    assert flagged(meta, POLICY) == {"oracle"}
    assert flagged(_edit(_meta(POLICY), "policy", "no_sync"), POLICY) == {"role"}
    oracle_policy = _edit(_meta(POLICY), "oracle", True)
    assert flagged(oracle_policy, POLICY) == set()


def test_messages_quote_the_value_and_name_the_fix():
    meta = _edit(_meta(POLICY), "seed", "three")
    (p,) = _check_meta(meta, FIXTURES / POLICY, POLICY)
    assert p.message == "must be an integer, got 'three'" and p.file.endswith("run.json")
    assert p.fix == "write the replication seed as an integer" and p.run == POLICY
    meta = _edit(_meta(POLICY), "run_id", "other")
    (p,) = _check_meta(meta, FIXTURES / POLICY, POLICY)
    assert p.message == f"run_id 'other' differs from the directory name '{POLICY}'"
