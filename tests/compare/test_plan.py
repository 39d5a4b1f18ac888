"""The plan from a pilot: pairs per metric at alpha / looks / metrics, whole blocks, the
interleaved order."""

from __future__ import annotations

import pytest

from evalkit.compare import verdict as vd
from evalkit.compare.plan import interleaved_order, plan_document
from evalkit.errors import InputError


def _pilot(*rows):
    return {"pairing": {"n": 4}, "metrics": [
        {"metric": m, "unit": "s", "sd": sd, "margin": margin, "paired": True}
        for m, sd, margin in rows]}


def test_pairs_per_metric_at_each_looks_holm_first_step_level():
    pilot = _pilot(("ttft_p99", 0.05, 0.02), ("e2e_p99", 0.2, None))
    plan = plan_document(pilot, effect={"ttft_p99": 0.03, "e2e_p99": 0.1}, power=0.8,
                         looks=2, alpha=0.05)
    level = 0.05 / 2 / 2
    ttft, e2e = plan["metrics"]
    assert ttft["pairs_detect"] == vd.pairs_to_decide(0.03, 0.05, alpha=level, power=0.8,
                                                      margin=None)
    assert ttft["pairs_equivalent"] == vd.pairs_to_decide(0.0, 0.05, alpha=level, power=0.8,
                                                          margin=0.02)
    assert e2e["pairs_equivalent"] is None
    need = max(ttft["pairs"], e2e["pairs"])
    assert plan["block"] == -(-need // 2) and plan["pairs_max"] == 2 * plan["block"]
    assert plan["alpha_per_look"] == 0.025 and plan["alpha_per_metric"] == level
    assert plan["order"] == interleaved_order(plan["pairs_max"])


def test_interleaved_order_mirrors_each_pair():
    assert interleaved_order(5) == ["A B", "B A", "A B", "B A", "A B"]


def test_a_metric_without_effect_or_margin_cannot_be_planned():
    with pytest.raises(InputError) as err:
        plan_document(_pilot(("ttft_p99", 0.05, None)), effect={}, power=0.8, looks=1,
                      alpha=0.05)
    assert err.value.column == "--effect"


def test_an_unpaired_pilot_cannot_be_planned():
    pilot = _pilot(("ttft_p99", 0.05, 0.02))
    pilot["metrics"][0]["paired"] = False
    with pytest.raises(InputError, match="could not be paired"):
        plan_document(pilot, effect={}, power=0.8, looks=1, alpha=0.05)
