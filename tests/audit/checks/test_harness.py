"""Decisions of the harness checks (fixed-cadence and deferral baselines) on a stub context."""

from __future__ import annotations

import pandas as pd

from evalkit.audit.checks import harness as C

from tests.support.decision_stubs import ctx, spec


# ------------------------------------------------------------------------------- harness

def test_harness_baselines():
    sp = spec(harness_backends=["sim"], policies=["fixed_h"])
    runs = pd.DataFrame({"backend": ["sim", "sim", "torch"], "policy": ["fixed_h"] * 2 + ["x"],
                         "seed": [0, 1, 2]})
    assert C.fixed_cadence_baseline(ctx(regime_runs=runs), sp).passed is True
    out = C.fixed_cadence_baseline(ctx(regime_runs=runs.iloc[[0, 2]]), sp)
    assert out.passed is False and "seeds 1" in out.found
    # a fixed_h run on a real backend is not a harness baseline
    out = C.deferral_baseline(ctx(regime_runs=runs.assign(backend="torch")), sp)
    assert out.evaluable is False
    # a harness run of another policy does not count: the campaign has no fixed_h runs, so
    # the check is not evaluable (nothing failed) and names the campaign lines to add
    other = runs.assign(policy="ewma")
    out = C.fixed_cadence_baseline(ctx(regime_runs=other), sp)
    assert out.passed is None and out.evaluable is False
    assert out.values["missing_policies"] == ["fixed_h"]
    assert out.values["campaign_toml"].splitlines() == ["[[policies]]", 'name = "fixed_h"',
                                                         "draws = 0"]
    assert 'name = "fixed_h"' in out.recommendation and "draws = 0" in out.recommendation


def test_a_deferral_baseline_not_in_the_campaign_names_either_policy_in_valid_toml():
    import tomllib

    sp = spec(harness_backends=["sim"], policies=["pressure_gate", "random_deferral"])
    runs = pd.DataFrame({"backend": ["sim"], "policy": ["wa"], "seed": [0]})
    out = C.deferral_baseline(ctx(regime_runs=runs), sp)
    assert out.evaluable is False and out.values["missing_policies"] == ["pressure_gate",
                                                                         "random_deferral"]
    table = tomllib.loads(out.values["campaign_toml"])
    assert table == {"policies": [{"name": "pressure_gate", "draws": 0}]}
    assert "random_deferral" in out.values["campaign_toml"]
