"""Load matching: checks, vex and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats import load_match


def summary(**kw):
    base = dict(seed=1, n_requests=1000, arrival_rate_achieved=5.0, prompt_tokens_total=10_000,
                output_tokens_total=5000, step_rate=2.0, violation_rate=0.05)
    base.update(kw)
    return base


def test_load_match_checks_and_vex():
    r = load_match(summary(violation_rate=0.08), summary())
    assert r.matched and r.vex == pytest.approx(0.03)
    assert {c.key for c in r.checks} == {"n_requests", "arrival_rate_achieved",
                                         "prompt_tokens_total", "output_tokens_total",
                                         "step_rate"}
    bad = load_match(summary(n_requests=990, step_rate=np.nan), summary())
    assert not bad.matched and bad.failed == ["n_requests"]
    assert bad.not_evaluable == ["step_rate"]
    step = [c for c in bad.checks if c.key == "step_rate"][0]
    assert step.status == "not evaluable" and not step.passed
    assert load_match(summary(step_rate=2.2), summary(), {"step_rate": 0.2}).matched
    json.dumps(bad.to_dict(), allow_nan=False)


def test_load_match_bad_input():
    with pytest.raises(InputError, match="missing"):
        load_match(summary(), None)
    with pytest.raises(InputError, match="seed"):
        load_match(summary(seed=2), summary())
    s = summary()
    del s["step_rate"]
    with pytest.raises(InputError, match="step_rate"):
        load_match(summary(), s)
