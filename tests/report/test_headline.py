"""The headline sentence and the tier ladder, from constructed audit dictionaries."""

from __future__ import annotations

from evalkit.report.headline import headline, ladder

TIERS = [("harness", True), ("sidecar_transfer", True), ("matched_budget", False),
         ("placement_gain", False), ("calibrated", False), ("deployable", False)]


def _audit(claims, multiplicity="holm"):
    return {"alternative": "two-sided",
            "protocol": {"multiplicity": multiplicity, "tiers": [
                {"name": n, "claim": f"claim of {n}", "checks": [f"{n}_check"],
                 "skip_if_not_evaluable": skip} for n, skip in TIERS]},
            "claims": claims}


def _claim(tier, status, **kw):
    base = {"regime": "bursty", "policy": "wa", "tier": tier, "tier_status": status,
            "mean_diff": 0.0078, "ci": [0.0036, 0.0121], "p_adjusted": 0.012, "exact": True,
            "n_seeds": 10, "wins": 9, "underpowered": False, "oracle": False, "checks": []}
    return {**base, **kw}


PASSED_TO_PLACEMENT = {"harness": "passed", "sidecar_transfer": "not_evaluable",
                       "matched_budget": "passed", "placement_gain": "passed",
                       "calibrated": "failed", "deployable": "passed"}


def test_supported_claim_sentence_and_ladder():
    claim = _claim("placement_gain", PASSED_TO_PLACEMENT, checks=[
        {"name": "gain_explained_by_overlap", "tier": "calibrated", "blocking": True,
         "passed": False, "found": "G_pred's CI reaches 0"},
        {"name": "real_sidecar", "tier": "deployable", "blocking": True, "found": "sim"}],
        test="within-seed permutation test", effective_n=10)
    h = headline(claim, _audit([claim, _claim("harness", {}, policy="x")]))
    assert h.status == "supported" and h.tier == "placement_gain"
    assert h.effect.startswith("G = +0.78 pp [+0.36, +1.21] (95% CI, lies above 0)")
    assert "0.78 pp fewer requests violate the SLO" in h.effect
    assert h.test == ("Holm-adjusted p = 0.012 over 2 claims (two-sided, exact within-seed "
                      "permutation test)")
    assert h.seeds == "9 of 10 seeds favour the policy"
    assert h.stop == ("calibrated failed (gain_explained_by_overlap: request overlap does not "
                      "explain G)")
    states = [(r.tier, r.state, r.reached, r.beyond) for r in h.ladder]
    assert states == [("harness", "passed", False, False),
                      ("sidecar_transfer", "skipped", False, False),
                      ("matched_budget", "passed", False, False),
                      ("placement_gain", "passed", True, False),
                      ("calibrated", "failed", False, False),
                      ("deployable", "passed", False, True)]     # above the stop: faded
    assert "Not higher: calibrated failed" in h.sentence()


def test_mechanism_tier_only_is_not_supported_and_negative_g_says_more():
    claim = _claim("harness", {"harness": "passed", "sidecar_transfer": "not_evaluable",
                               "matched_budget": "failed"}, mean_diff=-0.0133,
                   ci=[-0.0158, -0.0108], wins=0, checks=[
                       {"name": "gain_significant", "tier": "matched_budget", "blocking": True,
                        "passed": False,
                        "found": "G = -0.0133: the gain is within the calibration error"}])
    audit = {**_audit([claim], multiplicity="none"), "alpha": 0.05}
    h = headline(claim, audit)
    assert h.status == "not supported"
    assert "1.33 pp more requests violate the SLO" in h.effect
    assert "Holm" not in h.test and h.test.startswith("p = 0.012 (")
    # the stop clause comes from G and p, not from the check's text
    assert h.stop.startswith("matched_budget failed (gain_significant: the policy is not "
                             "better than matched random")
    assert [r.state for r in h.ladder][3:] == ["not_run", "not_run", "not_run"]


def test_underpowered_claim_names_the_seeds_it_needs():
    claim = _claim(None, {"harness": "not_evaluable", "sidecar_transfer": "not_evaluable",
                          "matched_budget": "failed"}, underpowered=True, n_seeds=5,
                   min_p=0.0625, seeds_needed=6)
    h = headline(claim, _audit([claim]))
    assert h.status == "underpowered"
    # one p-value in the headline: the smallest attainable p is in the detail
    assert h.test.count("p = ") == 1 and "0.0625" not in h.test
    assert "underpowered: 5 seeds cannot reach alpha" in h.test and "needs >= 6 seeds" in h.test


def test_missing_optional_keys_and_the_documents_exclusion_rows():
    claim = {"regime": "r", "policy": "p", "tier": None, "checks": [],
             "exclusions": [{"run_id": "p-s3", "seed": 3, "reason": "incomplete run"},
                            {"run_id": "p-s4", "reason": "unreadable run.json"}]}
    h = headline(claim, _audit([claim]))
    assert h.effect.startswith("no paired gain") and h.test == "" and h.seeds == ""
    assert h.exclusions == [{"run_id": "p-s3", "seed": 3, "reason": "incomplete run"},
                            {"run_id": "p-s4", "seed": None, "reason": "unreadable run.json"}]
    assert all(r.state == "not_run" for r in ladder(claim, _audit([claim])))
