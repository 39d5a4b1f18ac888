"""Load matching at the tolerance edges, zero tolerance and counts, NaN inputs, and the
defaults of the shipped protocol."""

from __future__ import annotations

import math

import pytest

from evalkit.errors import InputError
from evalkit.stats import load_match
from evalkit.stats.loadmatch import DEFAULT_TOLERANCES

BASE = {"seed": 0, "n_requests": 1000, "arrival_rate_achieved": 2.0,
        "prompt_tokens_total": 50_000, "output_tokens_total": 20_000, "step_rate": 1.0,
        "violation_rate": 0.05}


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
    assert DEFAULT_TOLERANCES == protocol["checks"]["load_match"]["tolerances"]
