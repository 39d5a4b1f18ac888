"""The claim both gates print is tested on the mean of d over seeds (issue 32): power where the
within-seed relabelling had none, no "worse" from a test whose false "worse" rate is too high,
the tail_luck diagnostic in words, and ``evalkit.gate`` equal to the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import evalkit
from evalkit.audit.result import audit_campaign
from evalkit.cli.main import cli
from evalkit.document import words
from evalkit.document.words import p_value, pp, tail_luck_text
from evalkit.stats.floored import floored_mean_test
from evalkit.stats.paired import paired_mean_test
from evalkit.stats.randomisation import within_seed_permutation_test
from evalkit.stats.tail_luck import tail_luck

BASE_V = 0.0654                 # the paper's no-sync-relative violation rate
BURST, BURST_SHARE = 4.0, 0.1   # x4 on 10% of runs (the inference study's bursty V)


def _burst_draws(rng, m: int) -> np.ndarray:
    """m draws of lognormal 0.35 run noise with bursts (x4 on 10%), mean BASE_V."""
    draws = BASE_V * np.exp(rng.normal(-0.35 ** 2 / 2, 0.35, m))
    return np.round(draws * np.where(rng.random(m) < BURST_SHARE, BURST, 1.0)
                    / (1 + BURST_SHARE * (BURST - 1)), 6)


def _summary_table(units) -> pd.DataFrame:
    """The summary table of (policy V, draws V) per seed: policy wa against matched random."""
    rows = []
    for s, (policy, draws) in enumerate(units):
        common = dict(seed=s, regime="bursty", K=6, oracle="false")
        rows.append(dict(policy="wa", violation_rate=policy, no_sync_violation_rate=0.05,
                         **common))
        rows += [dict(policy="matched_random", violation_rate=float(v),
                      no_sync_violation_rate=None, **common) for v in draws]
    return pd.DataFrame(rows)


def bursty_campaign(seed: int, n: int, m: int, effect: float) -> tuple[pd.DataFrame, list]:
    """A summary table: per seed a fixed-schedule policy run (sd 0.05 on the log scale) and m
    matched-random draws of lognormal 0.35 run noise with bursts; the draws' mean is BASE_V,
    the policy's BASE_V x (1 - effect).  Returns the table and (policy V, draws V) per seed."""
    rng = np.random.default_rng(seed)
    units = []
    for _ in range(n):
        draws = _burst_draws(rng, m)
        policy = round(BASE_V * (1 - effect) * float(np.exp(rng.normal(0, 0.05))), 6)
        units.append((policy, draws))
    return _summary_table(units), units


@pytest.fixture(scope="module")
def better():
    """Policy 22% better on bursty V, n 20, m 5 (the inference study's cell)."""
    return bursty_campaign(0, n=20, m=5, effect=0.22)


@pytest.fixture(scope="module")
def equal():
    """Equal means, fixed schedule, bursty V, n 10, m 3: a campaign whose d is significantly
    negative (the draws' bursts pull their mean up while the policy never bursts)."""
    return bursty_campaign(10, n=10, m=3, effect=0.0)


def test_fixed_gate_finds_the_gain_the_within_seed_relabelling_misses(better):
    table, units = better
    old = within_seed_permutation_test([p for p, _ in units], [d for _, d in units],
                                       "two-sided", confidence_level=None)
    assert old.p_value > 0.05            # the relabelling test has no power here
    result = evalkit.gate(table, "wa", accept_vouched=True)
    assert result.passed and result.exit_code == 0 and result.direction == "better"
    d = np.array([d.mean() - p for p, d in units])
    floored = floored_mean_test([p for p, _ in units], [x for _, x in units], "two-sided")
    assert result.p_value == pytest.approx(floored.p_value, rel=1e-9)
    assert result.effect == pytest.approx(d.mean(), abs=1e-12)


def test_tail_luck_is_stated_in_the_verdict_of_a_bursty_gain(better):
    table, _ = better
    result = evalkit.gate(table, "wa", accept_vouched=True)
    head = result.lines[1]
    assert "caught none of the draws' tail (q = " in head
    assert "the gain rests on the policy avoiding the tail by design" in head
    assert "more seeds make luck < alpha" in head


def test_equal_means_fixed_schedule_bursty_is_not_called_worse(equal):
    table, units = equal
    d = np.array([d.mean() - p for p, d in units])
    test = paired_mean_test(d, "two-sided")
    assert test.p_value <= 0.05 and test.mean < 0    # significant, negative
    result = evalkit.gate(table, "wa", accept_vouched=True)
    assert not result.passed and result.direction == "not shown"
    text = "\n".join(evalkit.gate(table, "wa", accept_vouched=True).lines)
    assert "worse" not in text.lower().replace("false 'worse'", "").replace("no 'worse'", "")


def test_worse_is_named_only_from_a_decision_measured_within_its_size(equal, monkeypatch):
    table, _ = equal
    doc = audit_campaign_dict(table)
    check = next(c for c in doc["claims"][0]["checks"] if c["name"] == "gain_significant")
    assert "not better than matched random" in check["found"] and "WORSE" not in check["found"]
    # the words follow the measured rate: a decision within 1.5 x nominal names the side
    monkeypatch.setattr(words, "CLAIM_TEST_FALSE_WORSE", 0.03)
    assert words.worse_words() == "significantly WORSE than matched random"
    assert words.gain_words(words.WORSE) == "significantly WORSE than matched random"


def audit_campaign_dict(table: pd.DataFrame) -> dict:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "summary.csv"
        table.to_csv(path, index=False)
        proto = evalkit.load_protocol(None).with_accept_vouched(True)
        return audit_campaign(path, protocol=proto).decision_dict()


def test_claim_numbers_are_the_paired_mean_test_and_exchangeability_is_a_diagnostic(better):
    table, units = better
    doc = audit_campaign_dict(table)
    claim = doc["claims"][0]
    d = np.array([d.mean() - p for p, d in units])
    paired = floored_mean_test([p for p, _ in units], [x for _, x in units], "two-sided")
    assert paired.mean == pytest.approx(d.mean(), abs=1e-12)
    assert claim["p_two_sided"] == pytest.approx(paired.p_value, rel=1e-9)
    assert claim["ci"] == pytest.approx(list(paired.ci), rel=1e-9)
    assert claim["method"] == f"{paired.method} ({paired.reference})"
    assert claim["test"] == "draw-floored t-test"
    assert claim["floor"]["floor_binds"] == paired.floor_binds
    exch = claim["exchangeability"]
    assert exch["blocking"] is False and exch["p_two_sided"] > 0.05
    assert claim["tail_luck"]["flagged"] is True and claim["tail_luck"]["blocking"] is False


def test_api_equals_the_cli_on_the_same_table(better, tmp_path):
    table, _ = better
    path = tmp_path / "summary.csv"
    table.to_csv(path, index=False)
    result = evalkit.gate(path, "wa", accept_vouched=True)
    frame = evalkit.gate(table, "wa", accept_vouched=True)
    res = CliRunner().invoke(cli, ["gate", str(path), "--policy", "wa", "--accept-vouched"])
    assert res.exit_code == result.exit_code == frame.exit_code == 0
    assert res.output.splitlines() == result.lines == frame.lines
    assert result.passed is True and result.tier_reached == "matched_budget"
    g = (f"G = {pp(result.effect)} pp [{pp(result.ci[0])}, {pp(result.ci[1])}] (95% CI); "
         f"p = {p_value(result.p_value)}")
    assert g in res.output
    assert result.seeds_used is None


def test_api_refuses_an_unknown_policy_like_the_cli(better):
    from evalkit.errors import InputError

    with pytest.raises(InputError):
        evalkit.gate(better[0], "nope", accept_vouched=True)


# ----------------------------------------------------------------- tail_luck on its own

def test_tail_luck_flags_a_policy_that_missed_the_tail_by_what_may_be_luck():
    draws = [np.array([1.0, 1.1, 0.9, 5.0]), np.array([1.0, 1.05, 0.95, 1.02]),
             np.array([1.0, 0.9, 1.1, 1.0])]
    res = tail_luck([0.8, 0.8, 0.8], draws, alpha=0.05)
    assert res.draws_in_tail == 1 and res.q == pytest.approx(1 / 12)
    assert res.chance == pytest.approx((11 / 12) ** 3) and res.flagged
    assert res.more_seeds == int(np.ceil(np.log(0.05) / np.log(11 / 12))) - 3
    assert f"about {res.more_seeds} more seeds" in tail_luck_text(res)
    caught = tail_luck([5.0, 0.8, 0.8], draws, alpha=0.05)
    assert caught.policy_in_tail == 1 and not caught.flagged
    calm = tail_luck([0.8, 0.8], draws[1:], alpha=0.05)
    assert calm.q is None and not calm.flagged and tail_luck_text(calm) == ""


def test_a_gain_on_few_seeds_states_what_the_mean_test_assumes():
    table, units = bursty_campaign(1, n=10, m=5, effect=0.5)
    result = evalkit.gate(table, "wa", accept_vouched=True)
    d = np.array([d.mean() - p for p, d in units])
    g1 = paired_mean_test(d).skewness
    assert result.passed
    test = floored_mean_test([p for p, _ in units], [x for _, x in units], "two-sided")
    skews = [f"{who} skew (c = {c:.2g})" for who, c in
             (("the policy's", test.better_skew_term), ("the draws'", test.skew_term)) if c > 0]
    assert skews    # bursty draws: the worse side's end carries their skew
    assert test.reference == (f"t, 9 df with Cornish-Fisher ends for {' and '.join(skews)}; "
                              f"{test.floor_state}")
    assert (f"with 10 seeds the mean test assumes a policy run is at least as variable as one "
            f"more draw of its seed unless its runs show otherwise ({test.floor_state}) and d "
            f"has no long "
            f"tail of seeds where the policy is much worse (sample skewness g1 = "
            f"{words.num(g1, 3)})") in result.lines[1]
    many = evalkit.gate(bursty_campaign(0, n=20, m=5, effect=0.22)[0], "wa", accept_vouched=True)
    assert "the mean test assumes" not in many.lines[1]


def lucky_exchangeable_campaign(seed: int, n: int = 10, m: int = 5):
    """Equal means: the policy is one more draw of bursty V whose n runs caught no burst (a
    third of such campaigns at n = 10).  Returns the summary table and (policy, draws)."""
    rng = np.random.default_rng(seed)
    units = []
    scale = 1 + BURST_SHARE * (BURST - 1)
    for _ in range(n):
        draws = _burst_draws(rng, m)
        policy = round(BASE_V * float(np.exp(rng.normal(-0.35 ** 2 / 2, 0.35))) / scale, 6)
        units.append((policy, draws))
    return _summary_table(units), units


def test_an_exchangeable_policy_that_missed_every_burst_does_not_pass():
    # the red-team campaign of the floor: equal means, the policy's 10 runs caught none of the
    # bursts its 50 draws show; the sign flip on d (the gate's test before the floor) passes it
    fooled = []
    for seed in range(200):
        table, units = lucky_exchangeable_campaign(seed)
        d = np.array([x.mean() - p for p, x in units])
        if paired_mean_test(d, "two-sided").p_value <= 0.05 and d.mean() >= 0.005:
            fooled.append((table, units))
        if len(fooled) == 3:
            break
    assert len(fooled) == 3
    for table, units in fooled:
        result = evalkit.gate(table, "wa", accept_vouched=True)
        assert not result.passed and result.direction == "not shown"
        test = floored_mean_test([p for p, _ in units], [x for _, x in units], "two-sided")
        assert test.floor_binds and test.p_value > 0.05
        assert result.p_value == pytest.approx(test.p_value, rel=1e-9)
