"""The level_trend diagnostic (evalkit/audit/level_trend.py) against scipy's least squares, its
rate without a trend, and the assumptions the verdict states for a gain that rests on rare
seeds: a policy worse in heavy seeds, and a left-skewed d that Cochran's rule finds too few
seeds for."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats as sps

import evalkit
from evalkit.audit.level_trend import MIN_SEEDS, level_trend
from evalkit.audit.sequential import look_floor_state, verdict_for
from evalkit.audit.verdicts import assumption_sentences
from evalkit.document.words import COCHRAN_FACTOR, SMALL_N, cochran_text, shape_text
from evalkit.stats.floored import LOG_OFFSET
from evalkit.stats.paired import sample_skewness
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


def test_slope_its_error_and_p_are_scipys_least_squares():
    rng = np.random.default_rng(3)
    for n in (4, 9, 30):
        for _ in range(5):
            draws = [rng.gamma(2.0, 0.02, 3) for _ in range(n)]
            policy = rng.gamma(2.0, 0.02, n)
            res = level_trend(policy, draws, 0.05)
            offset = LOG_OFFSET * float(np.mean(np.concatenate(draws)))
            x = np.array([np.log(d + offset).mean() for d in draws])
            ref = sps.linregress(x, np.log(policy + offset) - x)
            assert res.slope == pytest.approx(ref.slope, rel=1e-9, abs=1e-12)
            assert res.se == pytest.approx(ref.stderr, rel=1e-9)
            one_sided = ref.pvalue / 2 if ref.slope > 0 else 1 - ref.pvalue / 2
            assert res.p_value == pytest.approx(one_sided, rel=1e-7, abs=1e-12)
            assert res.flagged == (ref.slope > 0 and one_sided <= 0.05)


def test_the_flag_is_at_alpha_inclusive():
    rng = np.random.default_rng(4)
    level = 0.05 * _lognormal(rng, 0.6, 12)
    draws = [lv * _lognormal(rng, 0.35, 3) for lv in level]
    policy = 0.05 * (level / 0.05) ** 1.3 * _lognormal(rng, 0.35, 12)
    p = level_trend(policy, draws, 0.05).p_value
    assert 0 < p < 0.5
    assert level_trend(policy, draws, p).flagged                       # p == alpha
    assert not level_trend(policy, draws, math.nextafter(p, 0.0)).flagged
    assert level_trend(policy, draws, math.nextafter(p, 1.0)).flagged


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


def test_the_quarters_gains_are_shares_of_their_draws_v():
    # 8 seeds: levels 1..8 (one draw each at the level), policy 0.5 x level in the light
    # seeds and 1.5 x level in the heavy ones; a quarter is 2 seeds
    levels = np.arange(1.0, 9.0)
    policy = np.where(levels <= 4, 0.5, 1.5) * levels
    res = level_trend(policy, [np.array([v]) for v in levels], 0.05)
    assert res.quarter == 2
    assert res.light_gain == pytest.approx(((1 + 2) - 0.5 * 3) / 3)
    assert res.heavy_gain == pytest.approx(((7 + 8) - 1.5 * 15) / 15)
    assert res.slope > 0 and res.flagged
    text = res.sentence()
    assert "rises with the seed's level" in text
    assert "-50% of the draws' V over the 2 heaviest seeds and 50% over the 2 lightest" in text


def test_too_few_seeds_or_one_level_or_no_violations_state_nothing():
    few = level_trend([1.0] * (MIN_SEEDS - 1), [np.array([1.0, 2.0])] * (MIN_SEEDS - 1), 0.05)
    assert few.slope is None and not few.flagged and few.sentence() == ""
    flat = level_trend([0.5, 1.0, 1.5, 2.0], [np.array([1.0, 3.0])] * 4, 0.05)
    assert flat.slope is None and flat.sentence() == ""
    # levels a millionth apart (float noise in a replayed trace's V) are one level too
    rounded = level_trend([0.05, 0.06, 0.04, 0.05, 0.07, 0.05],
                          [np.full(3, 0.05 * (1 + 1e-6 * k)) for k in range(6)], 0.05)
    assert rounded.slope is None and not rounded.flagged
    # a policy run equal to its seed's one draw everywhere: a flat line, no residual, p = 1
    same = level_trend([0.01, 0.02, 0.04, 0.08], [np.array([v]) for v in (0.01, 0.02, 0.04,
                                                                            0.08)], 0.05)
    assert same.slope == 0.0 and same.se == 0.0 and same.p_value == 1.0 and not same.flagged
    zero = level_trend([0.0] * 5, [np.zeros(3)] * 5, 0.05)
    assert zero.slope is None and zero.heavy_gain is None and not zero.flagged


def test_without_a_trend_the_flag_errs_towards_silence():
    """One more draw or a fixed schedule at widely spread seed levels: the flag fires in at
    most alpha of campaigns (each seed's draw noise pulls the slope negative)."""
    rng = np.random.default_rng(8)
    for policy_sd in (0.8, 0.05):
        flags = 0
        for _ in range(400):
            level = 0.05 * _lognormal(rng, 0.6, 10)
            draws = [lv * _lognormal(rng, 0.8, 3) for lv in level]
            policy = level * _lognormal(rng, policy_sd, 10)
            flags += level_trend(policy, draws, 0.05).flagged
        assert flags / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_runs_at_zero_in_light_seeds_do_not_make_a_trend():
    """Exchangeable binomial V (100 requests a run, 5 draws, seed log-spread 1, 20 seeds):
    light seeds' single runs hit 0 far more often than their draws' mean does; read against
    the mean, the flag fired in 0.12 of campaigns, against single draws it stays within
    alpha."""
    rng = np.random.default_rng(12)
    flags = 0
    for _ in range(400):
        level = np.minimum(0.0654 * _lognormal(rng, 1.0, 20), 1.0)
        draws = [rng.binomial(100, np.minimum(1.0, lv * _lognormal(rng, 0.35, 5))) / 100
                 for lv in level]
        policy = rng.binomial(100, np.minimum(1.0, level * _lognormal(rng, 0.35, 20))) / 100
        flags += level_trend(policy, draws, 0.05).flagged
    assert flags / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


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
    assert trend.flagged and trend.sentence() in head
    assert trend.sentence() in result.assumptions
    claim = audit_campaign_dict(table)["claims"][0]
    assert claim["level_trend"]["flagged"] is True
    assert claim["level_trend"]["blocking"] is False
    assert claim["level_trend"]["slope"] == pytest.approx(trend.slope)
    assert trend.sentence() in claim["notes"]


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
    assert trend.flagged and claim["level_trend"]["sentence"] == trend.sentence()
    shape = cochran_text(sample_skewness(_seq_d(units)), 40)
    assert verdict.assumptions == [trend.sentence()] + ([shape] if shape else [])
    assert verdict.assumptions == claim["assumptions"]    # same seeds: the fixed gate's words
    assert f"  assumption: {trend.sentence()}" in verdict.lines()


def test_a_sequential_pass_on_fewer_seeds_states_the_shape_of_the_seeds_it_used():
    table, units = trend_campaign(20)
    claim, verdict = _sequential(table)
    assert verdict.decision == "pass" and verdict.seeds_used == 30
    trend = claim["level_trend"]
    assert trend["flagged"]
    head = f"over the document's 40 seeds (the decision used the first 30): {trend['sentence']}"
    shape = cochran_text(sample_skewness(_seq_d(units)[:30]), 30)
    assert verdict.assumptions == [head] + ([shape] if shape else [])


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
@pytest.mark.parametrize("edit, column", [("drop", ""), ("string", ""),
                                          ("no sentence", ".sentence")])
def test_a_document_without_its_diagnostics_is_refused_by_the_sequential_gate(key, edit,
                                                                              column):
    from evalkit.audit.gate import check_fresh
    from evalkit.document.schema import check_shape
    from evalkit.errors import InputError

    def read_as_the_gate(doc):          # load_audit's shape check, then the gate's
        check_shape(doc, "audit.json")
        check_fresh(doc, "audit.json", proto, 0, sequential=True)

    table, _ = trend_campaign(22)
    doc = audit_campaign_dict(table)
    proto = evalkit.load_protocol(None).with_accept_vouched(True)
    read_as_the_gate(copy.deepcopy(doc))                                   # as written
    claim = doc["claims"][0]
    if edit == "drop":
        del claim[key]
    elif edit == "string":
        claim[key] = "flagged"
    else:
        del claim[key]["sentence"]
    with pytest.raises(InputError) as err:
        read_as_the_gate(doc)
    assert err.value.column == f"claims[0].{key}{column}"
