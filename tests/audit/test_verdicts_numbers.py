"""The words of the verdict match the numbers: negligible gains below the smallest effect of
interest, the protocol's min_effect, underpowered claims."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli

from tests.support.rule_attacks import (BASE, CAMPAIGNS, PROTOCOL, _paired_table, _vouched,
                                        _worse_policy, check, gate, run_dirs, runs)


@pytest.mark.parametrize("gain, passed", [(0.005, True), (0.0049, False), (0.0051, True)])
def test_a_significant_gain_below_the_smallest_effect_of_interest_is_negligible(
        tmp_path, gain, passed):
    # 8 seeds, every one favours wa by `gain`: exact p = 2/256, significant at any size
    path = _paired_table(tmp_path / "t.csv", [gain] * 8)
    wa = audit_campaign(path, protocol=_vouched()).claim("wa")
    gs = check(wa, "gain_significant")
    assert gs.passed is passed, gs.found
    assert (wa.tier == "matched_budget") is passed
    if not passed:
        assert gs.found.startswith("negligible") and "0.50 pp" in gs.found
        assert wa.verdict.startswith("negligible") and "beats" not in wa.verdict


def test_the_decision_uses_the_protocols_min_effect(tmp_path):
    path = _paired_table(tmp_path / "t.csv", [0.01] * 8)
    assert audit_campaign(path, protocol=_vouched()).claim("wa").tier == "matched_budget"
    wa = audit_campaign(path, protocol=_vouched(0.02)).claim("wa")
    assert wa.tier != "matched_budget" and "negligible" in wa.verdict
    assert audit_campaign(path, protocol=_vouched(0.0)).claim("wa").tier == "matched_budget"


def test_a_tiny_gain_over_many_seeds_is_negligible(tmp_path):
    # the case: +0.1 pp over many seeds is significant, and does not matter
    rng = np.random.default_rng(3)
    path = _paired_table(tmp_path / "t.csv", list(0.001 + rng.normal(0, 0.002, 60)))
    wa = audit_campaign(path, protocol=_vouched()).claim("wa")
    gs = check(wa, "gain_significant")
    assert wa.ctx.p_adjusted <= 0.05 and gs.passed is False and gs.found.startswith("negligible")


def test_min_effect_must_not_be_negative(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text(PROTOCOL.read_text().replace("min_effect = 0.005", "min_effect = -0.01"))
    res = gate(CAMPAIGNS / BASE, "--protocol", str(bad))
    assert res.exit_code == 2 and "min_effect" in res.output


def _four_seeds_worse(runs: Path) -> None:
    """Keep seeds 0-3 of the base campaign and make wa clearly worse on them."""
    for d in run_dirs(runs):
        if json.loads((d / "run.json").read_text())["seed"] >= 4:
            shutil.rmtree(d)
    _worse_policy(runs, every=2, extra_s=8.0)


def test_underpowered_by_the_protocol_minimum_says_so_and_says_worse(runs, tmp_path):
    # 4 seeds x 2 draws, the policy clearly worse: the claim's test is the sign flip on d
    # (one d a seed), which cannot reach 0.05 two-sided below 6 seeds (2 * 2^-4 = 0.125), and
    # the protocol asks for 5: both rules block and the verdict names both with the numbers;
    # the side of the effect is never "worse" from this test
    _four_seeds_worse(runs)
    wa = audit_campaign(runs).claim("wa")
    assert wa.ctx.seeds_needed == 6 and wa.ctx.informative_n == 4
    assert wa.underpowered and wa.sign_flip.statistic < 0
    assert "below the protocol's minimum of 5" in wa.verdict
    assert "the smallest sign-flip two-sided p is 0.125 > alpha = 0.05" in wa.verdict
    assert "the test needs >= 6 seeds" in wa.verdict
    assert "significantly worse" not in wa.verdict
    es = check(wa, "enough_seeds")
    assert "minimum of 5" in es.found and es.recommendation == "underpowered: needs >= 6 seeds"
    out = tmp_path / "report"
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    head = md.split("### Tier ladder")[0]
    assert "minimum of 5" in head and "significantly worse" not in head
