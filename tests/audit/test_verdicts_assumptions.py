"""The assumptions a verdict states for a gain that rests on rare seeds: a policy worse in heavy
seeds (the level_trend diagnostic, evalkit/stats/level_trend.py, in the audit and in a
sequential pass, computed on the seeds the decision used), and a left-skewed d that Cochran's
rule finds too few seeds for."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats as sps

import evalkit
from evalkit.audit.sequential import look_floor_state, verdict_for
from evalkit.audit.verdicts import assumption_sentences
from evalkit.document.words import (COCHRAN_FACTOR, SMALL_N, cochran_text, level_trend_text,
                                    shape_text, tail_luck_text)
from evalkit.stats.level_trend import level_trend
from evalkit.stats.paired import sample_skewness
from evalkit.stats.tail_luck import tail_luck
from tests.audit.test_claims_seed_level_test import (_summary_table, audit_campaign_dict,
                                                     bursty_campaign)
from tests.audit.test_sequential_gate import PROTO, _d, _verdict


def _lognormal(rng, sigma, size=None):
    return np.exp(rng.normal(-sigma ** 2 / 2, sigma, size))


def trend_campaign(seed: int, n: int = 40, seed_sd: float = 1.0) -> tuple:
    """Per seed a level (lognormal seed_sd, clipped at 2.2 sd so that V stays a share), 3
    draws of lognormal 0.35 run noise at it, and a policy run growing as the level^1.5 (the
    same mean over seeds up to the clip): better in light seeds, much worse in heavy ones."""
    rng = np.random.default_rng(seed)
    units = []
    for _ in range(n):
        z = float(np.clip(rng.normal(0.0, seed_sd), -2.2 * seed_sd, 2.2 * seed_sd))
        level = 0.04 * math.exp(z - seed_sd ** 2 / 2)
        draws = np.round(level * _lognormal(rng, 0.35, 3), 6)
        policy = round(0.04 * math.exp(1.5 * z - (1.5 * seed_sd) ** 2 / 2)
                       * float(_lognormal(rng, 0.35)), 6)
        units.append((policy, draws))
    return _summary_table(units), units


def _campaign(seed: int, n: int, v0: float, seed_sd: float, policy_of) -> tuple:
    """Per seed a level (lognormal seed_sd around v0), 3 draws of lognormal 0.35 run noise at
    it and the policy run ``policy_of(rng, level)``."""
    rng = np.random.default_rng(seed)
    units = []
    for _ in range(n):
        level = v0 * math.exp(rng.normal(0.0, seed_sd))
        draws = np.round(level * _lognormal(rng, 0.35, 3), 6)
        units.append((round(policy_of(rng, level), 6), draws))
    return _summary_table(units), units


def rare_worse_campaign(seed: int, n: int = 40) -> tuple:
    """Equal means: the policy at 0.5x its draws' level in 90% of seeds and 5.5x in 10%."""
    return _campaign(seed, n, 0.0654, 0.2, lambda rng, level: level * (
        5.5 if rng.random() < 0.1 else 0.5) * math.exp(rng.normal(0.0, 0.05)))


def _split(units):
    return [p for p, _ in units], [d for _, d in units]


def test_the_small_n_text_gives_way_to_cochrans_rule_at_small_n():
    from types import SimpleNamespace

    def ctx(n):
        test = SimpleNamespace(n=n, skewness=-3.0, floor_state="f")
        return SimpleNamespace(tail_luck=None, level_trend=None, paired=test, effective_n=n)
    (below,) = assumption_sentences(ctx(SMALL_N - 1))
    assert below.startswith(f"with {SMALL_N - 1} seeds the mean test assumes")
    (at,) = assumption_sentences(ctx(SMALL_N))
    assert at == cochran_text(-3.0, SMALL_N) and "(Cochran's rule)" in at
    assert assumption_sentences(ctx(250)) == []                       # 250 > 25 x 9


def test_a_policy_growing_faster_than_its_seed_level_is_flagged():
    flags = sum(level_trend(*_split(trend_campaign(s, n=40, seed_sd=0.6)[1]), 0.05).flagged
                for s in range(100))
    assert flags >= 70


def test_the_verdict_states_the_trend_when_the_gate_passes_on_it():
    table, units = trend_campaign(7)
    result = evalkit.gate(table, "wa", accept_vouched=True)
    assert result.passed                  # the mean test cannot tell it from a real gain
    head = result.lines[1]
    trend = level_trend(*_split(units), 0.05)
    assert trend.flagged and level_trend_text(trend) in head
    assert level_trend_text(trend) in result.assumptions
    claim = audit_campaign_dict(table)["claims"][0]
    assert claim["level_trend"]["flagged"] is True
    assert claim["level_trend"]["blocking"] is False
    assert claim["level_trend"]["slope"] == pytest.approx(trend.slope)
    assert level_trend_text(trend) in claim["notes"]


def test_a_left_skew_cochrans_rule_finds_too_few_seeds_for_is_stated_at_any_n():
    table, units = rare_worse_campaign(23)
    result = evalkit.gate(table, "wa", accept_vouched=True)
    assert result.passed
    d = np.array([d.mean() - p for p, d in units])
    g1 = float(sps.skew(d))
    assert g1 < 0 and len(d) < COCHRAN_FACTOR * g1 ** 2 and len(d) >= 20
    head = result.lines[1]
    assert f"these are {len(d)}" in head and "(Cochran's rule)" in head
    assert f"{COCHRAN_FACTOR * g1 ** 2:.0f} seeds" in head
    assert any("(Cochran's rule)" in x for x in result.assumptions)


def test_a_right_skewed_gain_without_a_trend_states_neither():
    table, units = bursty_campaign(0, n=20, m=5, effect=0.22)
    result = evalkit.gate(table, "wa", accept_vouched=True)
    assert result.passed
    head = result.lines[1]
    assert "Cochran" not in head and "rises with the seed's level" not in head
    (luck,) = result.assumptions             # the policy never bursts: tail_luck alone
    assert "caught none of the draws' tail" in luck and luck in head
    claim = audit_campaign_dict(table)["claims"][0]
    assert claim["level_trend"]["flagged"] is False


SEQUENTIAL = {"kind": "sequential", "alpha": 0.05, "max_seeds": 40, "batch": 10,
              "planned_claims": [["bursty", "wa"]]}


def _sequential(table):
    claim = audit_campaign_dict(table)["claims"][0]
    return claim, verdict_for(claim, PROTO, "matched_budget", SEQUENTIAL, list(range(40)), 1,
                              0.005)


def _seq_d(units):
    return np.array([d.mean() - p for p, d in units])


def test_a_sequential_pass_on_all_seeds_states_what_the_audit_states():
    table, units = trend_campaign(22)
    claim, verdict = _sequential(table)
    assert verdict.decision == "pass" and verdict.seeds_used == 40
    trend = level_trend(*_split(units), 0.05)
    assert trend.flagged and claim["level_trend"]["sentence"] == level_trend_text(trend)
    shape = cochran_text(sample_skewness(_seq_d(units)), 40)
    assert verdict.assumptions == [level_trend_text(trend)] + ([shape] if shape else [])
    assert verdict.assumptions == claim["assumptions"]    # same seeds: the fixed gate's words
    assert f"  assumption: {level_trend_text(trend)}" in verdict.lines()


def test_a_sequential_pass_on_fewer_seeds_states_the_diagnostics_of_the_seeds_it_used():
    table, units = trend_campaign(20)
    claim, verdict = _sequential(table)
    assert verdict.decision == "pass" and verdict.seeds_used == 30
    trend = level_trend(*_split(units[:30]), 0.05)
    assert trend.flagged and trend.n == 30 and claim["level_trend"]["n"] == 40
    assert trend.p_value != claim["level_trend"]["p_value"]
    shape = cochran_text(sample_skewness(_seq_d(units)[:30]), 30)
    assert verdict.assumptions == [level_trend_text(trend)] + ([shape] if shape else [])


def _bursty_sequential(seed: int):
    """A policy 30% better that never bursts, on bursty V (30 seeds of 5 draws), planned as
    looks every 5 seeds up to 30."""
    table, units = bursty_campaign(seed, n=30, m=5, effect=0.3)
    claim = audit_campaign_dict(table)["claims"][0]
    design = {**SEQUENTIAL, "max_seeds": 30, "batch": 5,
              "planned_claims": [[claim["regime"], claim["policy"]]]}
    return units, claim, verdict_for(claim, PROTO, "matched_budget", design,
                                     list(range(30)), 1, 0.005)


def test_a_sequential_pass_states_the_luck_its_own_seeds_rest_on():
    """Red team: over the document's 30 seeds random placement misses the draws' tail with
    chance <= alpha (nothing to state), over the 20 the decision used it does not: read from
    the document, the pass stated no assumption."""
    units, claim, verdict = _bursty_sequential(0)
    assert verdict.decision == "pass" and verdict.seeds_used == 20
    assert not claim["tail_luck"]["flagged"] and claim["tail_luck"]["chance"] <= 0.05
    luck = tail_luck(*_split(units[:20]), 0.05)
    assert luck.flagged and luck.n == 20 and luck.chance > 0.05
    assert verdict.assumptions[0] == tail_luck_text(luck)
    assert verdict.assumptions[0].startswith("the policy's 20 runs caught none of the draws' tail")


def test_a_small_sequential_pass_states_the_shape_of_d_with_its_looks_floor():
    d = _d(12, 0.03)
    verdict = _verdict(d)
    look = verdict.result.looks[-1]
    assert verdict.decision == "pass" and look.seeds < 12
    (shape,) = verdict.assumptions
    assert shape == shape_text(look.seeds, look_floor_state(look),
                               sample_skewness(d[:look.seeds]))
    assert shape.startswith(f"with {look.seeds} seeds the mean test assumes")
    assert f"  assumption: {shape}" in verdict.lines()


def test_a_sequential_pass_from_20_seeds_on_a_symmetric_d_states_nothing():
    design = {**SEQUENTIAL, "max_seeds": 24, "batch": 24}
    d = np.tile([-0.004, 0.004], 12) + 0.03        # g1 = 0: Cochran's rule holds
    verdict = _verdict(d, design=design)
    assert verdict.decision == "pass" and verdict.seeds_used == 24
    assert verdict.assumptions == []
    assert not any("assumption:" in line for line in verdict.lines())


def wide_policy_campaign(seed: int, n: int = 12) -> tuple:
    """A policy at 0.7x its draws' level with lognormal 0.6 run noise (draws 0.35)."""
    return _campaign(seed, n, 0.06, 0.3,
                     lambda rng, level: 0.7 * level * float(_lognormal(rng, 0.6)))


def test_the_sequential_shape_sentence_names_its_own_looks_floor_not_the_fixed_tests():
    """The fixed test's floor (its law for this policy) does not bind here while the
    sequential look's "lognormal" law binds: the sentence a sequential pass prints used to
    be the document's, naming the fixed test's floor."""
    table, units = wide_policy_campaign(9)
    claim = audit_campaign_dict(table)["claims"][0]
    design = {**SEQUENTIAL, "max_seeds": 12, "batch": 12}
    verdict = verdict_for(claim, PROTO, "matched_budget", design, list(range(12)), 1, 0.005)
    look = verdict.result.looks[-1]
    assert verdict.decision == "pass" and look.floor_binds
    (fixed,) = claim["assumptions"]
    assert "(the draws' variance floor does not bind)" in fixed
    (shape,) = verdict.assumptions
    assert "(the draws' variance floor binds at this look)" in shape
    assert f"g1 = {sample_skewness(_seq_d(units)):.3g}" in shape


def test_look_floor_state_words():
    from evalkit.stats.group_sequential import Look

    def look(floor, binds):
        return Look(seeds=4, mean=0.0, statistic=0.0, boundary=1.0, futility=None,
                    decision="continue", variance_floor=floor, floor_binds=binds)

    does_not = "the draws' variance floor does not bind at this look"
    assert look_floor_state(look(None, False)) == does_not
    assert look_floor_state(look(1e-4, False)) == does_not
    assert look_floor_state(look(1e-4, True)) == "the draws' variance floor binds at this look"


@pytest.mark.parametrize("key", ["tail_luck", "level_trend"])
@pytest.mark.parametrize("edit", ["drop", "null", "unflagged"])
def test_an_edited_diagnostic_does_not_change_what_a_sequential_pass_states(key, edit):
    """Red team: an audit.json whose flagged diagnostic is removed, set to null or marked
    unflagged (a shape the schema accepts) still gets the sentence: the gate computes the
    diagnostics from the units, as it computes d."""
    from evalkit.audit.gate import check_fresh
    from evalkit.document.schema import check_shape

    if key == "level_trend":
        table, _ = trend_campaign(22)
        claim = audit_campaign_dict(table)["claims"][0]

        def decide(c):
            return verdict_for(c, PROTO, "matched_budget", SEQUENTIAL, list(range(40)), 1,
                               0.005)
    else:
        _, claim, _ = _bursty_sequential(7)

        def decide(c):
            design = {**SEQUENTIAL, "max_seeds": 30, "batch": 5,
                      "planned_claims": [[c["regime"], c["policy"]]]}
            return verdict_for(c, PROTO, "matched_budget", design, list(range(30)), 1, 0.005)
    assert claim[key]["flagged"]
    honest = decide(copy.deepcopy(claim))
    assert honest.decision == "pass" and claim[key]["sentence"] in honest.assumptions
    if edit == "drop":
        del claim[key]
    elif edit == "null":
        claim[key] = None
    else:
        claim[key] = dict(claim[key], flagged=False)
    assert decide(claim).assumptions == honest.assumptions
    table, _ = trend_campaign(22)
    doc = audit_campaign_dict(table)                     # the gate reads such a document
    doc["claims"][0]["level_trend"] = None if edit != "unflagged" else dict(
        doc["claims"][0]["level_trend"], flagged=False)
    check_shape(doc, "audit.json")
    check_fresh(doc, "audit.json", evalkit.load_protocol(None).with_accept_vouched(True), 0,
                sequential=True)


@pytest.mark.parametrize("edit", ["string", "no sentence"])
def test_a_diagnostic_of_another_shape_is_refused_by_the_documents_schema(edit):
    from evalkit.document.schema import check_shape
    from evalkit.errors import InputError

    table, _ = trend_campaign(22)
    doc = audit_campaign_dict(table)
    check_shape(copy.deepcopy(doc), "audit.json")                          # as written
    if edit == "string":
        doc["claims"][0]["level_trend"] = "flagged"
    else:
        del doc["claims"][0]["level_trend"]["sentence"]
    with pytest.raises(InputError) as err:
        check_shape(doc, "audit.json")
    assert err.value.column.startswith("claims[0].level_trend")
