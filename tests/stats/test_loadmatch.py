"""Load matching: checks, vex and bad input.

Load matching of series and one-row frames, seed checks, a difference exactly at the
tolerance, not-evaluable runs.

Load matching at the tolerance edges, zero tolerance and counts, NaN inputs, and the
defaults of the shipped protocol."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from evalkit.errors import InputError
from evalkit.stats.loadmatch import DEFAULT_TOLERANCES, load_match


def summary(**kw):
    base = dict(seed=1, n_requests=1000, arrival_rate_achieved=5.0, prompt_tokens_total=10_000,
                output_tokens_total=5000, step_rate=2.0, trainer_active_share=1.0,
                violation_rate=0.05)
    base.update(kw)
    return base


def test_load_match_checks_and_vex():
    r = load_match(summary(violation_rate=0.08), summary())
    assert r.matched and r.vex == pytest.approx(0.03)
    assert {c.key for c in r.checks} == {"n_requests", "arrival_rate_achieved",
                                         "prompt_tokens_total", "output_tokens_total",
                                         "step_rate", "trainer_active_share"}
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


# ------------------------------------------------------------------------- load matching

BASE = {"seed": 0, "n_requests": 1000, "arrival_rate_achieved": 2.0,
        "prompt_tokens_total": 50_000, "output_tokens_total": 20_000, "step_rate": 1.0,
        "trainer_active_share": 1.0, "violation_rate": 0.05}


def _check(result, key):
    return next(c for c in result.checks if c.key == key)


def test_load_match_accepts_series_and_one_row_frames():
    pol = {**BASE, "violation_rate": 0.08}
    want = load_match(pol, BASE)
    assert want.matched and want.vex == pytest.approx(0.03)
    assert load_match(pd.Series(pol), pd.Series(BASE)).to_dict() == want.to_dict()
    assert load_match(pd.DataFrame([pol]), pd.DataFrame([BASE])).to_dict() == want.to_dict()
    with pytest.raises(InputError, match="policy summary has 2 rows, expected 1"):
        load_match(pd.DataFrame([pol, pol]), BASE)
    with pytest.raises(InputError, match="no_sync summary must be dict-like"):
        load_match(pol, [BASE])
    with pytest.raises(InputError, match="the policy run summary is missing"):
        load_match(None, BASE)
    with pytest.raises(InputError, match="no-sync summary lacks 'step_rate'"):
        load_match(pol, {k: v for k, v in BASE.items() if k != "step_rate"})


def test_load_match_seed_checks():
    no_seed = {k: v for k, v in BASE.items() if k != "seed"}
    assert load_match(no_seed, BASE).matched                    # seed only on one side
    assert load_match(BASE, no_seed).matched
    assert load_match({**BASE, "seed": 0}, BASE).matched        # same seed
    with pytest.raises(InputError, match="no-sync run is seed 0 but the policy run is seed 2"):
        load_match({**BASE, "seed": 2}, BASE)


def test_load_match_relative_difference_exactly_at_the_tolerance():
    base = {**BASE, "arrival_rate_achieved": 2.0}
    pol = {**base, "arrival_rate_achieved": 2.5}                  # rel = 0.25 exactly
    res = load_match(pol, base, {"arrival_rate_achieved": 0.25})
    chk = _check(res, "arrival_rate_achieved")
    assert chk.rel_diff == 0.25 and chk.passed and chk.status == "passed" and chk.reason == ""
    res = load_match(pol, base, {"arrival_rate_achieved": 0.25 - 1e-12})     # float fuzz
    assert _check(res, "arrival_rate_achieved").passed
    res = load_match(pol, base, {"arrival_rate_achieved": 0.2499})
    chk = _check(res, "arrival_rate_achieved")
    assert not chk.passed and chk.status == "failed" and res.failed == ["arrival_rate_achieved"]
    assert "relative difference 0.25 exceeds tolerance 0.2499" in chk.reason
    assert chk.tolerance == 0.2499 and chk.expected == 2.0 and chk.found == 2.5
    with pytest.raises(InputError, match="unknown tolerance keys"):
        load_match(pol, base, {"arrival_rate": 0.3})


def test_load_match_not_evaluable_names_the_runs():
    res = load_match({**BASE, "step_rate": None}, BASE)
    chk = _check(res, "step_rate")
    assert chk.status == "not evaluable" and not chk.passed and math.isnan(chk.rel_diff)
    assert chk.reason == "step_rate is missing/NaN in the policy run"
    res = load_match({**BASE, "step_rate": "n/a"}, {**BASE, "step_rate": float("nan")})
    assert _check(res, "step_rate").reason == "step_rate is missing/NaN in the no-sync and policy run"
    assert res.not_evaluable == ["step_rate"] and res.failed == [] and not res.matched


def _status(result, key):
    return next(c for c in result.checks if c.key == key)


# ---------------------------------------------------------------------------- load match

@pytest.mark.parametrize("key", ["arrival_rate_achieved", "output_tokens_total", "step_rate"])
def test_load_match_tolerance_edges(key):
    tol = DEFAULT_TOLERANCES[key]
    at = {**BASE, key: BASE[key] * (1 + tol)}
    res = load_match(at, BASE)
    assert _status(res, key).passed and res.matched
    below = {**BASE, key: BASE[key] * (1 - tol)}
    assert load_match(below, BASE).matched
    over = {**BASE, key: BASE[key] * (1 + tol) * 1.001}
    res = load_match(over, BASE)
    assert not res.matched and res.failed == [key] and _status(res, key).status == "failed"
    assert _status(res, key).rel_diff == pytest.approx(tol * 1.001 + 0.001, rel=1e-6)


@pytest.mark.parametrize("key", ["n_requests", "prompt_tokens_total"])
def test_load_match_zero_tolerance_is_exact(key):
    assert load_match(BASE, BASE).matched
    res = load_match({**BASE, key: BASE[key] + 1}, BASE)
    assert res.failed == [key]


def test_load_match_zero_counts():
    zero = {**BASE, "output_tokens_total": 0}
    assert load_match(zero, zero).matched               # 0 vs 0: identical
    res = load_match({**BASE, "output_tokens_total": 1}, zero)
    assert res.failed == ["output_tokens_total"]
    assert math.isinf(_status(res, "output_tokens_total").rel_diff)
    res = load_match(zero, BASE)
    assert res.failed == ["output_tokens_total"]


def test_load_match_explicit_tolerance_and_vex():
    res = load_match({**BASE, "step_rate": 1.2, "violation_rate": 0.08}, BASE,
                     {"step_rate": 0.2})
    assert res.matched and res.vex == pytest.approx(0.03)
    assert res.v_policy == 0.08 and res.v_no_sync == 0.05
    assert not load_match({**BASE, "step_rate": 1.2}, BASE, {"step_rate": 0.19}).matched


@pytest.mark.parametrize("which", ["policy", "no_sync"])
def test_load_match_nan_violation_rate_is_rejected(which):
    bad = {**BASE, "violation_rate": float("nan")}
    args = (bad, BASE) if which == "policy" else (BASE, bad)
    with pytest.raises(InputError) as info:
        load_match(*args)
    assert info.value.column == "violation_rate"


def test_load_match_nan_quantity_is_not_evaluable_not_passed():
    res = load_match({**BASE, "step_rate": float("nan")}, BASE)
    check = _status(res, "step_rate")
    assert check.status == "not evaluable" and not check.passed and not res.matched
    assert res.not_evaluable == ["step_rate"] and res.failed == []
    assert "policy" in check.reason


def test_load_match_missing_baseline_and_seed_mismatch():
    with pytest.raises(InputError):
        load_match(BASE, None)
    with pytest.raises(InputError) as info:
        load_match({**BASE, "seed": 1}, BASE)
    assert info.value.column == "seed"


def test_load_match_defaults_are_the_shipped_protocol_tolerances():
    import tomllib
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "protocols" / "diloco-slo.toml"
    protocol = tomllib.loads(path.read_text())
    # trainer_active_share came after the protocol was frozen into recorded plans: the
    # protocol leaves it at its default (changing the file would change its content hash)
    shipped = protocol["checks"]["load_match"]["tolerances"]
    assert {k: v for k, v in DEFAULT_TOLERANCES.items() if k != "trainer_active_share"} == \
        shipped and DEFAULT_TOLERANCES["trainer_active_share"] == 0.05
