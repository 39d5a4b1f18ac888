"""Decisions of the harness checks (fixed-cadence and deferral baselines) on a stub context."""

from __future__ import annotations

import pandas as pd

from evalkit.audit import checks as C

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
    # a harness run of another policy does not count
    other = runs.assign(policy="ewma")
    assert C.fixed_cadence_baseline(ctx(regime_runs=other), sp).passed is False
