"""Claim evaluation beyond single decisions: the evidence a ClaimContext computes, the fields
ClaimResult.to_dict reports, evaluate_claims' multiplicity, notes, tier walk and verdicts.

References are independent: p-values by enumerating every sign pattern, Holm by its step-down
formula, exclusions, wins and means by hand.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import checks as C
from evalkit.audit.campaign import ClaimData, SeedPair, assemble_claims, load_campaign
from evalkit.audit.claims import (ClaimContext, ClaimResult, RegimeEvidence, _tier_walk,
                                  _verdict, evaluate_claims)
from evalkit.audit.protocol import load_protocol

CAMPAIGNS = Path(__file__).resolve().parents[1] / "fixtures" / "campaigns"


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
    df.to_csv(path, index=False)
    return path


def _evaluate(path, protocol=None, **kw):
    proto = protocol or load_protocol()
    campaign = load_campaign(path)
    claims = assemble_claims(campaign)
    return campaign, evaluate_claims(campaign, claims, proto, **kw)


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
    raw = {r: _brute_p(_D[r])[2] for r in ("ra", "rb", "rc")}
    adj = _holm([raw["ra"], raw["rb"], raw["rc"]])
    for r, a in zip(("ra", "rb", "rc"), adj):
        assert by[r]["p_two_sided"] == pytest.approx(raw[r], abs=1e-15)
        assert by[r]["p_adjusted"] == pytest.approx(a, abs=1e-15)
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
    assert d["p_adjusted"] == pytest.approx(_brute_p(_D["ra"])[2], abs=1e-15)
    # gain_significant decides on this p
    gs = next(c for c in results[0].checks if c.name == "gain_significant")
    assert f"adjusted {C._fmt(d['p_adjusted'])}" in gs.found


def test_claim_result_fields_of_a_sign_flip_claim(tmp_path):
    d = [0.25, 0.0, 0.375, -0.0625, 0.25, 0.5]                 # one exact tie: not a win
    path = _table(tmp_path / "t.csv", _regimes({"ra": d}))
    _, (res,) = _evaluate(path)
    out = res.to_dict()
    g, le, two = _brute_p(d)
    assert out["regime"] == "ra" and out["policy"] == "pra" and out["baseline"] == "matched_random"
    assert out["n_seeds"] == 6 and out["seeds"] == list(range(6)) and out["effective_n"] == 6
    assert out["draws_per_seed"] == [1] * 6 and out["design_min_p"] == pytest.approx(2.0 ** -5)
    assert out["test"].startswith("sign-flip test (one baseline row per seed")
    assert out["null_size"] == 2 ** 6 and out["exact"] is True
    assert out["method"].startswith("exact sign-flip")
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
                          pseudo_replicates=[(2, 0)], test_name="t",
                          draws_per_seed=np.array([2, 1]), design_min_p=0.5, p_adjusted=0.75,
                          seeds_needed=6,
                          campaign=SimpleNamespace(excluded=list(excluded), runs=runs))
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
    assert out["p_adjusted"] == 0.75 and out["exact"] is True and out["min_p"] == 0.5
    assert out["method"] == "m" and out["seeds_needed"] == 6 and out["design_min_p"] == 0.5
    assert out["pseudo_replicates"] == [{"seed": 2, "same_requests_as_seed": 0}]
    assert out["n_seeds"] == 2 and out["seeds"] == [0, 1, 2]
    assert out["draws_per_seed"] == [2, 1] and out["test"] == "t"
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


def _chk(name, blocking, found):
    return C.Check(name, "t", not blocking, True, "e", found, "r", blocking)


def test_underpowered_needs_a_blocking_underpowered_check():
    assert _stub_result(checks=[_chk("a", True, "underpowered: x"),
                                _chk("b", False, "ok")]).underpowered is True
    assert _stub_result(checks=[_chk("a", False, "underpowered: x"),
                                _chk("b", True, "fails")]).underpowered is False
    assert _stub_result(checks=[_chk("a", True, "fails")]).underpowered is False
    res = _stub_result(checks=[_chk("a", True, "x"), _chk("b", False, "y")])
    assert [c.name for c in res.failed_checks] == ["a"]


# ---------------------------------------------------------------------------- verdicts

def _vctx(stat=0.0625, lo=0.03125, hi=0.125, needed=7):
    return SimpleNamespace(seeds_needed=needed,
                           sign_flip=SimpleNamespace(statistic=stat, ci_low=lo, ci_high=hi))


def test_verdict_wording_per_tier():
    proto = load_protocol()
    claim = SimpleNamespace(oracle=False)
    g = "G = 0.0625 [0.03125, 0.125]"
    assert _verdict("matched_budget", proto, claim, [], "", _vctx()) == (
        f"head-to-head: beats matched random at the same merge budget ({g}); not shown to be "
        "placement gain")
    assert _verdict("placement_gain", proto, claim, [], "", _vctx()) == (
        f"placement gain over matched random, load-matched to no-sync ({g})")
    assert _verdict("deployable", proto, claim, [], "", _vctx()) == (
        f"deployable controller beats matched random ({g})")
    assert _verdict("calibrated", proto, claim, [], "", _vctx()).startswith(
        f"placement gain explained by request overlap ({g}; psi-predicted")
    assert _verdict(None, proto, claim, [], "", _vctx()) == "no claim supported"
    assert _verdict("harness", proto, claim, [], "", _vctx()) == (
        f"mechanism only ({proto.tier('harness').claim}); no win over matched random")
    assert _verdict("sidecar_transfer", proto, claim, [], "", _vctx()).startswith(
        "mechanism only")
    under = [C.Check("enough_seeds", "matched_budget", False, True, "e", "underpowered: 5",
                     "r", True)]
    assert _verdict("harness", proto, claim, under, "", _vctx(needed=7)) == (
        "underpowered: needs >= 7 seeds; no claim beyond the mechanism tiers")
    assert _verdict(None, proto, SimpleNamespace(oracle=True), under, "", _vctx()) == (
        "oracle bound (never deployable): underpowered: needs >= 7 seeds; no claim beyond "
        "the mechanism tiers")
    # a non-blocking underpowered text does not make the verdict underpowered
    soft = [replace(under[0], blocking=False)]
    assert _verdict(None, proto, claim, soft, "", _vctx()) == "no claim supported"
    assert _verdict("deployable", proto, SimpleNamespace(oracle=True), [], "",
                    _vctx()).startswith("oracle bound (never deployable): deployable")
    broken = SimpleNamespace(seeds_needed=6, sign_flip=None)
    assert "(G n/a)" in _verdict("matched_budget", proto, claim, [], "", broken)


def test_verdict_without_a_matched_budget_tier_and_unknown_tiers():
    from evalkit.audit.protocol import TierSpec

    proto = load_protocol()
    tiers = (TierSpec("basic", "the basic claim", False, ("not_oracle",)),
             TierSpec("extra", "the extra claim", False, ("real_sidecar",)))
    small = replace(proto, tiers=tiers)
    # no matched_budget tier: the floor is the first tier, and unnamed tiers use their claim
    assert _verdict("basic", small, SimpleNamespace(oracle=False), [], "",
                    _vctx()) == "the basic claim"
    assert _verdict("extra", small, SimpleNamespace(oracle=False), [], "",
                    _vctx()) == "the extra claim"


# --------------------------------------------------------------------------- tier walk

def _check(name, tier, passed, evaluable=True, vouched=False):
    blocking = passed is False or (not evaluable and not vouched)
    return C.Check(name, tier, passed, evaluable, "e", f"{name} found", "r", blocking, vouched)


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
    _, got, _ = _tier_walk(_tiers(), cs)
    assert got["a"] == status and got["b"] == "failed" and got["c"] == "not_evaluable"


def test_tier_walk_reason_names_the_first_blocker_of_its_own_tier():
    cs = [_check("a1", "a", True), _check("a0", "a", False), _check("b1", "b", False),
          _check("b2", "b", False), _check("b3", "b", False), _check("c1", "c", False)]
    reached, _, reason = _tier_walk(_tiers(), cs)
    assert reached is None and reason == "stops before a (failed): a0: a0 found"
    cs = [_check("a1", "a", True), _check("b1", "b", True), _check("b2", "b", False),
          _check("b3", "b", False), _check("b4", "b", False), _check("c1", "c", False)]
    reached, _, reason = _tier_walk(_tiers(), cs)
    assert reached == "a" and reason == "stops before b (failed): b2: b2 found (+2 more)"
    cs = [_check("a1", "a", True), _check("b1", "b", None, False), _check("b2", "b", None,
                                                                          False)]
    reached, _, reason = _tier_walk(_tiers(), cs)
    assert reason == "stops before b (not evaluable): b1: b1 found (+1 more)"
    # a skippable not-evaluable tier is stepped over; a failed skippable tier is not
    reached, _, reason = _tier_walk(_tiers(skip="b"), cs + [_check("c1", "c", True)])
    assert reached == "c" and reason == "every tier of the protocol is supported"
    cs = [_check("a1", "a", True), _check("b1", "b", False), _check("c1", "c", True)]
    reached, _, reason = _tier_walk(_tiers(skip="b"), cs)
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
        df["n_requests"] = 100
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
    assert res.notes[2] == "one baseline row per seed: sign-flip test, symmetry of d assumed"
    assert res.notes[3].startswith("matched-random rows without matched_to serve every policy")
    assert len(res.notes) == 4
    # no vouching, no duplicates: only the design notes
    plain = _table(tmp_path / "p.csv", _regimes({"ra": d}))
    _, (res,) = _evaluate(plain)
    assert res.notes[0].startswith("one baseline row per seed") and len(res.notes) == 2


def test_default_seed_is_zero_for_monte_carlo_p(tmp_path):
    # 21 seeds x 3 draws: 4^21 label sets, beyond exact enumeration -> Monte Carlo
    rng = np.random.default_rng(3)
    seeds = [(0.25, list(0.25 + rng.normal(0.01, 0.05, 3)), None) for _ in range(21)]
    path = _table(tmp_path / "t.csv", {"ra": ("pra", seeds)})
    _, (default,) = _evaluate(path)
    _, (zero,) = _evaluate(path, seed=0)
    _, (one,) = _evaluate(path, seed=1)
    assert default.sign_flip.exact is False
    assert default.sign_flip.p_value == zero.sign_flip.p_value
    assert default.sign_flip.p_value != one.sign_flip.p_value


# ---------------------------------------------------------------- ClaimContext evidence

def _ctx_for(path, policy=None):
    campaign = load_campaign(path)
    claims = assemble_claims(campaign)
    claim = claims[0] if policy is None else next(c for c in claims if c.policy == policy)
    proto = load_protocol()
    from evalkit.audit.transfer_evidence import TransferEvidence

    return ClaimContext(claim, campaign, proto, RegimeEvidence(campaign, claim.regime),
                        TransferEvidence(campaign, 0, proto.bootstrap_resamples), 0)


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
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_load_match_table_rows_per_run_and_check(tmp_path):
    from evalkit.stats.loadmatch import DEFAULT_TOLERANCES

    rate = {"arrival_rate_achieved": 2.0, "n_requests": 100, "prompt_tokens_total": 1000,
            "output_tokens_total": 500, "step_rate": 1.5}
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
    out = C.load_match(ctx, sp)
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
    camp = run_ctx.campaign
    starts = camp.columns("wa-s2", "merges", ("start_s",))["start_s"]
    req = camp.columns(ns.loc[2, "run_id"], "requests", ("arrival_s", "end_s"))
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
        pd.DataFrame(rows).to_csv(path, index=False)
        camp = load_campaign(path)
        res, reason = RegimeEvidence(camp, "default").exposure
        assert (res is not None) is ok, reason
        if not ok:
            assert reason == "not evaluable: exposure needs >= 3 runs with exposure recorded"


def test_declared_design_and_meta_cache(run_ctx):
    meta = run_ctx._meta("wa-s1")
    assert meta["run_id"] == "wa-s1" and ("meta", "wa-s1") in run_ctx.campaign._cache
    assert run_ctx._meta("wa-s1") is meta
    row = run_ctx.campaign.row("wa-s1")
    got = run_ctx.declared_design("wa-s1")
    corridor = meta["corridor"]
    assert got == (corridor["min_gap_s"], corridor["max_gap_s"],
                   float(row["merge_duration_s"]), float(row["horizon_s"]))
    assert got[0] is not None and got[1] is not None


def test_declared_design_of_a_summary_table_has_no_corridor(tmp_path):
    rows = [{"policy": p, "seed": s, "violation_rate": 0.1, "merge_duration_s": 8.0,
             "horizon_s": 200.0} for s in range(2) for p in ("wa", "matched_random")]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
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
    from evalkit.stats.signflip import MAX_EXACT_N

    for n, exact in ((MAX_EXACT_N, True), (MAX_EXACT_N + 1, False)):
        c = ClaimContext.__new__(ClaimContext)
        c.__dict__.update(claim=SimpleNamespace(regime="r", policy="p"), seed=0,
                          alternative="greater", protocol=SimpleNamespace(n_resamples=99),
                          draws_per_seed=np.ones(n, dtype=int),
                          d=np.linspace(-0.5, 1.0, n))
        assert c.sign_flip.exact is exact
        assert c.sign_flip.null_size == (2 ** n if exact else 99)
