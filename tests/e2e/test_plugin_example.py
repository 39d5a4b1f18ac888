"""The worked external plugin (examples/plugin_policy) in a sweep, by entry point and by
module:Class, audited like the built-in policies.  Needs the package installed
(`pip install -e examples/plugin_policy`, as .ci/run does)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("evalkit_forecast_policy") is None,
    reason="the example plugin is not installed: pip install -e examples/plugin_policy")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin_policy"

CAMPAIGN = """
regime = "holt"
seeds = 3
matched_random_draws = 1
horizon_s = 200.0
inner_step_s = 0.5
h_min = 20
h_max = 120
[slo]
e2e_s = 3.0
[trace]
generator = "square_wave"
period_s = 50.0
burst_s = 15.0
quiet_rate = 2.0
busy_rate = 22.0
prompt_tokens = "lognormal:256,0.5"
output_tokens = "lognormal:64,0.5"
[[policies]]
name = "fixed_h"
params = { H = 60 }
[[policies]]
name = "ewma"
[[policies]]
name = "holt_defer"
params = { alpha = 0.5, beta = 0.1 }
[[policies]]
name = "evalkit_forecast_policy.holt:HoltDeferral"
label = "holt_by_path"
params = { alpha = 0.5, beta = 0.1 }
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("holt")
    path = tmp / "holt.toml"
    path.write_text(CAMPAIGN)
    runs = tmp / "runs"
    res = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(runs)])
    assert res.exit_code == 0, res.output
    return runs


def test_the_plugin_is_listed_from_its_entry_point():
    res = CliRunner().invoke(cli, ["policies", "list"])
    assert res.exit_code == 0, res.output
    assert "holt_defer  [entry point (evalkit-forecast-policy 0.1.0); causal]" in res.output
    assert "alpha=0.5, beta=0.1, warmup=5, ahead_s=None" in res.output


def test_runs_by_entry_point_and_by_module_class_are_the_same_and_record_the_code(swept):
    source = EXAMPLE / "src" / "evalkit_forecast_policy" / "holt.py"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    for seed in range(3):
        a, b = swept / f"holt__holt_defer__s{seed}", swept / f"holt__holt_by_path__s{seed}"
        for d in (a, b):
            meta = json.loads((d / "run.json").read_text())
            assert meta["complete"] and meta["oracle"] is False
            assert meta["policy_identity"] == {
                "name": "holt_defer", "class": "evalkit_forecast_policy.holt:HoltDeferral",
                "builtin": False, "distribution": "evalkit-forecast-policy",
                "version": "0.1.0", "source_sha256": digest}
            assert meta["policy_params"] == {"alpha": 0.5, "beta": 0.1, "warmup": 5,
                                             "ahead_s": None}
        for table in ("requests", "merges", "decisions"):
            pd.testing.assert_frame_equal(pd.read_parquet(a / f"{table}.parquet"),
                                          pd.read_parquet(b / f"{table}.parquet"))
        dec = pd.read_parquet(a / "decisions.parquet")
        assert {"merge", "defer"} <= set(dec["action"])      # the rule both merges and defers


def test_the_plugin_runs_validate_and_audit_like_built_in_ones(swept):
    from evalkit.audit import audit_campaign

    assert CliRunner().invoke(cli, ["validate", str(swept)]).exit_code == 0
    audit = audit_campaign(swept)
    claims = {c.policy: c for c in audit.claims}
    assert {"ewma", "holt_defer", "holt_by_path"} <= set(claims)
    names = [c.name for c in claims["ewma"].checks]
    for label in ("holt_defer", "holt_by_path"):
        claim = claims[label]
        assert [c.name for c in claim.checks] == names
        assert len(claim.data.pairs) == 3 and not claim.data.oracle
        assert claim.verdict and claim.stop_reason
    ours = [p.v_policy for p in claims["holt_defer"].data.pairs]
    assert ours == [p.v_policy for p in claims["holt_by_path"].data.pairs]
    assert all(v > 0 for v in ours)             # the load produces violations to compare
