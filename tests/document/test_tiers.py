"""Tier semantics in one module (evalkit.document.tiers): the claim floor, the ladder and stop
point, rank and drops; the verdict, the headline and the gate all read them.

The red-team case: a protocol without ``matched_budget``.  The verdict once used "index 0" as
the floor and the headline "the first tier that is not a skippable mechanism tier", so a claim
that reached only the harness tier was worded as a claim by the verdict and "not supported"
by the headline.  Both now take the one floor.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalkit.audit.checks import core as C
from evalkit.audit.claims import _verdict
from evalkit.audit.protocol import TierSpec, load_protocol, parse_protocol
from evalkit.document import tiers as T
from evalkit.report.headline import headline

NO_BUDGET = """[protocol]
name = "no-budget"
alpha = 0.05
tier_order = ["harness", "placement_gain", "deployable"]

[tiers.harness]
claim = "scheduling can matter in a repeatable benchmark"
skip_if_not_evaluable = true
checks = ["fixed_cadence_baseline"]

[tiers.placement_gain]
claim = "the gain is placement value"
checks = ["no_sync_present"]

[tiers.deployable]
claim = "a deployable controller"
checks = ["not_oracle"]

[checks]
"""


def _spec(name, skip=False):
    return TierSpec(name=name, claim=name, skip_if_not_evaluable=skip, checks=())


def _check(name, tier, passed, evaluable=True):
    return C.Check(name, tier, passed, evaluable, "e", f"{name} found", "r",
                   passed is False or not evaluable)


@pytest.mark.parametrize("tiers, floor", [
    ([_spec("harness", True), _spec("sidecar_transfer", True), _spec("matched_budget")], 2),
    ([_spec("harness", True), _spec("placement_gain"), _spec("deployable")], 1),
    ([_spec("matched_budget"), _spec("harness", True)], 0),
    ([_spec("harness", True), _spec("sidecar_transfer", True)], 0),   # only mechanism tiers
    ([_spec("placement_gain"), _spec("calibrated")], 0),
])
def test_claim_floor_one_rule_for_specs_and_documents(tiers, floor):
    assert T.claim_floor(tiers) == floor
    as_dicts = [{"name": t.name, "skip_if_not_evaluable": t.skip_if_not_evaluable}
                for t in tiers]
    assert T.claim_floor(as_dicts) == floor
    names = [t.name for t in tiers]
    for i, name in enumerate(names):
        assert T.licenses_claim(tiers, name) is (i >= floor)
    assert T.licenses_claim(tiers, None) is False
    assert T.licenses_claim(tiers, "not_a_tier") is False


def _vctx(proto):
    return SimpleNamespace(
        seeds_needed=6, claim=SimpleNamespace(policy="wa"),
        regime_evidence=SimpleNamespace(_explained={}), protocol=proto, informative_n=8,
        effective_n=8, design_min_p=0.01, alpha=0.05, alternative="two-sided", p_adjusted=0.01,
        sign_flip=SimpleNamespace(statistic=0.0625, ci_low=0.03125, ci_high=0.125, min_p=0.01))


def _claim_dict(tier, status, underpowered=False):
    return {"policy": "wa", "regime": "r", "tier": tier, "tier_status": status,
            "underpowered": underpowered, "checks": [], "mean_diff": 0.0625,
            "ci": [0.03125, 0.125], "n_seeds": 8, "wins": 8}


def test_verdict_and_headline_agree_without_matched_budget():
    """Red team: with floor 0 the verdict called a harness-only claim a claim (the tier's
    sentence), while the headline said "not supported"."""
    proto = parse_protocol(NO_BUDGET, source="p.toml", file="p.toml")
    verdict = _verdict("harness", proto, SimpleNamespace(oracle=False), [], "", _vctx(proto))
    assert verdict == ("mechanism only (scheduling can matter in a repeatable benchmark); no "
                       "win over matched random")
    audit = {"protocol": proto.to_dict(), "claims": [], "alpha": 0.05}
    status = {"harness": "passed", "placement_gain": "failed", "deployable": "failed"}
    assert headline(_claim_dict("harness", status), audit).status == "not supported"
    assert T.claim_status(proto.tiers, "harness", False) == T.NOT_SUPPORTED
    # one tier higher both call it a claim
    verdict = _verdict("placement_gain", proto, SimpleNamespace(oracle=False), [], "",
                       _vctx(proto))
    assert verdict.startswith("placement_gain: the gain is placement value")
    status = {"harness": "passed", "placement_gain": "passed", "deployable": "failed"}
    assert headline(_claim_dict("placement_gain", status), audit).status == "supported"
    assert T.claim_status(proto.tiers, "placement_gain", False) == T.SUPPORTED


def test_claim_status_underpowered_only_below_the_floor():
    tiers = load_protocol().tiers
    assert T.claim_status(tiers, "harness", True) == T.UNDERPOWERED
    assert T.claim_status(tiers, None, True) == T.UNDERPOWERED
    assert T.claim_status(tiers, "matched_budget", True) == T.SUPPORTED
    assert T.claim_status(tiers, None, False) == T.NOT_SUPPORTED


def test_walk_ladder_and_stop_point():
    proto = SimpleNamespace(tiers=(_spec("a", True), _spec("b"), _spec("c"), _spec("d")))
    checks = [_check("a1", "a", None, evaluable=False), _check("b1", "b", True),
              _check("c1", "c", False), _check("c2", "c", True), _check("c3", "c", False),
              _check("d1", "d", True)]
    reached, status, reason = T.tier_walk(proto, checks)
    assert reached == "b"
    assert status == {"a": "not_evaluable", "b": "passed", "c": "failed", "d": "passed"}
    assert reason == "stops before c (failed): c1: c1 found (+1 more)"
    rungs = T.ladder(proto.tiers, status, reached)
    assert [(r.tier, r.state, r.reached, r.beyond) for r in rungs] == [
        ("a", "skipped", False, False), ("b", "passed", True, False),
        ("c", "failed", False, False), ("d", "passed", False, True)]
    assert T.stop_point(proto.tiers, status, checks) == {"tier": "c", "state": "failed",
                                                         "checks": ["c1", "c3"]}
    # the same from the document's dictionaries
    dicts = [c.to_dict() for c in checks]
    assert T.stop_point(proto.tiers, status, dicts)["checks"] == ["c1", "c3"]
    done = {"a": "passed", "b": "passed", "c": "passed", "d": "passed"}
    assert T.stop_point(proto.tiers, done, []) is None
    assert T.stop_reason(proto.tiers, done, []) == "every tier of the protocol is supported"
    # a tier the walk never evaluated is not run, and the walk stops there
    cut = {"a": "passed", "b": "passed"}
    assert T.filled_status(proto.tiers, cut) == {"a": "passed", "b": "passed",
                                                 "c": "not_run", "d": "not_run"}
    assert T.stop_point(proto.tiers, T.filled_status(proto.tiers, cut), []) == {
        "tier": "c", "state": "not_run", "checks": []}


def test_headline_reads_the_recorded_stop_not_a_recomputed_one():
    proto = load_protocol()
    audit = {"protocol": proto.to_dict(), "claims": [], "alpha": 0.05}
    claim = _claim_dict("harness", {t.name: "passed" for t in proto.tiers})
    claim["checks"] = [{"name": "k_match", "tier": "matched_budget", "blocking": True,
                        "passed": False}]
    # the recorded ladder and stop win over tier_status (which says every tier passed)
    claim["ladder"] = [r.to_dict() for r in T.ladder(
        proto.tiers, {"harness": "passed", "sidecar_transfer": "not_evaluable",
                      "matched_budget": "failed"}, "harness")]
    claim["stop"] = {"tier": "matched_budget", "state": "failed", "checks": ["k_match"]}
    h = headline(claim, audit)
    assert h.stop == "matched_budget failed (k_match: the draws' K differs from the policy's)"
    assert [r.state for r in h.ladder][:3] == ["passed", "skipped", "failed"]
    assert all(r.state == "not_run" for r in h.ladder[3:])


def test_tier_rank_and_reaches():
    order = ["harness", "matched_budget", "placement_gain"]
    assert T.tier_rank(None, order) == -1 and T.tier_rank("placement_gain", order) == 2
    assert T.tier_rank("platinum", order) is None
    assert T.reaches("placement_gain", "matched_budget", order)
    assert T.reaches("matched_budget", "matched_budget", order)
    assert not T.reaches("harness", "matched_budget", order)
    assert not T.reaches(None, "harness", order)


# ------------------------------------------------------ missing runs: not evaluable, not failed

def _missing(name, tier):
    return C.Check(name, tier, None, False, "e", f"no runs of {name}", "add them", True,
                   values={"campaign_toml": f'[[policies]]\nname = "{name}"\ndraws = 0'})


def test_a_tier_whose_blockers_only_lack_runs_is_missing_runs_and_stops_the_walk():
    """The campaign never planned the harness baselines: the harness tier is not evaluable
    (missing runs), never "failed", and unlike a tier the campaign cannot test at all it is
    not stepped over: the claim reaches no tier, as when it was reported failed."""
    tiers = [_spec("harness", True), _spec("matched_budget")]
    checks = [_missing("fixed_cadence_baseline", "harness"),
              _missing("deferral_baseline", "harness"),
              _check("gain_significant", "matched_budget", True)]
    assert T.tier_state(checks[:2]) == T.MISSING_RUNS
    # one baseline present, one never planned: still not evaluable, not failed
    assert T.tier_state([_check("fixed_cadence_baseline", "harness", True),
                         checks[1]]) == T.MISSING_RUNS
    status = {"harness": T.MISSING_RUNS, "matched_budget": T.PASSED}
    assert not T.goes_on(T.MISSING_RUNS, tiers[0])
    assert T.reached_tier(tiers, status) is None
    assert [r.state for r in T.ladder(tiers, status, None)] == [T.NOT_EVALUABLE, T.PASSED]
    assert T.stop_point(tiers, status, checks) == {
        "tier": "harness", "state": T.NOT_EVALUABLE,
        "checks": ["fixed_cadence_baseline", "deferral_baseline"]}
    reason = T.stop_reason(tiers, status, checks)
    assert reason.startswith("stops before harness (not evaluable: the campaign has no runs")
    assert "failed" not in reason


def test_a_real_failure_beside_missing_runs_is_failed_and_no_runs_at_all_is_still_skipped():
    missing = _missing("deferral_baseline", "harness")
    assert T.tier_state([_check("fixed_cadence_baseline", "harness", False),
                         missing]) == T.FAILED
    # no harness runs at all: the tier does not apply (no campaign lines), stepped over
    absent = C.Check("fixed_cadence_baseline", "harness", None, False, "e", "no sim runs",
                     "", True)
    assert T.tier_state([absent]) == T.NOT_EVALUABLE
    assert T.goes_on(T.NOT_EVALUABLE, _spec("harness", True))
