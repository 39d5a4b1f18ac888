"""Claim evaluation beyond single decisions: the evidence a ClaimContext computes, the fields
ClaimResult.to_dict reports, evaluate_claims' multiplicity, notes, tier walk and verdicts.

References are independent: p-values by enumerating every sign pattern, Holm by its step-down
formula, exclusions, wins and means by hand.

``ClaimContext``: the exact permutation limit, seeds needed from the fewest draws, arrival
fingerprints, units and informative seeds."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.checks import (calibrated, core, deployable, design, harness, inference,
                                  placement, transfer)
from evalkit.audit.claims import _verdict, ClaimResult, evaluate_claims
from evalkit.audit.context import ClaimContext
from evalkit.audit.evidence import RegimeEvidence
from evalkit.audit.protocol import load_protocol
from evalkit.audit.runset import assemble_claims, ClaimData, load_runset, SeedPair
from evalkit.document.tiers import tier_walk
from evalkit.document.words import level_trend_text
from evalkit.stats.paired import sample_skewness
from scipy import stats as sps
from tests.support.decision_stubs import claim, pair


CAMPAIGNS = Path(__file__).resolve().parents[2] / "fixtures" / "campaigns"


# ------------------------------------------------------------------------------ helpers

def _brute_p(d):
    """(p_greater, p_less, p_two_sided) of the exact sign-flip test by enumeration."""
    d = np.asarray(d, dtype=float)
    t = d.sum()
    tol = 1e-9 * np.mean(np.abs(d)) * d.size
    sums = np.array([np.dot(s, np.abs(d)) for s in itertools.product((-1, 1), repeat=d.size)])
    ge = np.mean(sums >= t - tol)
    le = np.mean(sums <= t + tol)
    return ge, le, min(1.0, 2 * min(ge, le))


def _t_p(d):
    """(p_greater, p_less, p_two_sided) of the t-test on d (scipy): the claim's test when no
    seed has 2 draws (the draws' variance floor needs them)."""
    res = {alt: sps.ttest_1samp(np.asarray(d, float), 0.0, alternative=alt).pvalue
           for alt in ("greater", "less", "two-sided")}
    return res["greater"], res["less"], res["two-sided"]


def _holm(p):
    """Holm step-down adjusted p-values by the textbook formula."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    m = p.size
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj


def _table(path, regimes, extra=None):
    """A summary table: regime -> (policy, [(v_policy, [v_draws...], v_no_sync or None)])."""
    rows = []
    for regime, (policy, seeds) in regimes.items():
        for s, (vp, vds, vns) in enumerate(seeds):
            row = {"policy": policy, "seed": s, "regime": regime, "violation_rate": vp}
            if vns is not None:
                row["no_sync_violation_rate"] = vns
            rows.append(row)
            rows += [{"policy": "matched_random", "seed": s, "regime": regime,
                      "violation_rate": v} for v in vds]
    df = pd.DataFrame(rows)
    if extra:
        df = extra(df)
    df.assign(draws_per_row=1).to_csv(path, index=False)   # each row is one replayed run
    return path


def _evaluate(path, protocol=None, **kw):
    proto = protocol or load_protocol()
    runset = load_runset(path)
    claims = assemble_claims(runset)
    return runset, evaluate_claims(runset, claims, proto, **kw)


# d values of three claims; exact binary fractions so every sum is exact
_D = {"ra": [0.25, 0.125, 0.375, -0.0625, 0.25, 0.5, 0.125],
      "rb": [0.125, -0.25, 0.0625, 0.25, -0.125, 0.375, 0.0625],
      "rc": [0.5, 0.25],                                  # exactly 2 seeds: still testable
      "rd": [0.25]}                                       # 1 seed: not testable


def _regimes(d_by_regime=_D):
    return {r: (f"p{r}", [(0.25, [0.25 + x], 0.125) for x in d])
            for r, d in d_by_regime.items()}


def test_holm_adjusts_the_testable_claims_together(tmp_path):
    path = _table(tmp_path / "t.csv", _regimes())
    _, results = _evaluate(path)
    by = {r.regime: r.to_dict() for r in results}
    raw = {r: _t_p(_D[r])[2] for r in ("ra", "rb", "rc")}
    adj = _holm([raw["ra"], raw["rb"], raw["rc"]])
    for r, a in zip(("ra", "rb", "rc"), adj):
        assert by[r]["p_two_sided"] == pytest.approx(raw[r], rel=1e-12)
        assert by[r]["p_adjusted"] == pytest.approx(a, rel=1e-12)
    assert by["rd"]["p_adjusted"] is None and by["rd"]["null_size"] is None
    # the 2-seed claim is in the family: the smallest p is multiplied by 3, not 2
    assert by["ra"]["p_adjusted"] == pytest.approx(3 * raw["ra"])


def test_no_multiplicity_or_a_single_claim_keeps_the_raw_p(tmp_path):
    path = _table(tmp_path / "t.csv", _regimes())
    proto = load_protocol()
    _, results = _evaluate(path, replace(proto, multiplicity="none"))
    for r in results[:3]:
        d = r.to_dict()
        assert d["p_adjusted"] == d["p_two_sided"]
    one = _table(tmp_path / "one.csv", _regimes({"ra": _D["ra"]}))
    _, results = _evaluate(one)
    d = results[0].to_dict()
    assert d["p_adjusted"] == pytest.approx(_t_p(_D["ra"])[2], rel=1e-12)
    # gain_significant decides on this p
    gs = next(c for c in results[0].checks if c.name == "gain_significant")
    assert f"adjusted {core._fmt(d['p_adjusted'])}" in gs.found


def test_claim_result_fields_of_a_sign_flip_claim(tmp_path):
    d = [0.25, 0.0, 0.375, -0.0625, 0.25, 0.5]                 # one exact tie: not a win
    path = _table(tmp_path / "t.csv", _regimes({"ra": d}))
    _, (res,) = _evaluate(path)
    out = res.to_dict()
    g, le, two = _t_p(d)
    assert out["regime"] == "ra" and out["policy"] == "pra" and out["baseline"] == "matched_random"
    assert out["n_seeds"] == 6 and out["seeds"] == list(range(6)) and out["effective_n"] == 6
    assert out["draws_per_seed"] == [1] * 6 and out["design_min_p"] == pytest.approx(2.0 ** -5)
    assert out["test"] == "draw-floored t-test"
    assert out["null_size"] == 2 ** 6 and out["exact"] is None      # the p is a t-test's
    assert out["method"] == ("draw-floored t-test of the mean of d (t, 5 df; no floor: no "
                             "seed has >= 2 draws)")
    assert out["floor"]["reason"].startswith("no seed has >= 2 draws")
    assert out["exchangeability"] is None and out["tail_luck"] is None   # one draw a seed
    assert out["skewness"] == pytest.approx(sample_skewness(d))
    assert out["wins"] == 4
    assert out["mean_diff"] == pytest.approx(np.mean(d))
    assert out["p_one_sided"] == pytest.approx(g) and out["p_two_sided"] == pytest.approx(two)
    assert out["min_p"] == pytest.approx(2.0 ** -4) and out["seeds_needed"] == 6
    assert len(out["ci"]) == 2 and out["ci_method"] is not None
    assert out["pseudo_replicates"] == [] and out["exclusions"] == []
    assert out["oracle"] is False and out["vouched"] == []
    assert out["tier"] == res.tier and out["verdict"] == res.verdict
    assert [c["name"] for c in out["checks"]] == [c.name for c in res.checks]
    per = pd.DataFrame(out["per_seed"])
    assert per.seed.tolist() == list(range(6))
    assert per.vex_policy.tolist() == pytest.approx([0.25 - 0.125] * 6)
    assert per.d.tolist() == pytest.approx(d)


def test_claim_result_fields_without_a_test(tmp_path):
    path = _table(tmp_path / "t.csv", _regimes({"ra": [0.25]}))
    _, (res,) = _evaluate(path)
    out = res.to_dict()
    assert res.sign_flip is None
    for key in ("null_size", "method", "ci", "ci_method", "p_one_sided", "p_two_sided",
                "p_adjusted", "exact", "min_p", "mean_diff"):
        assert out[key] is None, key
    assert out["wins"] == 0 and out["effective_n"] == 1


# ------------------------------------------------------------ to_dict on a stub context

def _pairs():
    def draws(seed, vs, exp):
        return pd.DataFrame({"run_id": [f"d{seed}-{i}" for i in range(len(vs))],
                             "violation_rate": vs, "exposure_requests": exp,
                             "draw": range(len(vs)), "k_observed": [3.0] * len(vs)})
    ns = lambda s: pd.Series({"run_id": f"ns{s}", "violation_rate": 0.125})  # noqa: E731
    return [SeedPair(0, "p0", 0.25, 3.0, None, draws(0, [0.5, 0.25], [0.5, 1.5]), ns(0)),
            SeedPair(1, "p1", 0.5, 3.0, None, draws(1, [0.25], [2.0]), None),
            SeedPair(2, "p2", 0.5, 3.0, None, draws(2, [], []), ns(2))]


def _stub_result(excluded=(), effective_n=2, checks=(), d=(0.125, -0.25)):
    pairs = _pairs()
    data = ClaimData("r", "ewma", pd.DataFrame({"run_id": ["p0", "p1", "p2"],
                                                "seed": [0, 1, 2], "oracle": [False] * 3}),
                     pairs, False)
    runs = pd.DataFrame({"run_id": ["p0", "p1", "p2"], "exposure_requests": [0.25, 0.75, 1.0]})
    sf = SimpleNamespace(null_size=4, method="m", ci_low=-1.0, ci_high=2.0, ci_method="cm",
                         p_greater=0.25, p_two_sided=0.5, exact=True, min_p=0.5)
    ctx = SimpleNamespace(effective_n=effective_n, sign_flip=sf, d=np.array(d),
                          paired=SimpleNamespace(skewness=0.0, n=effective_n, floor_state="f",
                                                 floor_dict=lambda: {}),
                          exchangeability=None,
                          tail_luck=None, level_trend=None, units=[],
                          pseudo_replicates=[(2, 0)], test_name="t",
                          draws_per_seed=np.array([2, 1]), design_min_p=0.5, p_adjusted=0.75,
                          seeds_needed=6,
                          runset=SimpleNamespace(excluded=list(excluded), runs=runs))
    return ClaimResult("r", "ewma", data, ctx, list(checks), "matched_budget", {}, "why",
                       "verdict")


def test_to_dict_lists_only_this_claims_exclusions():
    mine = [{"run_id": "a", "regime": None},                                  # unknown owner
            {"run_id": "b", "regime": "r", "role": "no_sync"},
            {"run_id": "c", "regime": "r", "role": "policy", "policy": "ewma"},
            {"run_id": "d", "regime": "r", "role": "matched_random", "matched_to": "ewma"}]
    others = [{"run_id": "e", "regime": "q", "role": "no_sync"},
              {"run_id": "f", "regime": "q", "role": "policy", "policy": "ewma"},
              {"run_id": "g", "regime": "r", "role": "policy", "policy": "wa"},
              {"run_id": "h", "regime": "r", "role": "matched_random", "matched_to": "wa"}]
    out = _stub_result(excluded=mine + others).to_dict()
    assert [e["run_id"] for e in out["exclusions"]] == ["a", "b", "c", "d"]


def test_to_dict_fields_from_the_context():
    out = _stub_result().to_dict()
    assert out["wins"] == 1 and out["mean_diff"] == pytest.approx(-0.0625)
    assert out["ci"] == [-1.0, 2.0] and out["ci_method"] == "cm" and out["null_size"] == 4
    assert out["p_one_sided"] == 0.25 and out["p_two_sided"] == 0.5
    assert out["p_adjusted"] == 0.75 and out["exact"] is None and out["min_p"] == 0.5
    assert out["method"] == "m" and out["seeds_needed"] == 6 and out["design_min_p"] == 0.5
    assert out["pseudo_replicates"] == [{"seed": 2, "same_requests_as_seed": 0}]
    assert out["n_seeds"] == 2 and out["seeds"] == [0, 1, 2]
    assert out["draws_per_seed"] == [2, 1] and out["test"] == "t"
    (small_n,) = out["assumptions"]          # below 20 seeds: what the mean test assumes
    assert small_n.startswith("with 2 seeds the mean test assumes") and "(f)" in small_n
    # exactly 2 effective seeds: the test is shown; a zero d is not a win
    out = _stub_result(d=(0.0, 0.5)).to_dict()
    assert out["wins"] == 1 and out["null_size"] == 4
    out = _stub_result(effective_n=1).to_dict()
    assert out["wins"] == 0 and out["mean_diff"] is None and out["ci"] is None
    assert out["p_adjusted"] is None and out["null_size"] is None


def test_per_seed_table_exposures_and_vex():
    table = _stub_result().per_seed()
    assert table.exposure_policy.tolist() == [0.25, 0.75, 1.0]
    assert table.exposure_mr.tolist()[:2] == [1.0, 2.0] and np.isnan(table.exposure_mr[2])
    assert table.vex_policy.tolist()[0] == 0.25 - 0.125
    assert np.isnan(table.vex_policy[1]) and table.vex_policy[2] == 0.5 - 0.125


def _chk(name, blocking, found, status=None):
    return core.Check(name, "t", not blocking, True, "e", found, "r", blocking, status=status)


def test_underpowered_needs_a_blocking_underpowered_check():
    under = core.Status.UNDERPOWERED
    assert _stub_result(checks=[_chk("a", True, "underpowered: x", under),
                                _chk("b", False, "ok")]).underpowered is True
    assert _stub_result(checks=[_chk("a", False, "underpowered: x", under),
                                _chk("b", True, "fails")]).underpowered is False
    assert _stub_result(checks=[_chk("a", True, "fails")]).underpowered is False
    # the status decides, not the prose: a failure whose text merely starts with the word
    assert _stub_result(checks=[_chk("a", True, "underpowered: x")]).underpowered is False
    assert _chk("a", True, "underpowered: x").status is core.Status.FAILED
    res = _stub_result(checks=[_chk("a", True, "x"), _chk("b", False, "y")])
    assert [c.name for c in res.failed_checks] == ["a"]


# ---------------------------------------------------------------------------- verdicts

def _vctx(stat=0.0625, lo=0.03125, hi=0.125, needed=7, explained=None, n=4, p_adj=0.5,
          design_min_p=0.01, min_p=0.01):
    from evalkit.audit.protocol import load_protocol

    ev = SimpleNamespace(_explained={("wa", 1, 0.95, 0.25): (explained, "")})
    return SimpleNamespace(
        seeds_needed=needed, claim=SimpleNamespace(policy="wa"), regime_evidence=ev,
        protocol=load_protocol(), informative_n=n, effective_n=n, design_min_p=design_min_p,
        alpha=0.05, alternative="two-sided", p_adjusted=p_adj,
        sign_flip=SimpleNamespace(statistic=stat, ci_low=lo, ci_high=hi, min_p=min_p),
        paired=None, tail_luck=None, level_trend=None)


def _explained(g_pred=0.05, lo=0.02, hi=0.08, explained=True):
    return SimpleNamespace(g_pred=g_pred, g_pred_ci=(lo, hi), explained=explained)


def test_verdict_wording_per_tier():
    proto = load_protocol()
    claim = SimpleNamespace(oracle=False)
    g = "G = +6.25 pp [+3.12, +12.50], CI above 0"
    for tier in ("matched_budget", "placement_gain", "deployable"):
        assert _verdict(tier, proto, claim, [], "", _vctx()) == (
            f"{tier}: {proto.tier(tier).claim}; {g}")
    assert _verdict("calibrated", proto, claim, [], "", _vctx(explained=_explained())) == (
        f"calibrated: {proto.tier('calibrated').claim}; {g}; psi-predicted gain G_pred = +5.00 "
        "pp [+2.00, +8.00], CI above 0")
    # the wording is the protocol's: an edited claim sentence is what the verdict says
    edited = replace(proto, tiers=tuple(replace(t, claim="scheduling wins, say the numbers")
                                        if t.name == "placement_gain" else t
                                        for t in proto.tiers))
    assert _verdict("placement_gain", edited, claim, [], "", _vctx()) == (
        f"placement_gain: scheduling wins, say the numbers; {g}")
    assert _verdict(None, proto, claim, [], "", _vctx()) == "no claim supported"
    assert _verdict("harness", proto, claim, [], "", _vctx()) == (
        f"mechanism only ({proto.tier('harness').claim}); no win over matched random")
    assert _verdict("sidecar_transfer", proto, claim, [], "", _vctx()).startswith(
        "mechanism only")
    under = [core.Check("enough_seeds", "matched_budget", False, True, "e", "underpowered: 5",
                     "r", True, status=core.Status.UNDERPOWERED)]
    # 4 seeds below the protocol's 5: the protocol rule blocks, not the attainable p
    assert _verdict("harness", proto, claim, under, "", _vctx(needed=3)) == (
        "underpowered: 4 independent seeds are below the protocol's minimum of 5 (the test "
        "itself could reach alpha with 3; smallest sign-flip p now 0.01); G = +6.25 pp "
        "[+3.12, +12.50], CI above 0: the difference is not significant (p = 0.5); no "
        "claim beyond the mechanism tiers")
    assert _verdict(None, proto, SimpleNamespace(oracle=True), under, "",
                    _vctx(n=5, needed=7, design_min_p=0.0625)) == (
        "oracle bound (never deployable): underpowered: with 5 independent seeds the smallest "
        "sign-flip two-sided p is 0.0625 > alpha = 0.05: the test needs >= 7 seeds; G = "
        "+6.25 pp [+3.12, +12.50], CI above 0: the difference is not significant (p = 0.5); "
        "no claim beyond the mechanism tiers")
    worse = _verdict("harness", proto, claim, under, "",
                     _vctx(stat=-0.04, lo=-0.06, hi=-0.02, p_adj=0.008, needed=3))
    assert "not better than matched random (a negative gain" in worse and "(p = 0.008)" in worse
    assert "significantly worse" not in worse
    assert "needs >= 3" not in worse and "minimum of 5" in worse
    # a non-blocking underpowered text does not make the verdict underpowered
    soft = [replace(under[0], blocking=False)]
    assert _verdict(None, proto, claim, soft, "", _vctx()) == "no claim supported"
    assert _verdict("deployable", proto, SimpleNamespace(oracle=True), [], "",
                    _vctx()).startswith("oracle bound (never deployable): deployable")
    broken = SimpleNamespace(seeds_needed=6, sign_flip=None)
    assert "but G n/a: no win over matched random is shown" in _verdict(
        "matched_budget", proto, claim, [], "", broken)


@pytest.mark.parametrize("tier", ["matched_budget", "placement_gain", "calibrated",
                                  "deployable"])
def test_verdict_never_claims_a_gain_the_numbers_do_not_show(tier):
    """A tier reached under an edited protocol with G < 0 (or its CI across 0): the verdict
    says so instead of "beats" or "psi-predicted gain above 0"."""
    proto = load_protocol()
    claim = SimpleNamespace(oracle=False)
    for stat, lo, hi, where in ((-0.017, -0.03, -0.004, "below"), (0.01, -0.01, 0.03,
                                                                    "across")):
        text = _verdict(tier, proto, claim, [], "",
                        _vctx(stat=stat, lo=lo, hi=hi, explained=_explained(-0.02, -0.03, -0.01)))
        assert "beats" not in text and "above 0" not in text, text
        assert f"CI {where} 0" in text and "no win over matched random is shown" in text
    # a positive gain whose psi-predicted gain is not above 0 is not "explained"
    text = _verdict("calibrated", proto, claim, [], "",
                    _vctx(explained=_explained(-0.01, -0.02, 0.01, explained=False)))
    assert "not shown to be explained by overlap" in text and \
        "G_pred = -1.00 pp [-2.00, +1.00], CI across 0" in text and \
        "above 0;" not in text.split("G_pred")[1]


def test_verdict_without_a_matched_budget_tier_and_unknown_tiers():
    from evalkit.audit.protocol import TierSpec

    proto = load_protocol()
    tiers = (TierSpec("basic", "the basic claim", False, ("not_oracle",)),
             TierSpec("extra", "the extra claim", False, ("real_sidecar",)))
    small = replace(proto, tiers=tiers)
    # no matched_budget tier: the floor is the first tier; every tier says its own claim,
    # and only with a gain the numbers show
    g = "G = +6.25 pp [+3.12, +12.50], CI above 0"
    assert _verdict("basic", small, SimpleNamespace(oracle=False), [], "",
                    _vctx()) == f"basic: the basic claim; {g}"
    assert _verdict("extra", small, SimpleNamespace(oracle=False), [], "",
                    _vctx()) == f"extra: the extra claim; {g}"
    assert "no win over matched random is shown" in _verdict(
        "extra", small, SimpleNamespace(oracle=False), [], "",
        _vctx(stat=-0.02, lo=-0.04, hi=-0.01))


# --------------------------------------------------------------------------- tier walk

def _check(name, tier, passed, evaluable=True, vouched=False):
    blocking = passed is False or (not evaluable and not vouched)
    return core.Check(name, tier, passed, evaluable, "e", f"{name} found", "r", blocking, vouched)


def _tiers(skip=()):
    from evalkit.audit.protocol import TierSpec

    return SimpleNamespace(tiers=tuple(TierSpec(n, n, n in skip, ()) for n in "abc"))


@pytest.mark.parametrize("checks, status", [
    ([("a", True), ("a", True)], "passed"),
    ([("a", True), ("a", False)], "failed"),
    ([("a", False), ("a", False)], "failed"),
    ([("a", None, False), ("a", None, False)], "not_evaluable"),
    ([("a", True), ("a", None, False)], "failed"),          # unevaluated blocker with a pass
    ([("a", False), ("a", None, False)], "failed"),
    ([("a", True), ("a", None, False, True)], "passed"),    # vouched: not blocking
    ([], "not_evaluable"),
])
def test_tier_status_rules(checks, status):
    cs = [_check(f"x{i}", *c) for i, c in enumerate(checks)]
    cs += [_check("b1", "b", False), _check("c1", "c", None, False)]   # other tiers differ
    _, got, _ = tier_walk(_tiers(), cs)
    assert got["a"] == status and got["b"] == "failed" and got["c"] == "not_evaluable"


def test_tier_walk_reason_names_the_first_blocker_of_its_own_tier():
    cs = [_check("a1", "a", True), _check("a0", "a", False), _check("b1", "b", False),
          _check("b2", "b", False), _check("b3", "b", False), _check("c1", "c", False)]
    reached, _, reason = tier_walk(_tiers(), cs)
    assert reached is None and reason == "stops before a (failed): a0: a0 found"
    cs = [_check("a1", "a", True), _check("b1", "b", True), _check("b2", "b", False),
          _check("b3", "b", False), _check("b4", "b", False), _check("c1", "c", False)]
    reached, _, reason = tier_walk(_tiers(), cs)
    assert reached == "a" and reason == "stops before b (failed): b2: b2 found (+2 more)"
    cs = [_check("a1", "a", True), _check("b1", "b", None, False), _check("b2", "b", None,
                                                                          False)]
    reached, _, reason = tier_walk(_tiers(), cs)
    assert reason == "stops before b (not evaluable): b1: b1 found (+1 more)"
    # a skippable not-evaluable tier is stepped over; a failed skippable tier is not
    reached, _, reason = tier_walk(_tiers(skip="b"), cs + [_check("c1", "c", True)])
    assert reached == "c" and reason == "every tier of the protocol is supported"
    cs = [_check("a1", "a", True), _check("b1", "b", False), _check("c1", "c", True)]
    reached, _, reason = tier_walk(_tiers(skip="b"), cs)
    assert reached == "a" and reason == "stops before b (failed): b1: b1 found"


# ------------------------------------------------------------------- evaluate_claims

def test_skipped_mechanism_tiers_do_not_block_and_max_tier_caps(tmp_path):
    path = _table(tmp_path / "t.csv", _regimes({"ra": _D["ra"]}))
    proto = replace(load_protocol(), accept_vouched=True)
    _, (res,) = _evaluate(path, proto)
    assert res.tier_status["harness"] == "not_evaluable"
    for c in res.checks:
        if c.tier in ("harness", "sidecar_transfer"):
            assert c.blocking is False and c.evaluable is False
    # a not-evaluable tier that may not be skipped keeps its blockers
    assert res.tier_status["calibrated"] == "not_evaluable"
    cal = [c for c in res.checks if c.tier == "calibrated"]
    assert cal and all(c.blocking and not c.evaluable for c in cal)
    assert res.stop_reason.startswith("stops before placement_gain (failed): load_match: not")
    _, (capped,) = _evaluate(path, proto, max_tier="matched_budget")
    assert list(capped.tier_status) == ["harness", "sidecar_transfer", "matched_budget"]
    assert {c.tier for c in capped.checks} <= {"harness", "sidecar_transfer", "matched_budget"}
    assert capped.tier == "matched_budget"
    assert capped.stop_reason == "every tier of the protocol is supported"
    _, (full,) = _evaluate(path, proto, max_tier=None)
    assert list(full.tier_status) == list(load_protocol().tier_names)


def test_notes_of_a_claim(tmp_path):
    d = [0.25, 0.125, 0.375, 0.0625, 0.25, 0.5]

    def fingerprints(df):
        fp = {0: "x", 1: "y", 2: "x", 3: "z", 4: "x", 5: "w"}
        df["arrival_fingerprint"] = df.seed.map(fp)
        df["n_requests"] = 1600
        return df
    path = _table(tmp_path / "t.csv", _regimes({"ra": d}), extra=fingerprints)
    proto = replace(load_protocol(), accept_vouched=True)
    _, (res,) = _evaluate(path, proto)
    assert res.ctx.pseudo_replicates == [(2, 0), (4, 0)]
    vouched = [c.name for c in res.checks if c.vouched]
    assert vouched and res.notes[0] == ("vouched by the user (--accept-vouched), not "
                                        "verified: " + ", ".join(vouched))
    assert res.notes[1] == ("effective n = 4 of 6 paired seeds: seeds that replay another "
                            "seed's requests count once (seed 2 = seed 0, seed 4 = seed 0)")
    assert res.notes[2] == level_trend_text(res.ctx.level_trend)    # the diagnostic, unflagged
    assert res.notes[2].startswith("level_trend: the policy's log ratio to its draws moves")
    assert res.notes[3].startswith("matched-random rows without matched_to serve every policy")
    assert res.notes[4].startswith("not pre-registered: no campaign plan")
    assert len(res.notes) == 5
    # no vouching, no duplicates: the diagnostic and the design notes
    plain = _table(tmp_path / "p.csv", _regimes({"ra": d}))
    _, (res,) = _evaluate(plain)
    assert res.notes[0].startswith("level_trend: ")
    assert res.notes[1].startswith("matched-random rows without") and len(res.notes) == 3


def test_default_seed_is_zero_for_monte_carlo_p(tmp_path):
    # 41 seeds: 2^41 sign vectors, beyond exact enumeration -> Monte Carlo
    rng = np.random.default_rng(3)
    seeds = [(0.25, list(0.25 + rng.normal(0.01, 0.05, 3)), None) for _ in range(41)]
    path = _table(tmp_path / "t.csv", {"ra": ("pra", seeds)})
    _, (default,) = _evaluate(path)
    _, (zero,) = _evaluate(path, seed=0)
    _, (one,) = _evaluate(path, seed=1)
    # the claim's p is a t-test's (no resampling); the sign-flip engine that the design
    # rules read (its smallest attainable p) is Monte Carlo with the audit's seed
    assert default.sign_flip.exact is False
    assert default.sign_flip.p_value == one.sign_flip.p_value
    ex = [r.ctx.exchangeability.p_value for r in (default, zero, one)]
    assert ex[0] == ex[1] and ex[0] != ex[2]


# ---------------------------------------------------------------- ClaimContext evidence

def _ctx_for(path, policy=None):
    runset = load_runset(path)
    claims = assemble_claims(runset)
    claim = claims[0] if policy is None else next(c for c in claims if c.policy == policy)
    proto = load_protocol()
    from evalkit.audit.transfer_evidence import TransferEvidence

    return ClaimContext(claim, runset, proto, RegimeEvidence(runset, claim.regime),
                        TransferEvidence(runset, 0, proto.bootstrap_resamples), 0)


def _load_table(tmp_path, cols, ns=(True, True, True)):
    rows = []
    for s in range(3):
        base = {"regime": "r", "seed": s}
        rows.append({**base, "policy": "wa", "violation_rate": 0.1, **cols.get("policy", {})})
        rows += [{**base, "policy": "matched_random", "violation_rate": 0.2, "draw": i,
                  **cols.get("draw", {})} for i in range(2)]
        if ns[s]:
            rows.append({**base, "policy": "no_sync", "violation_rate": 0.05,
                         **cols.get("no_sync", {})})
    path = tmp_path / "lm.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    return path


def test_load_match_table_rows_per_run_and_check(tmp_path):
    from evalkit.stats.loadmatch import DEFAULT_TOLERANCES

    rate = {"arrival_rate_achieved": 2.0, "n_requests": 100, "prompt_tokens_total": 1000,
            "output_tokens_total": 500, "step_rate": 1.5, "trainer_active_share": 0.4}
    path = _load_table(tmp_path, {"policy": rate, "draw": {**rate, "arrival_rate_achieved": 2.5},
                                  "no_sync": rate}, ns=(True, False, True))
    ctx = _ctx_for(path)
    sp = {"tolerances": {"arrival_rate_achieved": DEFAULT_TOLERANCES["arrival_rate_achieved"]}}
    table = ctx.load_match_table(sp)
    assert isinstance(table, pd.DataFrame)
    assert sorted(set(table.seed)) == [0, 2]                   # seed 1 has no no-sync run
    runs = table.drop_duplicates("run_id")
    assert runs.role.tolist() == ["policy", "matched_random", "matched_random"] * 2
    rate_rows = table[table.check == "arrival_rate_achieved"]
    assert rate_rows.passed.tolist() == [True, False, False] * 2
    assert rate_rows.found.tolist() == [2.0, 2.5, 2.5] * 2
    assert (rate_rows.expected == 2.0).all()
    assert ctx.load_match_table(sp) is table                   # cached per tolerances
    out = placement.load_match(ctx, sp)
    assert out.passed is False and "arrival_rate_achieved expected 2 found 2.5" in out.found
    assert out.found.count("seed ") == 4


def test_load_match_table_without_any_no_sync_run(tmp_path):
    rate = {"arrival_rate_achieved": 2.0}
    path = _load_table(tmp_path, {"policy": rate, "draw": rate}, ns=(False, False, False))
    out = _ctx_for(path).load_match_table({"tolerances": {"arrival_rate_achieved": 0.02}})
    assert out == "not evaluable: no seed has a no-sync run"


@pytest.mark.parametrize("cols, evaluable", [
    ({"policy": {"n_requests": 100}, "draw": {"n_requests": 100},
      "no_sync": {"n_requests": 100}}, False),                 # counts alone: not load
    ({"no_sync": {"step_rate": 1.5}}, True),                   # present in some rows is enough
])
def test_load_match_needs_a_load_column_beyond_counts(tmp_path, cols, evaluable):
    out = _ctx_for(_load_table(tmp_path, cols)).load_match_table(
        {"tolerances": {"step_rate": 0.05}})
    assert isinstance(out, pd.DataFrame) is evaluable
    if not evaluable:
        assert out.startswith("not evaluable: the summary table carries no arrival rates")


def _run_ctx():
    return _ctx_for(CAMPAIGNS / "sim_underpowered", policy="wa")


@pytest.fixture(scope="module")
def run_ctx():
    return _run_ctx()


def test_phi_table_rows_and_vex(run_ctx):
    from evalkit.stats import RequestIndex, overlap_cost

    ev = run_ctx.regime_evidence
    runs = ev.runs
    table = ev.phi_table
    others = runs[runs.role != "no_sync"]
    assert sorted(table.run_id) == sorted(others.run_id)
    assert set(table.role) == {"policy", "matched_random"}
    ns = runs[runs.role == "no_sync"].set_index("seed")
    for rec in table.itertuples(index=False):
        row = runs.set_index("run_id").loc[rec.run_id]
        assert rec.vex == pytest.approx(row.violation_rate - ns.loc[rec.seed, "violation_rate"],
                                        abs=1e-15)
        assert rec.seed == row.seed and rec.policy == row.policy
    # phi of one run, recomputed from its merges and its seed's no-sync requests
    rec = table[table.run_id == "wa-s2"].iloc[0]
    runset = run_ctx.runset
    starts = runset.columns("wa-s2", "merges", ("start_s",))["start_s"]
    req = runset.columns(ns.loc[2, "run_id"], "requests", ("arrival_s", "end_s"))
    end = np.where(np.isfinite(req["end_s"]), req["end_s"], float(ns.loc[2, "horizon_s"]))
    idx = RequestIndex(req["arrival_s"], end)
    phi = float(np.asarray(overlap_cost(starts[None, :], float(runs.set_index(
        "run_id").loc["wa-s2", "merge_duration_s"]), index=idx).phi).ravel()[0])
    assert starts.size and phi > 0 and rec.phi == pytest.approx(phi, rel=1e-12)
    assert ev.psi is not None and ev.psi_reason == ""
    assert np.all(np.isfinite(table.psi_hat))


def test_exposure_regression_needs_three_merge_runs(run_ctx, tmp_path):
    ev = run_ctx.regime_evidence
    res, reason = ev.exposure
    assert reason == "" and res.n == 20
    # the regression of V on exposure over merge runs only (no-sync runs have exposure 0)
    runs = ev.runs[ev.runs.role != "no_sync"]
    slope, intercept = np.polyfit(runs.exposure_requests.astype(float),
                                  runs.violation_rate.astype(float), 1)
    assert res.slope == pytest.approx(slope, rel=1e-9)
    for n, ok in ((2, False), (3, True)):
        rows = [{"policy": "wa", "seed": s, "violation_rate": 0.1 + 0.05 * s + 0.01 * (s == 1),
                 "exposure_requests": 0.1 * s + 0.05} for s in range(n)]
        rows += [{"policy": "no_sync", "seed": s, "violation_rate": 0.05,
                  "exposure_requests": 0.0} for s in range(n)]
        path = tmp_path / f"e{n}.csv"
        pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
        runset = load_runset(path)
        res, reason = RegimeEvidence(runset, "default").exposure
        assert (res is not None) is ok, reason
        if not ok:
            assert reason == "not evaluable: exposure needs >= 3 runs with exposure recorded"


def test_declared_design_and_meta_cache(run_ctx):
    meta = run_ctx._meta("wa-s1")
    assert meta["run_id"] == "wa-s1" and ("meta", "wa-s1") in run_ctx.runset._cache
    assert run_ctx._meta("wa-s1") is meta
    row = run_ctx.runset.row("wa-s1")
    got = run_ctx.declared_design("wa-s1")
    corridor = meta["corridor"]
    assert got == (corridor["min_gap_s"], corridor["max_gap_s"],
                   float(row["merge_duration_s"]), float(row["horizon_s"]))
    assert got[0] is not None and got[1] is not None


def test_declared_design_of_a_summary_table_has_no_corridor(tmp_path):
    rows = [{"policy": p, "seed": s, "violation_rate": 0.1, "merge_duration_s": 8.0,
             "horizon_s": 200.0} for s in range(2) for p in ("wa", "matched_random")]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    ctx = _ctx_for(path)
    run = ctx.claim.pairs[0].policy_run
    assert ctx.declared_design(run) == (None, None, 8.0, 200.0)


def _psi_stub(table, psi, reason):
    ev = RegimeEvidence.__new__(RegimeEvidence)
    ev.__dict__["_psi"] = (table, psi, reason)
    return ev


def test_explained_gain_without_psi_returns_the_reason():
    table = pd.DataFrame({"run_id": ["a"], "role": ["policy"], "policy": ["wa"], "seed": [0],
                          "phi": [1.0], "vex": [0.1]})
    ev = _psi_stub(table, None, "not evaluable: 1 runs with a same-seed no-sync run")
    claim = SimpleNamespace(policy="wa", paired=[])
    assert ev.explained_gain(claim, 100, 0, 0.95, 0.25) == (
        None, "not evaluable: 1 runs with a same-seed no-sync run")


def test_explained_gain_leaves_out_seeds_without_no_sync_and_caches():
    rng = np.random.default_rng(11)
    rows, pairs = [], []
    for s in range(6):
        ids = [f"p{s}"] + [f"d{s}-{j}" for j in range(3)]
        for j, r in enumerate(ids):
            phi = rng.uniform(0, 10) if j else rng.uniform(0, 3)
            rows.append({"run_id": r, "role": "policy" if j == 0 else "matched_random",
                         "policy": "wa", "seed": s, "phi": phi,
                         "vex": 0.01 * phi + rng.normal(0, 0.002) + (0.02 if j == 0 else 0)})
        pairs.append(SimpleNamespace(seed=s, policy_run=ids[0], draws=pd.DataFrame(
            {"run_id": ids[1:]})))
    # seed 6: its runs have no no-sync partner (not in the table); seed 7: no draw in it
    pairs.append(SimpleNamespace(seed=7, policy_run="p0x", draws=pd.DataFrame(
        {"run_id": ["d0-0"]})))
    pairs.append(SimpleNamespace(seed=6, policy_run="p1", draws=pd.DataFrame(
        {"run_id": ["zz"]})))
    table = pd.DataFrame(rows)
    ev = _psi_stub(table, SimpleNamespace(), "")
    claim = SimpleNamespace(policy="wa", paired=pairs)
    res, reason = ev.explained_gain(claim, 200, 5, 0.95, 0.25)
    assert res is not None and res.n_seeds == 6
    assert reason == "seeds 6, 7 have no same-seed no-sync run: left out"
    assert ev.explained_gain(claim, 200, 9, 0.95, 0.25)[0] is res      # cached per settings
    assert ev.explained_gain(claim, 201, 5, 0.95, 0.25)[0] is not res
    full = ev.explained_gain(SimpleNamespace(policy="wa2", paired=pairs[:6]), 200, 5, 0.95,
                             0.25)
    assert full[1] == "" and full[0].n_seeds == 6


def test_sign_flip_is_exact_up_to_its_limit():
    from evalkit.stats.randomisation import MAX_EXACT_N

    for n, exact in ((MAX_EXACT_N, True), (MAX_EXACT_N + 1, False)):
        c = ClaimContext.__new__(ClaimContext)
        c.__dict__.update(claim=SimpleNamespace(regime="r", policy="p"), seed=0,
                          alternative="greater", protocol=SimpleNamespace(n_resamples=99),
                          draws_per_seed=np.ones(n, dtype=int),
                          d=np.linspace(-0.5, 1.0, n))
        assert c.sign_flip_engine.exact is exact
        assert c.sign_flip_engine.null_size == (2 ** n if exact else 99)


# ------------------------------------------- checks: exact texts that carry the numbers

def _spec(name="check", on_not_evaluable="block", **params):
    from evalkit.audit.protocol import CheckSpec

    return CheckSpec(name, f"{name} description", on_not_evaluable, params)


def _draws(seed, ks=(3,), vs=None):
    n = len(ks)
    return pd.DataFrame({"run_id": [f"s{seed}-d{i}" for i in range(n)], "draw": range(n),
                         "k_observed": [float(k) for k in ks],
                         "violation_rate": [0.2] * n if vs is None else vs, "seed": [seed] * n})


def _pair(seed, k_policy=3.0, ks=(3,), no_sync=True):
    ns = pd.Series({"run_id": f"s{seed}-ns", "violation_rate": 0.05}) if no_sync else None
    return SeedPair(seed=seed, policy_run=f"s{seed}-pol", v_policy=0.1, k_policy=k_policy,
                    realisation=None, draws=_draws(seed, ks), no_sync=ns)


def _claim(pairs, backends=None, oracle=False):
    seeds = [p.seed for p in pairs]
    return SimpleNamespace(regime="r", policy="ewma", pairs=pairs, seeds=seeds,
                           paired=[p for p in pairs if len(p.draws)], oracle=oracle,
                           policy_runs=pd.DataFrame({"run_id": [p.policy_run for p in pairs],
                                                     "seed": seeds,
                                                     "backend": backends or ["torch"] * len(
                                                         pairs)}))


def _c(pairs=None, **kw):
    pairs = [_pair(0), _pair(1)] if pairs is None else pairs
    base = dict(claim=_claim(pairs), alpha=0.05, alternative="two-sided",
                protocol=SimpleNamespace(accept_vouched=False, multiplicity="holm"))
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("x, digits, text", [
    (0.123456, 4, "0.1235"), (0.123456, 6, "0.123456"), (12345.6, 4, "1.235e+04"),
    (None, 4, "n/a"), (float("nan"), 4, "n/a"), (float("inf"), 4, "n/a"), (2, 4, "2"),
    (0.5, 4, "0.5"), (np.float64(0.25), 4, "0.25")])
def test_fmt(x, digits, text):
    assert core._fmt(x, digits) == text
    if digits == 4:
        assert core._fmt(x) == text


@pytest.mark.parametrize("items, text", [
    (["a"] * 6, "a; a; a; a; a; a"), (["a"] * 7, "a; a; a; a; a; a (+1 more)"),
    ([], "")])
def test_listing(items, text):
    assert core._listing(items) == text


def test_run_check_recommendations():
    from evalkit.errors import NotEstimable

    core.CHECKS["_t_ne"] = lambda c, s: core.not_evaluable("e", "f", "")
    core.CHECKS["_t_ne_rec"] = lambda c, s: core.not_evaluable("e", "f", "do x")
    core.CHECKS["_t_est"] = lambda c, s: (_ for _ in ()).throw(NotEstimable("why"))
    core.CHECKS["_t_raise"] = lambda c, s: {}["k"]
    core.CHECKS["_t_pass"] = lambda c, s: core.Outcome(True, "e", "f", "keep")
    tail = "or vouch for it: --accept-vouched (the report marks the claim as vouched)"
    try:
        vouch, block = _spec(on_not_evaluable="vouch"), _spec()
        no, yes = _c(), _c(protocol=SimpleNamespace(accept_vouched=True))
        assert core.run_check("_t_ne", "t", no, vouch).recommendation == tail
        assert core.run_check("_t_ne_rec", "t", no, vouch).recommendation == "do x; " + tail
        assert core.run_check("_t_ne_rec", "t", no, block).recommendation == "do x"
        assert core.run_check("_t_ne_rec", "t", yes, vouch).recommendation == "do x"
        c = core.run_check("_t_est", "t", no, block)
        assert c.found == "cannot be estimated: why" and c.recommendation == ""
        assert c.expected == "check description" and c.blocking and c.tier == "t"
        with pytest.raises(KeyError):       # a bug in a check is never a failed check
            core.run_check("_t_raise", "t", yes, vouch)
        c = core.run_check("_t_pass", "t", SimpleNamespace(), vouch)   # no protocol: no vouching
        assert c.passed is True and not c.blocking and c.recommendation == "keep"
        c = core.run_check("_t_ne", "t", SimpleNamespace(), vouch)
        assert c.blocking and not c.vouched
        assert c.to_dict() == {"name": "_t_ne", "tier": "t", "passed": None, "evaluable": False,
                               "expected": "e", "found": "f", "recommendation": tail,
                               "blocking": True, "vouched": False,
                               "status": "not_evaluable", "values": {}}
    finally:
        for k in ("_t_ne", "_t_ne_rec", "_t_est", "_t_raise", "_t_pass"):
            core.CHECKS.pop(k)


def test_harness_baseline_texts():
    sp = _spec(harness_backends=["sim", "twin"], policies=["fixed_h", "fixed_2"])
    runs = pd.DataFrame({"backend": ["sim", "twin"], "policy": ["fixed_h", "fixed_2"],
                         "seed": [0, 1]})
    out = harness.fixed_cadence_baseline(_c(regime_runs=runs), sp)
    assert out.expected == ("a fixed-cadence baseline (fixed_h or fixed_2) replayed on sim/twin "
                            "for every seed of the policy")
    assert out.found == "present for all 2 seeds"
    out = harness.deferral_baseline(_c(regime_runs=runs.iloc[:1]), sp)
    assert out.expected.startswith("a deferral baseline")
    assert out.found == "missing for seeds 1"
    assert out.recommendation == "replay fixed_h on sim for seeds 1 in regime r"
    out = harness.deferral_baseline(_c(regime_runs=runs.iloc[:0]), sp)
    assert out.found == "no sim/twin runs in regime r: the harness tier does not apply"


def test_transfer_found_text():
    res = {"rho_real_ci": (1.1, 1.5), "gm_ratio_real_ci": (1.0, 1.2),
           "transfer_fraction_ci": (0.2, 0.9), "rho_real": 1.3, "gm_ratio_real": 1.1,
           "rho_harness": 1.6, "transfer_fraction": 0.5, "method": "paired",
           "transferred": False, "too_few_seeds": False,
           "guard_band_s": {"real": 12.5, "harness": 0.0},
           "guard_band_measured": True, "notes": ["n1", "n2"],
           "harness": {"n_runs": 3, "n_seeds": 2, "n_active": 40, "drains": True},
           "real": {"n_runs": 4, "n_seeds": 2, "n_active": 50, "drains": False}}
    out = transfer.transfer_ci_excludes_one(
        _c(runset=SimpleNamespace(has_logs=False), transfer=lambda s: res),
        _spec(mechanism="sync"))
    assert out.found == ("rho_real = 1.3 [1.1, 1.5] (mean-log ratio 1.1 [1, 1.2]), rho_harness "
                         "= 1.6, transfer fraction 0.5 [0.2, 0.9]; paired: the harness effect "
                         "did not transfer")
    assert out.expected.startswith("real-sidecar rho_s (p95")
    out = transfer.transfer_paired(
        _c(runset=SimpleNamespace(has_logs=False), transfer=lambda s: res),
        _spec(mechanism="sync"))
    assert out.found == ("harness: 3 runs over 2 seeds paired, 40 in-window requests, drain "
                         "curve at 1 from lag 0 (no post-window effect); real: 4 runs over 2 "
                         "seeds paired, 50 in-window requests, drain curve still above 1 at "
                         "12.5 s (n1; n2)")
    weak = {**res, "guard_band_measured": False, "method": "fallback"}
    out = transfer.transfer_paired(
        _c(runset=SimpleNamespace(has_logs=False), transfer=lambda s: weak),
        _spec(mechanism="sync"))
    assert out.found == ("weaker evidence only (fallback): no no-sync run to pair with, so the "
                         "post-window effect was assumed to end after 12.5 s, not measured. "
                         "n1 n2")


def test_matched_budget_texts():
    out = design.matched_random_present(_c([_pair(0, ks=(3, 3)), _pair(1)]), _spec(min_draws=2))
    assert out.found == ("missing runs: matched_random of ewma for seed 1 (3 draws in all)")
    assert out.recommendation == ("replay K-matched random draws for seeds 1 (evalkit sweep "
                                  "adds them)")
    assert out.expected == ">= 2 matched-random draw(s) matched_to ewma per seed (regime r)"
    out = design.matched_random_present(_c([_pair(0, ks=(3, 3)), _pair(1)]), _spec(min_draws=1))
    assert out.found == "3 draws over 2 seeds"
    out = design.k_match(_c([_pair(0, ks=(3, 5)), _pair(1, ks=(np.nan,))]), _spec(max_abs_diff=1))
    assert out.found == "K mismatch: seed 0: policy K = 3, draw s0-d1 K = 5"
    assert out.expected == "every draw's observed K equals the policy's K (|diff| <= 1)"
    out = design.k_match(_c([_pair(0, ks=(3, 4)), _pair(1, ks=(np.nan,))]), _spec(max_abs_diff=1))
    assert out.found == "K matches for all 2 draws (1 draws without K: vouched by the table)"
    fp = {r: ("abcdefabcdefXYZ", 10) for r in ("s0-pol", "s0-d0", "s1-pol", "s1-d0", "s1-ns")}
    out = design.pairing_real(_c(fingerprints=fp), _spec())
    assert out.found.startswith("no arrival fingerprint for 1 run(s) (e.g. s0-ns)")
    bad = {**fp, "s0-ns": ("0123456789abcdef", 11)}
    out = design.pairing_real(_c(fingerprints=bad), _spec())
    assert out.found == ("nominal pairing: seed 0: s0-ns (no_sync) replayed 11 requests with "
                         "fingerprint 0123456789ab, policy run s0-pol 10 requests abcdefabcdef")


def _complete(policy_seeds, regime_seeds, excluded=()):
    return _c([_pair(s) for s in policy_seeds], regime_runs=pd.DataFrame({"seed": regime_seeds}),
              runset=SimpleNamespace(excluded=list(excluded)))


def test_policy_runs_complete_texts():
    out = design.policy_runs_complete(_complete([0, 1], [0, 1, 1]), _spec())
    assert out.found == "2 of 2 seeds complete, nothing excluded"
    unk = [{"run_id": f"u{i}", "reason": "bad"} for i in range(5)]
    unk.append({"run_id": "v", "reason": "odd seed", "regime": "r", "seed": "x"})
    out = design.policy_runs_complete(_complete([0, 1], [0, 1], unk), _spec())
    assert out.found == ("missing results: excluded run(s) of unknown regime/seed: u0 (bad); "
                         "u1 (bad); u2 (bad); u3 (bad)")
    odd = design.policy_runs_complete(_complete([0, 1], [0, 1], unk[-1:]), _spec())
    assert odd.found.endswith("v (odd seed)")
    # a draw excluded with no draw number, an excluded draw of another policy
    exd = {"run_id": "x", "reason": "crashed", "regime": "r", "seed": 1,
           "role": "matched_random", "matched_to": None, "draw": None}
    out = design.policy_runs_complete(_complete([0, 1], [0, 1], [exd]), _spec())
    assert out.found == "missing results: seed 1: x (matched_random) excluded (crashed)"
    other = {**exd, "matched_to": "wa", "draw": 7}
    assert design.policy_runs_complete(_complete([0, 1], [0, 1], [other]), _spec()).passed is True
    # an excluded no-sync run of a seed that has none is a missing result
    c = _c([_pair(0), _pair(1, no_sync=False)], regime_runs=pd.DataFrame({"seed": [0, 1]}),
           runset=SimpleNamespace(excluded=[{**exd, "role": "no_sync"}]))
    assert design.policy_runs_complete(c, _spec()).found == (
        "missing results: seed 1: x (no_sync) excluded (crashed)")
    # an excluded policy run of a seed with no complete run: listed after the missing seed
    exp = {**exd, "seed": 2, "role": "policy", "policy": "ewma"}
    out = design.policy_runs_complete(_complete([0, 1], [0, 1], [exp]), _spec())
    assert out.found == ("missing results: seed 2: no complete ewma policy run; seed 2: x "
                         "(policy) excluded (crashed)")
    assert out.recommendation.startswith("rerun the missing or failed runs")


def _design(rows, pairs=None, has_logs=False, violations=None):
    return _c(pairs or [_pair(0)], runset=SimpleNamespace(runs=pd.DataFrame(rows),
                                                          has_logs=has_logs),
              corridor_violations=violations,
              declared_design=lambda run_id: (20.0, 80.0, 8.0, 200.0))


def test_design_check_texts():
    ids = ["s0-pol", "s0-d0"]
    out = design.schedules_in_corridor(_design({"run_id": ids, "corridor_violations": [0, 2],
                                           "corridor_note": ["", ""]}), _spec(tolerance_s=0.05))
    assert out.found == "outside F_K: seed 0 s0-d0 (matched_random): 2 violation(s)"
    out = design.schedules_in_corridor(_design({"run_id": ids, "corridor_violations": [0, np.nan]}),
                                  _spec(tolerance_s=0.05))
    assert out.found == ("no merge logs or corridor column for 1 run(s): the corridor is "
                         "vouched by the input")
    assert out.recommendation == "audit the runs directory or a table from 'evalkit summarize'"
    out = design.schedules_in_corridor(_design({"run_id": ids}), _spec(tolerance_s=0.05))
    assert out.evaluable is False and "for 2 run(s)" in out.found
    # runs of one seed declaring different designs
    c = _design({"run_id": ids, "corridor_violations": [0, 0]})
    c.declared_design = lambda r: (20.0, 80.0, 8.0, 200.0) if r == "s0-pol" else (
        10.0, 80.0, 8.0, 200.0)
    out = design.schedules_in_corridor(c, _spec(tolerance_s=0.05))
    assert out.found == ("outside F_K: seed 0: runs declare different designs (min_gap, "
                         "max_gap, D, horizon): policy (20.0, 80.0, 8.0, 200.0) vs draw "
                         "(10.0, 80.0, 8.0, 200.0)")
    c.declared_design = lambda r: (None, None, 8.0, float("nan"))       # NaN equals NaN here
    assert design.schedules_in_corridor(c, _spec(tolerance_s=0.05)).passed is True


def test_merge_duration_texts():
    def ctx(pol, draw, d=8.0, k=(3, 3)):
        return _design({"run_id": ["s0-pol", "s0-d0"], "merge_duration_median_s": [pol, draw],
                        "merge_duration_s": [d, d], "k_observed": list(k)})
    sp = _spec(rel_tol=0.25)
    out = design.merge_durations_match(ctx(12.0, 8.0), sp)
    assert out.found == ("seed 0 s0-pol: windows last 12 s, D = 8 s; seed 0: policy windows "
                         "12 s vs draws 8 s")
    assert out.expected == ("median observed merge duration of every policy and draw run "
                            "within 25% of the run's D, and the policy's within 25% of its "
                            "draws'")
    assert design.merge_durations_match(ctx(8.0, 8.0), sp).found == "2 runs with windows of D"
    # a run without merges (K = 0) has no windows and is no missing evidence
    out = design.merge_durations_match(ctx(8.0, np.nan, k=(3, 0)), sp)
    assert out.passed is True and out.found == "1 runs with windows of D"
    out = design.merge_durations_match(ctx(np.nan, np.nan, k=(0, 0)), sp)
    assert out.evaluable is False
    assert out.found == "no observed merge durations: D is vouched by the input"
    # D unknown or 0: only the policy-vs-draws comparison applies
    assert design.merge_durations_match(ctx(12.0, 12.0, d=np.nan), sp).passed is True
    assert design.merge_durations_match(ctx(12.0, 12.0, d=0.0), sp).passed is True
    out = design.merge_durations_match(ctx(16.0, 12.0, d=0.0), sp)
    assert out.found == "seed 0: policy windows 16 s vs draws 12 s"


def test_open_loop_texts():
    c = _design({"run_id": ["s0-pol", "s0-d0", "s0-ns"], "completion_tied_share": [0.0, 0.5, 0.0],
                 "identical_arrival_share": [0.0, 0.0, 0.25]})
    sp = _spec(max_completion_tied_share=0.1, max_identical_arrival_share=0.05)
    out = design.open_loop_sending(c, sp)
    assert out.found == ("seed 0 s0-d0 (matched_random): 50% of sends follow a completion "
                         "(closed loop); seed 0 s0-ns (no_sync): 25% of requests arrive in "
                         "bursts of identical times (batched)")
    assert out.expected == ("open-loop sending: <= 10% of sends within 1 ms after another "
                            "request's completion, <= 5% of requests sharing an arrival time")
    ok = _design({"run_id": ["s0-pol", "s0-d0", "s0-ns"], "completion_tied_share": [0.0] * 3,
                  "identical_arrival_share": [0.0] * 3})
    assert design.open_loop_sending(ok, sp).found == "3 runs open loop"
    # a seed without a no-sync run: only the policy and its draw are read
    ok = _design({"run_id": ["s0-pol", "s0-d0"], "completion_tied_share": [0.0] * 2,
                  "identical_arrival_share": [0.0] * 2}, pairs=[_pair(0, no_sync=False)])
    assert design.open_loop_sending(ok, sp).found == "2 runs open loop"
    missing = _design({"run_id": ["s0-pol", "s0-d0", "s0-ns"],
                       "completion_tied_share": [0.0] * 3})
    out = design.open_loop_sending(missing, sp)
    assert out.found == ("no request timings for 3 run(s): open-loop sending is vouched by the "
                         "input")


def test_enough_seeds_texts():
    c = _c(informative_n=3, effective_n=4, seeds_needed=6, test_name="sign-flip test",
           pseudo_replicates=[(5, 0), (6, 0), (7, 1), (8, 1), (9, 2)], design_min_p=0.25)
    out = inference.enough_seeds(c, _spec(min_seeds=5))
    assert out.expected == (">= 6 independent paired seeds (protocol minimum 5; the sign-flip "
                            "test needs 6 to reach alpha = 0.05 two-sided)")
    assert out.found == ("underpowered: 3 independent seeds are below the protocol's minimum "
                         "of 5, and the smallest sign-flip two-sided p is 0.25 > alpha = "
                         "0.05: the test needs >= 6 seeds; 5 seed(s) replay another seed's "
                         "trace realisation and count once (5 = 0, 6 = 0, 7 = 1, 8 = 1); 1 "
                         "seed(s) whose policy run and draws have the same V cannot move the "
                         "test and do not count")
    assert out.recommendation == "underpowered: needs >= 6 seeds"
    # 4 seeds, the test could reach alpha with 3: the protocol's minimum of 5 blocks
    c = _c(informative_n=4, effective_n=4, seeds_needed=3, test_name="t", pseudo_replicates=[],
           design_min_p=0.0123)
    out = inference.enough_seeds(c, _spec(min_seeds=5))
    assert out.found == ("underpowered: 4 independent seeds are below the protocol's minimum "
                         "of 5 (the test itself could reach alpha with 3; smallest sign-flip p "
                         "now 0.0123)")
    assert out.recommendation == "underpowered: needs >= 5 seeds"
    # enough for the protocol, not for the test
    c = _c(informative_n=5, effective_n=5, seeds_needed=6, test_name="t", pseudo_replicates=[],
           design_min_p=0.0625)
    out = inference.enough_seeds(c, _spec(min_seeds=5))
    assert out.found.endswith("with 5 independent seeds the smallest sign-flip two-sided p is "
                              "0.0625 > alpha = 0.05: the test needs >= 6 seeds")
    c = _c(informative_n=1, effective_n=1, seeds_needed=6, test_name="t", pseudo_replicates=[],
           design_min_p=1.0)
    out = inference.enough_seeds(c, _spec(min_seeds=7))
    assert out.found == "1 independent paired seed(s): no paired test possible"
    assert out.recommendation == ("replay the policy and K-matched random draws for >= 7 seeds, "
                                  "each on its own trace realisation")
    c = _c(informative_n=2, effective_n=2, seeds_needed=2, test_name="t", pseudo_replicates=[],
           design_min_p=0.5)
    assert inference.enough_seeds(c, _spec(min_seeds=2)).found == "2 independent paired seeds"


def _sf(**kw):
    base = dict(statistic=0.0625, ci_low=0.03125, ci_high=0.125, n=6, p_value=0.03125,
                exact=True, min_p=0.03125)
    base.update(kw)
    return SimpleNamespace(**base)


def test_gain_significant_texts():
    c = _c(effective_n=6, sign_flip=_sf(), p_adjusted=0.046875, test_name="sign-flip test",
           seeds_needed=6, d=np.array([0.1, 0.2, 0.0, -0.1, 0.3, 0.2]),
           paired=SimpleNamespace(reference="t, 5 df; the draws' variance floor binds"))
    out = inference.gain_significant(c, _spec(min_effect=0.005))
    assert out.passed is True
    assert out.expected == ("Holm-adjusted two-sided p <= 0.05 and mean d >= 0.50 pp (the "
                            "smallest effect of interest; sign-flip test)")
    assert out.found == ("mean d = +6.25 pp [+3.12, +12.50], policy better in 4/6 seeds, p = "
                         "0.03125, adjusted 0.04688 (t, 5 df; the draws' variance floor binds)")
    c.sign_flip = _sf(exact=False, min_p=0.0625)
    out = inference.gain_significant(c, _spec(min_effect=0.005))
    assert out.found == ("underpowered: smallest sign-flip p = 0.0625 > alpha with n = 6 "
                         "(seeds whose runs tie cannot count); mean d = +6.25 pp [+3.12, "
                         "+12.50], policy better in 4/6 seeds, p = 0.03125, adjusted 0.04688 "
                         "(t, 5 df; the draws' variance floor binds)")
    assert out.recommendation == "underpowered: needs >= 6 seeds"
    c.protocol = SimpleNamespace(multiplicity="none")
    assert inference.gain_significant(c, _spec(min_effect=0.005)).expected == (
        "two-sided p <= 0.05 and mean d >= 0.50 pp (the smallest effect of interest; "
        "sign-flip test)")
    c.effective_n = 1
    out = inference.gain_significant(c, _spec(min_effect=0.005))
    assert out.found == "1 paired seed(s): no paired test possible"
    assert out.recommendation == ("replay the policy and its matched-random draws for >= 6 "
                                  "seeds")


def test_placement_gain_texts():
    out = placement.no_sync_present(
        _c([_pair(0, no_sync=False), _pair(1), _pair(2, no_sync=False)]), _spec())
    assert out.found == "missing runs: no_sync for seed 0; no_sync for seed 2"
    assert out.recommendation.startswith("replay no_sync for seeds 0, 2; a missing baseline")
    assert placement.no_sync_present(_c(), _spec()).found == "present for all 2 seeds"
    n = 10
    table = pd.DataFrame({"seed": range(n), "run_id": [f"r{i}" for i in range(n)],
                          "check": ["step_rate"] * n, "expected": [1.0] * n,
                          "found": [1.2345678] * n, "passed": [False] * (n - 1) + [True],
                          "status": ["failed"] * (n - 1) + ["passed"], "reason": [""] * n})
    sp = _spec(tolerances={"step_rate": 0.05, "n_requests": 0.0})
    out = placement.load_match(_c(load_match_table=lambda s: table), sp)
    assert out.expected == ("load matched to the seed's no-sync run: n_requests within 0%, "
                            "step_rate within 5%")
    assert out.found.startswith("seed 0 r0: step_rate expected 1 found 1.23457; seed 1 r1")
    assert out.found.count("expected") == 8 and out.found.endswith("(+1 more)")
    ok = table.assign(passed=True, status="passed")
    ok.loc[1, "check"] = "n_requests"
    out = placement.load_match(_c(load_match_table=lambda s: ok), sp)
    assert out.found == "10 runs matched on 2 quantities"
    ne = table.assign(status="not evaluable", reason="step_rate is missing")
    out = placement.load_match(_c(load_match_table=lambda s: ne), sp)
    assert out.found == "cannot compare: step_rate (step_rate is missing)"


def test_calibrated_texts():
    ev = SimpleNamespace(psi=SimpleNamespace(eps_cal=0.0123456, eps_cal_loso=0.02),
                         phi_table=pd.DataFrame({"phi": range(7)}), psi_reason="")
    out = calibrated.psi_fit(_c(regime_evidence=ev), _spec(min_runs=8))
    assert out.passed is False and out.found == (
        "eps_cal = 1.23 pp in-sample, 2.00 pp leave-one-seed-out, 7 runs")
    assert out.expected.startswith("isotonic psi fitted on >= 8 runs")
    from evalkit.stats.explained import ExplainedGain

    res = ExplainedGain(4, 0.02, [0.01, 0.03], 0.015, [0.001, 0.03], 0.005, [-0.01, 0.02],
                        0.25, 0.005, 0.95, True, True, True, [], 200, "m",
                        equivalence_level=0.8)
    ev = SimpleNamespace(psi=SimpleNamespace(eps_cal=0.01, eps_cal_loso=0.02),
                         explained_gain=lambda *a: (res, "seeds 3 left out"), psi_reason="")
    c = _c(regime_evidence=ev, seed=0, alpha=0.1, rng=lambda *stream: np.random.default_rng(stream),
           protocol=SimpleNamespace(bootstrap_resamples=200, accept_vouched=False))
    out = calibrated.gain_explained_by_overlap(c, _spec(unexplained_tolerance=0.25))
    assert out.expected == ("psi-predicted gain G_pred (psi refitted leave-one-seed-out) with "
                            "a 90% CI above 0, and the unexplained part G - G_pred shown "
                            "small: its 80% CI inside +-0.25 x |G| (equivalence, TOST at "
                            "alpha = 0.1)")
    assert out.found == ("G = +2.00 pp, G_pred = +1.50 pp [+0.10, +3.00], G - G_pred = +0.50 pp "
                         "[-1.00, +2.00] (80% CI; tolerance +-0.50 pp) over 4 seeds; eps_cal "
                         "1.00 pp in-sample, 2.00 pp leave-one-seed-out; seeds 3 left out")
    none = SimpleNamespace(psi=None, psi_reason="not evaluable: no logs")
    out = calibrated.gain_explained_by_overlap(_c(regime_evidence=none),
                                               _spec(unexplained_tolerance=0.25))
    assert out.evaluable is False and out.found == "not evaluable: no logs"


def test_deployable_texts(monkeypatch):
    from evalkit.policies import POLICIES, policy_identity

    monkeypatch.setattr(deployable, "sidecar_evidence", lambda runset, run_id: None)
    monkeypatch.setattr(deployable, "server_timing_faults", lambda *args: (None, None))
    sp = _spec(real_backends=["torch", "vllm"], server_time_allowance_s=0.05,
               server_time_min_share=0.99)
    pairs = [_pair(0), _pair(1)]
    ids = [r for p in pairs for r in [p.policy_run, *p.draws.run_id, p.no_sync.run_id]]
    runs = pd.DataFrame({"run_id": ids, "backend": ["vllm"] * 3 + ["torch"] * 3})
    c = _c(claim=_claim(pairs), runset=SimpleNamespace(has_logs=True, runs=runs, _cache={}))
    out = deployable.real_sidecar(c, sp)
    assert out.found == ("backends: torch, vllm; 6 runs with metrics scrapes that join the "
                         "client's requests and server times within the client's latency + "
                         "0.05 s")
    assert out.expected == ("every run of the claim's seeds (policy, draws, no-sync) on a real "
                            "sidecar (torch/vllm), shown by its metrics scrapes joined to the "
                            "client's requests and server times (server_total_s) within the "
                            "client's latency + 0.05 s for at least 99% of its requests")
    ident = policy_identity(POLICIES["ewma"])
    c._meta = lambda r: {"policy": "ewma", "oracle": False, "policy_identity": ident}
    out = deployable.not_oracle(c, _spec())
    assert out.found.startswith("policy class evalkit.policies.forecast:EWMA (recorded code, "
                                "resolved): its ")
    assert out.found.endswith("did not change when the arrivals after the cut did "
                              "(causality probe)")
    c._meta = lambda r: {"policy": "ewma", "oracle": True}
    out = deployable.not_oracle(c, _spec())
    assert out.found == ("oracle: s0-pol: the run says it saw future information; s1-pol: the "
                         "run says it saw future information")


def test_phi_table_vex_subtracts_a_nonzero_no_sync_v(tmp_path):
    # the fixtures' no-sync runs violate nothing (V = 0), where V - V_ns = V + V_ns: give
    # one no-sync run failed requests so its V is positive
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    runs = tmp_path / "runs"
    shutil.copytree(CAMPAIGNS / "sim_underpowered", runs)
    path = runs / "no_sync-s1" / "requests.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[:9, "ok"] = False
    df.loc[:9, "end_s"] = np.nan
    df.loc[:9, "first_token_s"] = np.nan
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    ctx = _ctx_for(runs, policy="wa")
    runs_t = ctx.regime_evidence.runs.set_index("run_id")
    v_ns = float(runs_t.loc["no_sync-s1", "violation_rate"])
    assert v_ns >= 10 / len(df)
    table = ctx.regime_evidence.phi_table.set_index("run_id")
    seed1 = table[table.seed == 1]
    assert len(seed1) >= 2
    for run_id, rec in seed1.iterrows():
        assert rec.vex == pytest.approx(float(runs_t.loc[run_id, "violation_rate"]) - v_ns,
                                        abs=1e-15)


@pytest.mark.parametrize("m, alternative, needed", [
    ([1, 3, 2], "two-sided", 6),        # one d per seed: 2 * 2^-n <= 0.05 from n = 6
    ([3, 3, 3], "two-sided", 6),        # averaged draws do not lower it (the test is on d)
    ([3, 1], "greater", 5),             # 2^-n <= 0.05 from n = 5
    ([], "two-sided", 6),
])
def test_claim_context_seeds_needed_is_the_sign_flip_on_d(m, alternative, needed):
    from evalkit.audit.context import ClaimContext

    fake = SimpleNamespace(draws_per_seed=np.array(m, dtype=int), alpha=0.05,
                           alternative=alternative)
    assert ClaimContext.seeds_needed.func(fake) == needed


# --------------------------------------------------------------- the claim's design facts

def _stub_context(pairs, runs=None, source="runs"):
    from evalkit.audit.context import ClaimContext

    c = ClaimContext.__new__(ClaimContext)
    c.claim = claim(pairs)
    c.runset = SimpleNamespace(runs=runs if runs is not None else pd.DataFrame(
        {"run_id": [p.policy_run for p in pairs]}), source=source)
    c.alpha, c.alternative = 0.05, "two-sided"
    return c


def test_fingerprints_read_from_the_runs_table():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"],
                         "arrival_fingerprint": ["f1", "", None, "f2"],
                         "n_requests": [10, 5, 5, np.nan]})
    assert _stub_context([pair(0)], runs).fingerprints == {"a": ("f1", 10), "d": ("f2", None)}
    assert _stub_context([pair(0)], pd.DataFrame({"run_id": ["a"]})).fingerprints == {}


def test_units_merge_seeds_that_replayed_the_same_requests():
    pairs = [pair(s) for s in range(4)]
    runs = pd.DataFrame({"run_id": [p.policy_run for p in pairs],
                         "arrival_fingerprint": ["x", "y", "x", "x"],
                         "n_requests": [10, 10, 10, 11]})   # seed 3: same hash, other count
    c = _stub_context(pairs, runs)
    assert [p.seed for p in c.units] == [0, 1, 3] and c.pseudo_replicates == [(2, 0)]
    assert c.effective_n == 3
    # without fingerprints every paired seed is its own unit
    assert _stub_context(pairs).effective_n == 4 and _stub_context(pairs).pseudo_replicates == []


def test_informative_seeds_are_those_whose_runs_differ():
    pairs = [pair(0, ks=(3, 3), vs=[0.1, 0.1], v_policy=0.1),          # all equal: no info
             pair(1, ks=(3, 3), vs=[0.1, 0.1 + 1e-9], v_policy=0.1),   # tiny but real
             pair(2, ks=(3,), vs=[0.3], v_policy=0.1),
             pair(3, ks=(3,), vs=[0.0], v_policy=0.0)]                 # zeros: no info
    c = _stub_context(pairs)
    assert c.effective_n == 4 and c.informative_n == 2
    assert c.averaged_draws is True and list(c.draws_per_seed) == [2, 2, 1, 1]
    assert c.test_name == "draw-floored t-test"
    assert c.design_min_p == pytest.approx(2 / 2 ** 4)
    one = _stub_context([pair(0), pair(1)])
    assert one.averaged_draws is False and one.test_name == c.test_name
    assert _stub_context([]).design_min_p == 1.0 and _stub_context([]).averaged_draws is False
