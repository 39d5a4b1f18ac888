"""Sequential verdicts: `evalkit gate --sequential` and `evalkit sweep --until-decided`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit.runset import SeedPair
from evalkit.audit.checks.core import Check
from evalkit.audit.protocol import load_protocol
from evalkit.audit.sequential import verdict_for
from evalkit.cli.main import cli
from evalkit.errors import EXIT_CONTINUE
from evalkit.stats.sequential import anytime_test

CAMPAIGN = """
regime = "seqdemo"
seeds = 12
matched_random_draws = 3
horizon_s = 240.0
merge_duration_s = 8.0
inner_step_s = 0.5
h_min = 40
h_max = 120
[slo]
e2e_s = 1.5
[trace]
generator = "square_wave"
period_s = 60.0
burst_s = 20.0
quiet_rate = 2.0
busy_rate = 12.0
prompt_tokens = "lognormal:256,0.5"
output_tokens = "lognormal:64,0.5"
[backend]
name = "sim"
[backend.config]
merge_mechanisms = ["gpu"]
[design]
kind = "sequential"
max_seeds = 12
batch = 2
[[policies]]
name = "fixed_h"
params = { H = 100 }
draws = 0
[[policies]]
name = "pressure_gate"
params = { theta = 0.6 }
draws = 0
[[policies]]
name = "calibrated_offline"
params = { k = 4 }
"""

PROTO = load_protocol()
DESIGN = {"kind": "sequential", "alpha": 0.05, "max_seeds": 12, "batch": 2}


def _claim(v_pol, draws, checks=()):
    units = [SeedPair(s, f"p{s}", float(v), 4, None,
                      pd.DataFrame({"run_id": [f"d{s}-{j}" for j in range(len(d))],
                                    "violation_rate": np.asarray(d, float)}), None)
             for s, (v, d) in enumerate(zip(v_pol, draws))]
    return SimpleNamespace(regime="r", policy="pol", checks=list(checks),
                           ctx=SimpleNamespace(units=units))


def _data(n, gain, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.lognormal(np.log(0.06), 0.2, (n, 4))
    return v[:, 0] - gain, [row for row in v[:, 1:]]


def test_pass_continue_and_worse():
    pol, dr = _data(12, 0.03)
    v = verdict_for(_claim(pol, dr), PROTO, "matched_budget", DESIGN, list(range(12)), 1, 0.0)
    ref = anytime_test(pol, dr, "two-sided", 0.05)
    assert v.decision == "pass" and v.exit_code == 0 and v.result.e_max == ref.e_max
    v = verdict_for(_claim(pol[:2], dr[:2]), PROTO, "matched_budget", DESIGN, [0, 1], 1, -1.0)
    assert v.decision == "continue" and v.exit_code == EXIT_CONTINUE == 4
    worse, dr2 = _data(12, -0.03)
    v = verdict_for(_claim(worse, dr2), PROTO, "matched_budget", DESIGN, list(range(12)), 1,
                    0.0)
    assert v.decision == "fail" and "WORSE" in v.reason and v.exit_code == 1


def test_seeds_enter_in_plan_order_not_sorted():
    pol, dr = _data(8, 0.02, seed=3)
    order = [5, 2, 7, 0, 1, 3, 4, 6]
    v = verdict_for(_claim(pol, dr), PROTO, "matched_budget", DESIGN, order, 1, -1.0)
    ref = anytime_test([pol[s] for s in order], [dr[s] for s in order], "two-sided", 0.05,
                       confidence_sequence=False)
    assert v.seeds == order and v.result.e_process == ref.e_process


def test_bonferroni_over_claims_raises_the_threshold():
    pol, dr = _data(12, 0.03)
    one = verdict_for(_claim(pol, dr), PROTO, "matched_budget", DESIGN, list(range(12)), 1, 0.0)
    three = verdict_for(_claim(pol, dr), PROTO, "matched_budget", DESIGN, list(range(12)), 3,
                        0.0)
    assert one.result.threshold == pytest.approx(20) and three.result.threshold == \
        pytest.approx(60)


def test_futility_at_below_and_above_the_smallest_effect():
    pol, dr = _data(12, 0.0, seed=4)
    ref = anytime_test(pol, dr, "two-sided", 0.05)
    assert not ref.rejected
    design = {**DESIGN, "max_seeds": 40}
    for eff, futile in ((ref.ci_high, False), (ref.ci_high - 1e-9, False),
                        (ref.ci_high + 1e-9, True)):
        v = verdict_for(_claim(pol, dr), PROTO, "matched_budget", design, list(range(12)), 1,
                        eff)
        assert (v.decision == "futile") is futile, (eff, v.decision)
        assert v.decision in ("futile", "continue")


def test_exhausted_refused_and_blocking_checks():
    pol, dr = _data(12, 0.0, seed=4)
    v = verdict_for(_claim(pol, dr), PROTO, "matched_budget", DESIGN, list(range(12)), 1, -1.0)
    assert v.decision == "exhausted" and v.exit_code == 1
    small = {**DESIGN, "max_seeds": 10}
    v = verdict_for(_claim(pol, dr), PROTO, "matched_budget", small, list(range(12)), 1, 0.0)
    assert v.decision == "refused" and "at most 10" in v.reason
    v = verdict_for(_claim(pol, dr), PROTO.with_alpha(0.01), "matched_budget", DESIGN,
                    list(range(12)), 1, 0.0)
    assert v.decision == "refused" and "alpha" in v.reason
    good, dr2 = _data(12, 0.03)
    bad = Check("k_match", "matched_budget", False, True, "e", "K mismatch", "r", True)
    replaced = Check("enough_seeds", "matched_budget", False, True, "e", "few", "r", True)
    higher = Check("load_match", "placement_gain", False, True, "e", "x", "r", True)
    v = verdict_for(_claim(good, dr2, [replaced, higher]), PROTO, "matched_budget", DESIGN,
                    list(range(12)), 1, 0.0)
    assert v.decision == "pass"             # fixed-n checks replaced; higher tiers not asked
    v = verdict_for(_claim(good, dr2, [bad]), PROTO, "matched_budget", DESIGN,
                    list(range(12)), 1, 0.0)
    assert v.decision == "fail" and "k_match" in v.reason


# ----------------------------------------------------------------------------- end to end

def _invoke(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_until_decided_then_gate_on_the_simulator(tmp_path):
    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN)
    runs = tmp_path / "runs"
    res = _invoke(["sweep", str(camp), "--out", str(runs), "--until-decided",
                   "--max-seeds", "2", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "batch 1: seeds 0..1 (2 seeds, 14 runs ran" in res.output
    assert "stopped after 2 of at most 2 seeds with claims undecided" in res.output
    plan = json.loads((runs / "plan.json").read_text())
    assert plan["design"] == {"kind": "sequential", "alpha": 0.05, "max_seeds": 12, "batch": 2}
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == EXIT_CONTINUE, gate.output
    assert "sequential CONTINUE" in gate.output and "run more seeds" in gate.output
    fixed = _invoke(["gate", str(runs), "--policy", "calibrated_offline"])
    assert fixed.exit_code == 1 and "planned as sequential" in fixed.output
    bad = _invoke(["sweep", str(camp), "--out", str(runs), "--until-decided",
                   "--max-seeds", "13"])
    assert bad.exit_code == 2 and "--max-seeds 13 is outside 1..12" in bad.output


def test_fixed_campaign_gets_no_sequential_verdict(tmp_path):
    text = CAMPAIGN.replace('kind = "sequential"\nmax_seeds = 12\nbatch = 2\n',
                            'kind = "fixed"\n').replace("seeds = 12", "seeds = 2")
    camp = tmp_path / "fixed.toml"
    camp.write_text(text)
    runs = tmp_path / "runs"
    res = _invoke(["sweep", str(camp), "--out", str(runs), "--until-decided"])
    assert res.exit_code == 2 and "needs a campaign planned as sequential" in res.output
    assert not runs.exists()
    assert _invoke(["sweep", str(camp), "--out", str(runs), "--no-progress"]).exit_code == 0
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 1 and "sequential REFUSED" in gate.output
    assert "not sequential" in gate.output


@pytest.mark.slow
def test_until_decided_stops_early_and_the_gate_passes(tmp_path):
    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN)
    runs = tmp_path / "runs"
    res = _invoke(["sweep", str(camp), "--out", str(runs), "--until-decided", "--no-progress"])
    assert res.exit_code == 0 and "decided after 10 of at most 12 seeds" in res.output
    assert not (runs / "seqdemo__no_sync__s10").exists()          # never ran
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 0 and "sequential PASS" in gate.output


def test_the_futility_bound_defaults_to_the_protocols_smallest_effect():
    from evalkit.audit.protocol import load_protocol
    from evalkit.audit.sequential import protocol_min_effect

    proto = load_protocol()
    assert protocol_min_effect(proto) == proto.checks["gain_significant"].params["min_effect"]
    assert protocol_min_effect(proto) == 0.005
