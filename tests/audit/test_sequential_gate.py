"""Sequential verdicts: `evalkit gate --sequential` and `evalkit sweep --until-decided`.

The verdicts are decided on audit documents: the unit cases on small hand-built claims (each
seed's policy V and its draws' V, the checks, the plan's design, claims and seed order), the
end-to-end ones on a sweep's runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from evalkit.audit.protocol import load_protocol
from evalkit.audit.sequential import sequential_verdicts, verdict_for
from evalkit.cli.main import cli
from evalkit.errors import EXIT_CONTINUE, InputError
from evalkit.stats.group_sequential import design
from tests.stats.test_group_sequential import PUBLISHED_OBF

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
DESIGN = {"kind": "sequential", "alpha": 0.05, "max_seeds": 12, "batch": 2,
          "planned_claims": [["r", "pol"]]}
MIN_EFFECT = 0.005          # the default protocol's smallest effect of interest


def _claim(v_pol, draws, checks=(), policy="pol", seeds=None):
    """An audit.json claim with the fields the sequential verdict reads."""
    seeds = range(len(v_pol)) if seeds is None else seeds
    units = [{"seed": int(s), "v_policy": float(v), "v_draws": [float(x) for x in d]}
             for s, v, d in zip(seeds, v_pol, draws)]
    return {"regime": "r", "policy": policy, "checks": list(checks), "units": units,
            "tail_luck": None, "level_trend": None}


def _check(name, tier, found):
    """A failed, blocking check as audit.json records it."""
    return {"name": name, "tier": tier, "passed": False, "evaluable": True, "expected": "e",
            "found": found, "recommendation": "r", "blocking": True, "vouched": False,
            "status": "failed", "values": {}}


def _from_d(d, base=0.06):
    """Policy V and 3 draws per seed whose d_s = mean(draws) - policy is exactly ``d``."""
    d = np.asarray(d, dtype=float)
    draws = [np.array([base - 0.01, base, base + 0.01]) for _ in d]
    return base - d, draws


def _d(n, mean, sd=0.004, seed=0):
    return mean + sd * np.random.default_rng(seed).standard_normal(n)


def _verdict(d, design=DESIGN, order=None, n_claims=1, min_effect=MIN_EFFECT, **claim_kw):
    pol, dr = _from_d(d)
    order = list(range(design["max_seeds"])) if order is None else order
    return verdict_for(_claim(pol, dr, **claim_kw), PROTO, "matched_budget", design, order,
                       n_claims, min_effect)


def _doc(claims, order=None, planned=(("r", "pol"),), design=DESIGN):
    spec = {**design, "planned_claims": [list(c) for c in planned]}
    return {"design": {"sequential": spec, "why_not": "",
                       "seed_order": list(range(12)) if order is None else order},
            "claims": claims}


def test_a_clear_gain_passes_at_an_early_look_with_the_numbers_quoted():
    d = _d(12, 0.03)
    v = _verdict(d)
    assert (v.decision, v.exit_code) == ("pass", 0)
    assert v.seeds_used < 12 and v.seeds_used == v.looks[v.look_index - 1]
    assert v.statistic >= v.boundary
    assert v.mean_gain == pytest.approx(np.mean(d[:v.seeds_used]))
    lo, hi = v.ci
    assert MIN_EFFECT <= lo < v.mean_gain < hi
    text = "\n".join(v.lines())
    assert f"look {v.look_index} of 6" in text and f"{v.seeds_used} seeds in plan order" in text
    assert f"t = {v.statistic:.4g}, boundary {v.boundary:.4g}" in text
    assert "mean gain d = " in text and "repeated CI [" in text


def test_a_gain_below_min_effect_does_not_pass_though_it_is_clearly_positive():
    d = _d(12, 0.003, sd=0.0002)                   # t against 0 is huge
    assert _verdict(d, min_effect=0.0).decision == "pass"
    v = _verdict(d)
    assert v.decision != "pass" and v.exit_code == 1
    assert v.decision == "stop: not better" and "not better than matched random" in v.reason
    assert "worse" not in " ".join(v.lines()).lower()


def test_equal_means_do_not_pass_and_spend_every_planned_seed_or_stop_not_better():
    outcomes = {_verdict(_d(12, 0.0, seed=s), min_effect=0.0).decision for s in range(20)}
    assert "pass" not in outcomes and outcomes <= {"exhausted", "stop: not better"}
    v = _verdict(np.array([0.001, -0.001] * 6), min_effect=0.0)
    assert v.decision == "exhausted" and v.seeds_used == 12 and v.exit_code == 1


def test_a_min_effect_below_the_protocols_is_refused():
    doc = _doc([_claim(*_from_d(_d(12, 0.03)))])
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget", MIN_EFFECT / 2)
    assert err.value.column == "--min-effect"
    assert [v.decision for v in sequential_verdicts(doc, PROTO, "matched_budget")] == ["pass"]


def test_seeds_enter_in_plan_order_not_sorted():
    # the best seeds come last in seed number, first in the plan's order
    d = np.array([0.0, 0.0, -0.002, 0.001, 0.0, 0.001,
                  0.04, 0.05, 0.045, 0.05, 0.043, 0.047])
    order = list(range(6, 12)) + list(range(6))
    design = {**DESIGN, "batch": 6}
    v = _verdict(d, design=design, order=order)
    assert v.seeds == order and v.decision == "pass" and v.seeds_used == 6
    assert v.mean_gain == pytest.approx(np.mean(d[6:]))
    assert _verdict(d, design=design).seeds_used == 12      # sorted: seeds 0..5 first


def test_a_plan_order_repeating_the_best_seed_is_refused():
    d = np.concatenate([[0.05], _d(11, 0.0, seed=2)])
    doc = _doc([_claim(*_from_d(d))], order=[0] * 6 + list(range(1, 7)))
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == "design.seed_order" and "[0]" in str(err.value)
    pol, dr = _from_d(d[:3])
    doc = _doc([_claim(pol, dr, seeds=[0, 0, 1])])
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == "claims[0].units"


@pytest.mark.parametrize("key", ["batch", "max_seeds"])
def test_a_design_without_a_positive_batch_or_maximum_is_bad_input(key):
    doc = _doc([_claim(*_from_d(_d(12, 0.03)))], design={**DESIGN, key: -2})
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == f"design.sequential.{key}"


def test_the_family_is_the_plans_claims_not_the_ones_left_in_the_document():
    d = _d(12, 0.012, sd=0.006, seed=7)
    three = (("r", "pol"), ("r", "lost1"), ("r", "lost2"))
    (kept,) = sequential_verdicts(_doc([_claim(*_from_d(d))], planned=three), PROTO,
                                  "matched_budget")
    (alone,) = sequential_verdicts(_doc([_claim(*_from_d(d))]), PROTO, "matched_budget")
    assert (kept.claims, alone.claims) == (3, 1)
    assert kept.level == pytest.approx(0.025 / 3) and alone.level == pytest.approx(0.025)
    assert kept.boundary > alone.boundary
    assert "over 3 planned claim(s)" in "\n".join(kept.lines())
    doc = _doc([_claim(*_from_d(d))])
    del doc["design"]["sequential"]["planned_claims"]
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == "design.sequential.planned_claims"


def test_the_gates_boundaries_are_the_published_obrien_fleming_ones_on_the_t_scale():
    # 3 looks of 4 seeds, one-sided 0.025 (two-sided plan alpha 0.05, one claim)
    flat = np.array([0.001, -0.001] * 6)
    design = {**DESIGN, "batch": 4}
    bounds = []
    for n in (4, 8, 12):
        v = _verdict(flat[:n], design=design, min_effect=0.0)
        assert v.look_index == n // 4
        bounds.append(v.boundary)
    expected = [stats.t.isf(stats.norm.sf(z), df=n - 1)
                for z, n in zip(PUBLISHED_OBF[3], (4, 8, 12))]
    assert bounds == pytest.approx(expected, abs=2e-3)


def test_a_plan_that_names_hwang_shih_decani_gets_its_boundaries_and_words():
    # the same looks under gamma -2 spend more alpha early than O'Brien-Fleming: a lower
    # first boundary, the design's own, and the verdict names the function
    flat = np.array([0.001, -0.001] * 6)
    hsd = {**DESIGN, "batch": 4, "spending": "hwang-shih-decani", "gamma": -2.0}
    obf = {**DESIGN, "batch": 4}
    v_hsd = _verdict(flat[:4], design=hsd, min_effect=0.0)
    v_obf = _verdict(flat[:4], design=obf, min_effect=0.0)
    expected = design((4, 8, 12), 0.025, "hwang-shih-decani", -2.0).t_bounds[0]
    assert v_hsd.boundary == pytest.approx(expected, rel=1e-12)
    assert v_hsd.boundary < v_obf.boundary
    assert "Hwang-Shih-DeCani spending, gamma -2" in "\n".join(v_hsd.lines())
    assert "O'Brien-Fleming spending" in "\n".join(v_obf.lines())


@pytest.mark.parametrize("spending, gamma, column", [
    ("pocock", None, "design.sequential.spending"),
    ("hwang-shih-decani", None, "design.sequential.gamma"),
    ("hwang-shih-decani", "steep", "design.sequential.gamma"),
    ("obrien-fleming", -2.0, "design.sequential.gamma")])
def test_a_documents_unknown_or_incomplete_spending_is_bad_input(spending, gamma, column):
    doc = _doc([_claim(*_from_d(_d(12, 0.03)))],
               design={**DESIGN, "spending": spending, "gamma": gamma})
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == column


@pytest.mark.parametrize("edit, column", [
    ({"kind": "fixed"}, "design.sequential.kind"),
    ({"alpha": None}, "design.sequential.alpha"),
    ({"alpha": 0.0}, "design.sequential.alpha"),
    ({"alpha": 1}, "design.sequential.alpha"),
    ({"alpha": True}, "design.sequential.alpha"),
    ({"planned_claims": [["r"]]}, "design.sequential.planned_claims[0]"),
    ({"planned_claims": [["r", "pol"], ["r", 3]]}, "design.sequential.planned_claims[1]"),
    ({"planned_claims": ["r/pol"]}, "design.sequential.planned_claims[0]"),
    ({"batch": 2.5}, "design.sequential.batch"),
    ({"max_seeds": "12"}, "design.sequential.max_seeds"),
    ({"first_look": True}, "design.sequential.first_look"),
    ({"futility": "falling"}, "design.sequential.futility"),
    ({"futility": 0.0}, "design.sequential.futility")])
def test_a_recorded_design_no_frozen_plan_gives_is_bad_input(edit, column):
    # an edited audit.json: each was an internal error or a verdict under a fixed plan
    doc = _doc([_claim(*_from_d(_d(12, 0.03)))], design={**DESIGN, **edit})
    doc["design"]["sequential"].update(edit)
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == column and "plan frozen by evalkit" in err.value.fix
    (ok,) = sequential_verdicts(_doc([_claim(*_from_d(_d(12, 0.03)))], design=DESIGN), PROTO,
                                "matched_budget")
    assert ok.decision == "pass"


def test_the_verdict_says_when_the_draws_floor_held_t():
    # 4 seeds of a policy as variable as its draws (log sd 0.6): the draws' floor is above
    # d's sample variance and the verdict says so; a clear gain whose policy runs are far
    # less variable than its draws (log sd 0.03 against 0.17) is not held by it at 8 seeds
    # and the verdict does not mention it (at 4 seeds of these 3 draws the relabelling
    # pre-test cannot call it narrow: each seed's middle draw sits at its level as the
    # policy does, and 16 of the 256 labellings look as narrow, p >= 0.048)
    rng = np.random.default_rng(0)
    level = 0.06 * np.exp(0.2 * rng.standard_normal(4))
    draws = [lv * np.exp(0.6 * rng.standard_normal(3)) for lv in level]
    pol = level * np.exp(0.6 * rng.standard_normal(4)) * 0.5
    design4 = {**DESIGN, "batch": 4}
    held = verdict_for(_claim(pol, draws), PROTO, "matched_budget", design4, list(range(12)), 1,
                       MIN_EFFECT)
    look = held.last_look
    assert look.floor_binds and look.variance_floor > np.var(held.d, ddof=1)
    assert "variance floor binds" in "\n".join(held.lines())
    free = _verdict(_d(8, 0.03, sd=0.001), design={**DESIGN, "batch": 8})
    assert not free.last_look.floor_binds
    assert "variance floor binds" not in "\n".join(free.lines())


def test_seeds_that_are_not_the_plans_first_ones_are_refused():
    d = _d(6, 0.03)
    v = _verdict(d, seeds=[0, 1, 2, 4, 5, 6])
    assert v.decision == "refused" and "planned seed 3 has no result" in v.reason
    v = _verdict(d, order=list(range(12)), seeds=[0, 1, 2, 3, 4, 99])
    assert v.decision == "refused" and "[99]" in v.reason
    v = _verdict(_d(12, 0.03), design={**DESIGN, "max_seeds": 10}, order=list(range(12)))
    assert v.decision == "refused" and "at most 10" in v.reason


def test_continue_refused_alpha_and_blocking_checks():
    v = _verdict(_d(1, 0.03))
    assert v.decision == "continue" and v.exit_code == EXIT_CONTINUE == 4
    assert v.result is None and v.seeds_used == 0 and v.look_index is None   # before look 1
    v = _verdict(_d(3, 0.0002, sd=0.004, seed=1), min_effect=0.0)
    assert v.decision == "continue" and v.seeds_used == 2
    pol, dr = _from_d(_d(12, 0.03))
    v = verdict_for(_claim(pol, dr), PROTO.with_alpha(0.01), "matched_budget", DESIGN,
                    list(range(12)), 1, MIN_EFFECT)
    assert v.decision == "refused" and "alpha" in v.reason
    bad = _check("k_match", "matched_budget", "K mismatch")
    replaced = _check("enough_seeds", "matched_budget", "few")
    higher = _check("load_match", "placement_gain", "x")
    v = _verdict(_d(12, 0.03), checks=[replaced, higher])
    assert v.decision == "pass"             # fixed-n checks replaced; higher tiers not asked
    v = _verdict(_d(12, 0.03), checks=[bad])
    assert v.decision == "fail" and "k_match" in v.reason
    assert v.lines()[-1] == "  [FAIL] matched_budget/k_match: K mismatch"


def test_a_plan_without_max_seeds_looks_up_to_the_seeds_it_lists():
    open_ended = {**DESIGN, "max_seeds": None}
    v = _verdict(np.array([0.001, -0.001] * 4), design=open_ended, order=list(range(8)),
                 min_effect=0.0)
    assert v.looks == (2, 4, 6, 8) and v.decision == "exhausted"


def test_the_document_gives_every_claim_a_verdict_in_the_plans_seed_order():
    order = [5, 2, 7, 0, 1, 3, 4, 6, 8, 9, 10, 11]
    d = _d(12, 0.02, seed=3)
    doc = _doc([_claim(*_from_d(d)), _claim(*_from_d(d), policy="other")], order=order,
               planned=(("r", "pol"), ("r", "other")))
    verdicts = sequential_verdicts(doc, PROTO, "matched_budget")
    assert [(v.policy, v.seeds, v.claims) for v in verdicts] == [("pol", order, 2),
                                                                 ("other", order, 2)]
    assert verdicts[0].d == pytest.approx([d[s] for s in order])


def test_a_document_without_a_sequential_design_is_refused_with_the_reason():
    doc = {"design": {"sequential": None, "seed_order": [0, 1],
                      "why_not": "the plan's design is 'fixed', not sequential"},
           "claims": [_claim([0.1], [[0.2]])]}
    (v,) = sequential_verdicts(doc, PROTO, "matched_budget")
    assert (v.decision, v.exit_code) == ("refused", 1)
    assert v.reason == "no sequential verdict: the plan's design is 'fixed', not sequential"


@pytest.mark.parametrize("drop", ["design", "units"])
def test_a_document_without_the_design_or_the_units_is_bad_input(drop):
    doc = _doc([_claim([0.1], [[0.2]])], order=[0])
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
    assert plan["design"] == {"kind": "sequential", "alpha": 0.05, "max_seeds": 12, "batch": 2,
                              "spending": "obrien-fleming", "gamma": None}
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


def test_a_plan_edited_to_spend_alpha_earlier_fails_the_gate(tmp_path):
    # the judged party rewrites plan.json after its runs, from O'Brien-Fleming to a
    # Pocock-like Hwang-Shih-DeCani: every run carries the frozen plan's sha256, so the edited
    # plan is not the one the runs were swept under and the gate fails on plan_rules
    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN)
    runs = tmp_path / "runs"
    res = _invoke(["sweep", str(camp), "--out", str(runs), "--until-decided", "--max-seeds", "4",
                   "--no-progress"])
    assert res.exit_code == 0, res.output
    plan = json.loads((runs / "plan.json").read_text())
    assert plan["design"]["spending"] == "obrien-fleming"
    plan["design"].update(spending="hwang-shih-decani", gamma=1.0)
    (runs / "plan.json").write_text(json.dumps(plan, indent=2))
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 1 and "[FAIL] matched_budget/plan_rules" in gate.output, gate.output
    assert "sequential PASS" not in gate.output
    # a first look moved past the seeds run: the failed plan_rules ends it (exit 1), where
    # "continue" (exit 4) asked a CI loop for seeds that cannot mend it
    plan["design"]["first_look"] = 12
    (runs / "plan.json").write_text(json.dumps(plan, indent=2))
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 1 and "sequential FAIL" in gate.output, gate.output
    assert "plan_rules" in gate.output.splitlines()[0]
    # a design value of another type: exit 2 naming the plan.json and its key
    plan["design"]["first_look"] = "twelve"
    (runs / "plan.json").write_text(json.dumps(plan, indent=2))
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 2, gate.output
    assert str(runs / "plan.json") in gate.output and "design.first_look" in gate.output
    # the futility rule changed after the runs (a "stop: not better" the judged party dislikes
    # undone by a laxer rule, or the reverse): the same stamp fails plan_rules
    del plan["design"]["first_look"]
    plan["design"].update(spending="obrien-fleming", gamma=None, futility="rising")
    (runs / "plan.json").write_text(json.dumps(plan, indent=2))
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 1 and "[FAIL] matched_budget/plan_rules" in gate.output, gate.output
    # an unknown rule: exit 2 naming the plan.json and its key
    plan["design"]["futility"] = "lenient"
    (runs / "plan.json").write_text(json.dumps(plan, indent=2))
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 2, gate.output
    assert str(runs / "plan.json") in gate.output and "design.futility" in gate.output


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
    # the group-sequential test passes at look 4 (8 seeds: t 3.48 >= boundary 3.42): the
    # calibrated policy's runs are less variable than a typical draw, so its floor is its own
    # spread's and does not bind (held to one whole draw, the floor kept t at 3.23)
    assert res.exit_code == 0 and "decided after 8 of at most 12 seeds" in res.output, \
        res.output
    assert "t 3.48 vs 3.42 at 8 seeds" in res.output
    assert not (runs / "seqdemo__no_sync__s8").exists()           # never ran
    gate = _invoke(["gate", str(runs), "--policy", "calibrated_offline", "--sequential"])
    assert gate.exit_code == 0 and "sequential PASS" in gate.output


def test_the_futility_bound_defaults_to_the_protocols_smallest_effect():
    from evalkit.audit.protocol import load_protocol
    from evalkit.audit.sequential import protocol_min_effect

    proto = load_protocol()
    assert protocol_min_effect(proto) == proto.checks["gain_significant"].params["min_effect"]
    assert protocol_min_effect(proto) == 0.005


def test_the_documents_design_names_every_planned_claim_with_runs_or_not(monkeypatch):
    from types import SimpleNamespace

    from evalkit.audit import design as audit_design

    runs = [{"regime": "r", "policy": p, "role": "matched_random", "matched_to": p}
            for p in ("pol", "lost1", "lost2")] + [{"regime": "r", "policy": "pol",
                                                     "role": "policy", "matched_to": None}]
    plan = {"design": {"kind": "sequential", "alpha": 0.05, "max_seeds": 12, "batch": 2},
            "campaign": {"settings": {"seeds": [3, 1, 2]}}, "runs": runs}
    monkeypatch.setattr(audit_design, "read_plan", lambda runs_dir: plan)
    got = audit_design.planned_design(SimpleNamespace(has_logs=True, runs_dir="runs"))
    assert got["seed_order"] == [3, 1, 2]
    assert got["sequential"]["planned_claims"] == [["r", "lost1"], ["r", "lost2"], ["r", "pol"]]


# --------------------------------------------------------------------------- first look

def test_a_first_look_moves_the_first_look_and_keeps_the_batch_after_it():
    from evalkit.audit.sequential import planned_looks

    order = list(range(20))
    assert planned_looks({"max_seeds": 20, "batch": 1}, order)[:3] == (2, 3, 4)
    assert planned_looks({"max_seeds": 20, "batch": 1, "first_look": 4}, order) == tuple(
        range(4, 21))
    assert planned_looks({"max_seeds": 20, "batch": 5, "first_look": 8}, order) == (8, 13, 18,
                                                                                    20)
    assert planned_looks({"max_seeds": 12, "batch": 4, "first_look": None}, order) == (4, 8, 12)
    assert planned_looks({"max_seeds": 12, "batch": 4, "first_look": 12}, order) == (12,)


def test_a_plan_with_a_first_look_continues_until_it_and_decides_on_its_looks():
    design = {**DESIGN, "batch": 1, "first_look": 5}
    d = _d(12, 0.03)
    early = verdict_for(_claim(*_from_d(d[:4])), PROTO, "matched_budget", design,
                        list(range(12)), 1, MIN_EFFECT)
    assert early.decision == "continue" and "the first look is at 5" in early.reason
    v = _verdict(d, design=design)
    assert v.looks == tuple(range(5, 13)) and v.decision == "pass"
    assert v.seeds_used in v.looks and v.seeds_used >= 5


def test_a_recorded_first_look_below_2_is_bad_input():
    doc = _doc([_claim(*_from_d(_d(12, 0.03)))], design={**DESIGN, "first_look": 1})
    with pytest.raises(InputError) as err:
        sequential_verdicts(doc, PROTO, "matched_budget")
    assert err.value.column == "design.sequential.first_look"


def test_a_plan_naming_the_rising_futility_rule_stops_where_zero_would_go_on():
    # 12 seeds, looks at 2, 4, ..., 12: at 4 seeds the rising bound is z = 0.083 (t 0.091), so
    # a mean gain barely above min_effect (t 0.037) ends the campaign "not better" there; under
    # the default rule ("zero", t < 0) it runs on
    d = MIN_EFFECT + 0.004 * np.array([0.9, -0.6, 0.4, -0.5, 0.8, -0.7, 0.5, -0.4, 0.6, -0.5,
                                       0.7, -0.6])
    rising = _verdict(d[:6], design={**DESIGN, "futility": "rising"})
    zero = _verdict(d[:6], design=DESIGN)
    assert rising.decision == "stop: not better" and rising.seeds_used == 4, rising.reason
    assert zero.decision == "continue", zero.reason
    assert rising.futility == "rising" and zero.futility == "zero"
    bound = rising.result.looks[-1].futility
    assert f"fell below the futility bound {bound:.4g}" in rising.reason
    assert any("z < -0.75 + 2.5 t" in line for line in rising.lines())
    assert any("non-binding futility at t < 0" in line for line in zero.lines())
