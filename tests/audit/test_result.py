"""The audit result: value normalisation and canonical JSON, claim lookup, the scrubbed runs
directory, ``to_dict`` of a summary table, baselines and the default seed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import AuditResult, _normalise, audit_campaign, canonical_json
from evalkit.compose import run_audit
from evalkit.errors import InputError

from tests.support.summary_csv import write_csv


# ============================================================================ audit result

def test_normalise_values():
    assert _normalise(1 / 3) == 0.3333333333 and _normalise(2 / 3) == 0.6666666667
    assert _normalise(123456.7890123) == 123456.789
    zero = _normalise(-0.0)
    assert zero == 0.0 and math.copysign(1.0, zero) == 1.0
    assert _normalise(1.0) == 1.0 and _normalise(np.float32(0.5)) == 0.5
    for bad in (float("nan"), float("inf"), -np.inf, None, pd.NA, pd.NaT):
        assert _normalise(bad) is None
    assert _normalise(True) is True and _normalise(np.bool_(False)) is False
    assert _normalise(np.int64(7)) == 7 and type(_normalise(np.int64(7))) is int
    assert type(_normalise(7)) is int
    assert _normalise("text") == "text" and _normalise(Path("a/b")) == "a/b"
    assert _normalise({1: (np.array([1.5, np.nan]), [np.int32(2)])}) == {"1": [[1.5, None], [2]]}


def test_canonical_json_layout():
    assert canonical_json({"b": [1, True], "a": 0.5}) == (
        '{\n  "a": 0.5,\n  "b": [\n    1,\n    true\n  ]\n}\n')


def _stub_result(tmp_path=None):
    claims = [SimpleNamespace(policy="wa", regime="r1"), SimpleNamespace(policy="wa", regime="r2"),
              SimpleNamespace(policy="ewma", regime="r1")]
    runset = SimpleNamespace(runs_dir=tmp_path, input_name="runs")
    return AuditResult(protocol=None, seed=0, runset=runset, claims=claims)


def test_audit_result_claim_lookup():
    result = _stub_result()
    assert result.claim("ewma") is result.claims[2]
    assert result.claim("wa", "r2") is result.claims[1]
    assert result.claim("wa", regime="r1") is result.claims[0]
    with pytest.raises(InputError, match=r"policy 'wa' has claims in several regimes \(r1, r2\)") \
            as info:
        result.claim("wa")
    assert info.value.column == "regime"
    with pytest.raises(InputError, match="no claim for policy 'nope'") as info:
        result.claim("nope")
    assert info.value.column == "policy" and "r1/wa, r2/wa, r1/ewma" in info.value.fix
    with pytest.raises(InputError, match="no claim for policy 'ewma' in regime 'r2'"):
        result.claim("ewma", "r2")


def test_audit_result_scrubs_the_runs_directory(tmp_path):
    root = tmp_path / "campaign"
    result = _stub_result(root)
    assert result._scrub(f"see {root}/a and {root.resolve()}/b") == "see runs/a and runs/b"
    assert _stub_result(None)._scrub(f"see {root}/a") == f"see {root}/a"


def test_audit_result_to_dict_of_a_summary_table(fixtures_dir):
    result = audit_campaign(fixtures_dir / "campaigns" / "summary_table.csv")
    assert result.seed == 0 and result.alpha == 0.05
    out = result.to_dict()
    (claim,) = out["claims"]
    assert (claim["regime"], claim["policy"]) == ("paper", "wa")
    # a summary table has no logs: no psi and no exposure figure, and the names are the
    # report's files
    assert claim["figures"] == {"null": "figures/paper__wa__null.png",
                                "v_per_seed": "figures/paper__wa__v_per_seed.png"}
    assert result.files["figures"] == sorted(claim["figures"].values())
    assert out["schema"] == "evalkit-audit/1" and out["provenance"]["campaign_source"] == \
        "summary table"
    assert out["transfer"] == {"sync": "not evaluable: a summary table has no request logs"}
    regime = out["regimes"]["paper"]
    assert list(out["regimes"]) == ["paper"]
    assert regime["psi"] is None and regime["exposure_regression"] is None
    assert regime["psi_reason"].startswith("not evaluable")
    assert regime["exposure_reason"].startswith("not evaluable")
    assert out["seed"] == 0 and out["input"]["kind"] == "summary"
    assert out["input"]["n_runs"] == len(result.runset.runs)
    assert json.loads(result.to_json()) == out
    assert audit_campaign(fixtures_dir / "campaigns" / "summary_table.csv", alpha=0.01,
                          seed=3).to_dict()["alpha"] == 0.01


def test_audit_baselines_come_from_the_protocol(tmp_path):
    path = write_csv(tmp_path, "policy,seed,violation_rate,matched_to\n"
                     "wa,0,0.1,\nmatched_random,0,0.2,wa\nfixed_h,0,0.3,\n"
                     "pressure_gate,0,0.3,\nother,0,0.3,\n")
    result = audit_campaign(path)
    assert sorted(c.policy for c in result.claims) == ["other", "wa"]


def test_run_audit_default_seed(monkeypatch, tmp_path, fixtures_dir):
    import evalkit.compose as compose

    seen = {}
    monkeypatch.setattr(compose, "publish", lambda out, files: seen.setdefault(
        "seed", json.loads(files["audit.json"])["seed"]))
    result = run_audit(fixtures_dir / "campaigns" / "summary_table.csv", tmp_path / "out")
    assert result.seed == 0 and seen == {"seed": 0} and result.out_dir == tmp_path / "out"
    assert result.document["seed"] == 0
