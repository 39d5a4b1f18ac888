"""Sequential verdicts: `evalkit gate --sequential` and `evalkit sweep --until-decided`.

The verdicts are decided on audit documents: the unit cases on small hand-built claims (each
seed's policy V and its draws' V, the checks), the end-to-end ones on a sweep's runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.audit.protocol import load_protocol
from evalkit.audit.sequential import sequential_verdicts, verdict_for
from evalkit.cli.main import cli
from evalkit.errors import EXIT_CONTINUE, InputError
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


def _claim(v_pol, draws, checks=(), policy="pol"):
    """An audit.json claim with the fields the sequential verdict reads."""
    units = [{"seed": s, "v_policy": float(v), "v_draws": [float(x) for x in d]}
             for s, (v, d) in enumerate(zip(v_pol, draws))]
    return {"regime": "r", "policy": policy, "checks": list(checks), "units": units}


def _check(name, tier, found):
    """A failed, blocking check as audit.json records it."""
    return {"name": name, "tier": tier, "passed": False, "evaluable": True, "expected": "e",
            "found": found, "recommendation": "r", "blocking": True, "vouched": False,
            "status": "failed", "values": {}}


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
    assert v.decision == "fail" and "not better than matched random" in v.reason
    assert "WORSE" not in v.reason and v.exit_code == 1


def test_a_crossing_with_a_gain_below_min_effect_does_not_pass():
    pol, dr = _data(12, 0.03)
    gain = float(np.mean([np.mean(d) for d in dr]) - np.mean(pol))
    args = (_claim(pol, dr), PROTO, "matched_budget", DESIGN, list(range(12)), 1)
    assert verdict_for(*args, gain * 0.99).decision == "pass"
    v = verdict_for(*args, gain * 1.01)
    assert v.decision == "fail" and v.exit_code == 1 and v.reason.startswith("negligible")


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
    bad = _check("k_match", "matched_budget", "K mismatch")
    replaced = _check("enough_seeds", "matched_budget", "few")
    higher = _check("load_match", "placement_gain", "x")
    v = verdict_for(_claim(good, dr2, [replaced, higher]), PROTO, "matched_budget", DESIGN,
                    list(range(12)), 1, 0.0)
    assert v.decision == "pass"             # fixed-n checks replaced; higher tiers not asked
    v = verdict_for(_claim(good, dr2, [bad]), PROTO, "matched_budget", DESIGN,
                    list(range(12)), 1, 0.0)
    assert v.decision == "fail" and "k_match" in v.reason
    assert v.lines()[-1] == "  [FAIL] matched_budget/k_match: K mismatch"


def test_the_document_gives_every_claim_a_verdict_in_the_plans_seed_order():
    pol, dr = _data(8, 0.02, seed=3)
    order = [5, 2, 7, 0, 1, 3, 4, 6]
    doc = {"design": {"sequential": DESIGN, "seed_order": order, "why_not": ""},
           "claims": [_claim(pol, dr), _claim(pol, dr, policy="other")]}
    verdicts = sequential_verdicts(doc, PROTO, "matched_budget", -1.0)
    assert [(v.policy, v.seeds, v.claims) for v in verdicts] == [("pol", order, 2),
                                                                 ("other", order, 2)]
    ref = anytime_test([pol[s] for s in order], [dr[s] for s in order], "two-sided", 0.025,
                       confidence_sequence=False)
    assert verdicts[0].result.e_process == ref.e_process


def test_a_document_without_a_sequential_design_is_refused_with_the_reason():
    doc = {"design": {"sequential": None, "seed_order": [0, 1],
                      "why_not": "the plan's design is 'fixed', not sequential"},
           "claims": [_claim([0.1], [[0.2]])]}
    (v,) = sequential_verdicts(doc, PROTO, "matched_budget")
    assert (v.decision, v.exit_code) == ("refused", 1)
    assert v.reason == "no sequential verdict: the plan's design is 'fixed', not sequential"


@pytest.mark.parametrize("drop", ["design", "units"])
def test_a_document_without_the_design_or_the_units_is_bad_input(drop):
    doc = {"design": {"sequential": DESIGN, "seed_order": [0], "why_not": ""},
           "claims": [_claim([0.1], [[0.2]])]}
    if drop == "design":
        del doc["design"]
    else:
        del doc["claims"][0]["units"]
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == "design" and "re-run 'evalkit audit" in err.value.fix


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
    # the audit writes what the sequential gate reads: its audit.json decides the same
    assert _invoke(["audit", str(runs), "--out", str(tmp_path / "rep")]).exit_code in (0, 1)
    again = _invoke(["gate", str(tmp_path / "rep" / "audit.json"), "--policy",
                     "calibrated_offline", "--sequential"])
    assert (again.exit_code, again.output) == (gate.exit_code, gate.output)
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
