"""Every sentence the audit and the report print about a number follows from that number:
CIs above, across and below 0; claims better, worse and tied; every branch rendered."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evalkit.audit.checks import calibrated as C
from evalkit.document import words as W
from evalkit.report.headline import blocker_phrase, effect_text, headline
from evalkit.stats.explained import ExplainedGain


# ------------------------------------------------------------------------ CIs and gains

@pytest.mark.parametrize("lo, hi, side", [
    (0.001, 0.03, W.ABOVE), (1e-12, 0.03, W.ABOVE), (0.0, 0.03, W.ACROSS),
    (-0.01, 0.02, W.ACROSS), (-0.0136, -0.0100, W.BELOW), (-0.03, -1e-12, W.BELOW),
    (-0.03, 0.0, W.ACROSS), (None, 0.1, W.ACROSS), (float("nan"), -0.1, W.BELOW)])
def test_ci_side_at_and_around_zero(lo, hi, side):
    assert W.ci_side(lo, hi) == side


def test_ci_words_name_the_side():
    assert W.ci_words(W.ABOVE) == "lies above 0"
    assert W.ci_words(W.BELOW, "+0.02") == "lies below +0.02"
    assert W.ci_words(W.ACROSS) == "includes 0"


@pytest.mark.parametrize("gain, p, state", [
    (0.01, 0.049, W.BETTER), (0.01, 0.05, W.BETTER), (0.01, 0.0501, W.TIED),
    (-0.01, 0.05, W.WORSE), (-0.01, 0.051, W.TIED), (0.0, 0.001, W.TIED),
    (0.01, None, W.TIED), (0.01, float("nan"), W.TIED), (None, 0.01, W.TIED)])
def test_gain_state_at_alpha(gain, p, state):
    assert W.gain_state(gain, p, 0.05) == state


def test_gain_words():
    assert W.gain_words(W.BETTER) == "significantly better than matched random"
    # the claim test's false "worse" rate exceeds 1.5 x nominal: the side is not named
    assert W.gain_words(W.WORSE).startswith("not better than matched random")
    assert "WORSE" not in W.gain_words(W.WORSE)
    assert W.gain_words(W.TIED) == "not shown to differ from matched random"


# ----------------------------------------------------- gain_explained_by_overlap, every branch

def _res(g_pred_ci, u_ci, tol=0.005, gain=0.02):
    predicts = g_pred_ci[0] > 0
    within = u_ci[0] <= tol and u_ci[1] >= -tol
    return ExplainedGain(4, gain, [gain - 0.01, gain + 0.01], sum(g_pred_ci) / 2, g_pred_ci,
                         sum(u_ci) / 2, u_ci, 0.25, tol, 0.95, predicts, within,
                         predicts and within, [], 200, "m")


def _ctx(res, p_adjusted):
    ev = SimpleNamespace(psi=SimpleNamespace(eps_cal=0.01, eps_cal_loso=0.02),
                         explained_gain=lambda *a: (res, ""), psi_reason="")
    return SimpleNamespace(regime_evidence=ev, seed=0, alpha=0.05, p_adjusted=p_adjusted,
                           rng=lambda *stream: np.random.default_rng(stream),
                           claim=SimpleNamespace(regime="r", policy="p"),
                           protocol=SimpleNamespace(bootstrap_resamples=200,
                                                    accept_vouched=False))


SPEC = {"unexplained_tolerance": 0.25}


@pytest.mark.parametrize("g_pred_ci, u_ci, reason", [
    ([-0.0136, -0.0100], [0.0, 0.001],
     "overlap predicts a loss, not a gain (G_pred's CI lies below 0"),
    ([-0.001, 0.03], [0.0, 0.001], "overlap does not predict a gain (G_pred's CI includes 0)"),
    ([0.0, 0.03], [0.0, 0.001], "overlap does not predict a gain (G_pred's CI includes 0)"),
    ([0.001, 0.03], [0.006, 0.02],
     "the gain exceeds what overlap predicts (G - G_pred's CI lies above +0.50 pp)"),
    ([0.001, 0.03], [-0.02, -0.006],
     "the gain falls short of what overlap predicts (G - G_pred's CI lies below -0.50 pp)"),
])
def test_explained_reason_follows_the_cis(g_pred_ci, u_ci, reason):
    out = C.gain_explained_by_overlap(_ctx(_res(g_pred_ci, u_ci), 0.01), SPEC)
    assert out.passed is False and reason in out.found
    assert "reaches 0" not in out.found


def test_explained_passes_only_with_both_cis_right():
    out = C.gain_explained_by_overlap(_ctx(_res([0.001, 0.03], [-0.004, 0.004]), 0.01), SPEC)
    assert out.passed is True
    # at the band's edge: a CI touching +tol is within, one a hair above is not
    assert C.gain_explained_by_overlap(
        _ctx(_res([0.001, 0.03], [0.005, 0.02]), 0.01), SPEC).passed is True
    assert C.gain_explained_by_overlap(
        _ctx(_res([0.001, 0.03], [0.0050001, 0.02]), 0.01), SPEC).passed is False
    assert W.explained_reason(True, True, [0.001, 0.03], [0, 0], 0.005).startswith(
        "overlap explains the gain")


@pytest.mark.parametrize("gain, p, starts, absent", [
    (0.02, 0.01, "claim no more than placement gain", "do not claim"),
    (-0.02, 0.01, "there is no gain to explain: the policy is not better",
     "placement gain"),
    (0.02, 0.2, "there is no significant gain to explain", "placement gain"),
    (-0.02, 0.2, "there is no significant gain to explain", "placement gain"),
])
def test_explained_fix_follows_the_gain(gain, p, starts, absent):
    res = _res([-0.0136, -0.0100], [0.0, 0.001], gain=gain)
    out = C.gain_explained_by_overlap(_ctx(res, p), SPEC)
    assert out.recommendation.startswith(starts) and absent not in out.recommendation


def test_explained_fix_names_why_for_a_real_gain():
    assert W.explained_fix(W.BETTER, predicts_gain=False).endswith(
        "the policy's overlap Phi is not shown to be lower than random placement's")
    assert W.explained_fix(W.BETTER, predicts_gain=True).endswith(
        "something besides request overlap drives it")


# -------------------------------------------------------------------------- the headline

@pytest.mark.parametrize("g, ci, has, lacks", [
    (0.0078, [0.0036, 0.0121], ["(95% CI, lies above 0)", ": 0.78 pp fewer requests violate"],
     ["point estimate", "more"]),
    (-0.0118, [-0.0136, -0.0100], ["(95% CI, lies below 0)", ": 1.18 pp more requests"],
     ["fewer", "point estimate"]),
    (0.0020, [-0.0040, 0.0080], ["(95% CI, includes 0)", "a point estimate of 0.20 pp fewer",
                                 "the data do not show"], []),
    (-0.0020, [-0.0080, 0.0040], ["(95% CI, includes 0)", "a point estimate of 0.20 pp more"],
     []),
    (0.0, [-0.004, 0.004], ["the same share of requests violates the SLO"], ["fewer", "more"]),
    (0.0030, None, ["(no CI: too few seeds)", "a point estimate"], []),
])
def test_effect_clause_for_each_side_of_zero(g, ci, has, lacks):
    text, _ = effect_text(g, ci)
    assert text.startswith("G = ") and " pp" in text
    for phrase in has:
        assert phrase in text, (phrase, text)
    for phrase in lacks:
        assert phrase not in text, (phrase, text)


def test_a_claim_with_failed_design_checks_is_not_a_valid_comparison():
    checks = [{"name": "k_match", "passed": False}, {"name": "load_match", "passed": False},
              {"name": "no_sync_present", "passed": False},      # not a design failure
              {"name": "gain_significant", "passed": False}]
    assert W.failed_design_checks(checks) == ["k_match", "load_match"]
    text, direction = effect_text(-0.0778, [-0.18, 0.03], W.failed_design_checks(checks))
    assert "not a valid comparison: k_match, load_match failed" in text
    assert direction == "" and "do not show" not in text and "more requests" not in text
    assert W.failed_design_checks([{"name": "k_match", "passed": None}]) == []


TIERS = [("harness", True), ("matched_budget", False), ("placement_gain", False)]


def _audit(claims, alpha=0.05):
    return {"alternative": "two-sided", "alpha": alpha,
            "protocol": {"multiplicity": "holm", "tiers": [
                {"name": n, "claim": f"claim of {n}", "checks": [],
                 "skip_if_not_evaluable": skip} for n, skip in TIERS]},
            "claims": claims}


def _claim(g, ci, p, **kw):
    base = {"regime": "r", "policy": "fixed_h", "tier": "harness", "mean_diff": g, "ci": ci,
            "p_adjusted": p, "exact": True, "n_seeds": 10, "wins": 2, "underpowered": False,
            "tier_status": {"harness": "passed", "matched_budget": "failed"},
            "checks": [{"name": "gain_significant", "tier": "matched_budget", "blocking": True,
                        "passed": False, "found": "x" * 500}]}
    return {**base, **kw}


@pytest.mark.parametrize("g, ci, p, phrase", [
    (-0.0118, [-0.0136, -0.0100], 0.004, "the policy is " + W.gain_words(W.WORSE)),
    (0.0118, [0.0100, 0.0136], 0.2, "the policy is not shown to differ from matched random"),
    (0.0020, [-0.004, 0.008], 0.6, "the policy is not shown to differ from matched random"),
])
def test_headline_stop_is_derived_and_never_cut(g, ci, p, phrase):
    claim = _claim(g, ci, p)
    h = headline(claim, _audit([claim, _claim(0.01, [0.0, 0.02], 0.5, policy="other")]))
    assert h.stop == f"matched_budget failed (gain_significant: {phrase})"
    sentence = h.sentence()
    assert "\u2026" not in sentence and "x" * 20 not in sentence
    # one p-value, the decision's, with its adjustment named
    assert sentence.count("p = ") == 1 and "Holm-adjusted p = " in sentence
    assert " over 2 claims" in sentence


def test_blocker_phrases_for_design_and_not_evaluable_checks():
    claim = {"seeds_needed": 7, "underpowered": True}
    assert blocker_phrase({"name": "gain_significant", "passed": False}, claim, 0.05) == \
        "underpowered: needs >= 7 seeds"
    assert blocker_phrase({"name": "k_match", "passed": False}, claim, 0.05) == \
        "k_match: the draws' K differs from the policy's"
    assert blocker_phrase({"name": "psi_fit", "passed": None}, claim, 0.05) == \
        "psi_fit not evaluable"
    assert blocker_phrase({"name": "new_check", "passed": False}, claim, 0.05) == \
        "new_check failed"


# ------------------------------------------------------------------ drain curve, transfer

def _bins(ns):
    return [{"lag_lo": 5.0 * i, "lag_hi": 5.0 * (i + 1), "n": n,
             "ratio": 1.2 if n else None, "ci_low": 1.0 if n else None,
             "ci_high": 1.4 if n else None} for i, n in enumerate(ns)]


@pytest.mark.parametrize("ns, drawn", [
    ([1070, 108] + [0] * 10, False),          # the real-plus-twin campaign: 2 of 12 bins
    ([50, 50, 50] + [0] * 9, True),           # exactly MIN_DRAIN_BINS usable bins
    ([50, 50, 4] + [0] * 9, False),           # a bin one request short of MIN_BIN_REQUESTS
    ([50, 50, 5] + [0] * 9, True),
])
def test_drain_curve_is_drawn_only_with_enough_data_per_bin(ns, drawn):
    from evalkit.report.figures import drain_curve_notes, drain_curves, transfer

    mech = {"sync": {"rho_harness": 1.1, "rho_harness_ci": [1.0, 1.2], "rho_real": 1.2,
                     "rho_real_ci": [0.9, 1.5], "drain_curve": {"real": _bins(ns)},
                     "drain_min_requests": 5}}     # the audit's MIN_BIN_REQUESTS, in the document
    assert ("sync real" in drain_curves(mech)) is drawn
    notes = drain_curve_notes(mech)
    if drawn:
        assert notes == [] and "drain curve" in transfer(mech).alt
    else:
        usable = sum(1 for n in ns if n >= 5)
        assert notes == [f"Drain curve sync real not drawn: {usable} of {len(ns)} lag bins "
                         "hold >= 5 paired requests with a CI, and a curve needs >= 3 such "
                         "bins"]
        assert "drain" not in transfer(mech).alt


@pytest.mark.slow          # audits the transfer fixture (~10-25 s on 2 shared cores)
def test_transfer_section_has_no_legacy_label_and_says_why_no_curve(repo_root):
    """The legacy key set to True and a curve with data in 2 of 12 bins: the page shows the
    verdict without "(contaminated)", no drain curve, and the sentence saying why."""
    from evalkit.audit import audit_campaign
    from evalkit.report.render import build_figures, render_html

    audit = audit_campaign(repo_root / "fixtures" / "campaigns" / "transfer").to_dict()
    sync = audit["transfer"]["sync"]
    sync["contaminated"] = True
    sync["drain_curve"]["real"] = _bins([1070, 108] + [0] * 10)
    page = render_html(audit, build_figures(audit))
    section = page[page.index('id="transfer"'):page.index('id="detail"')]
    assert "contaminated" not in section and sync["verdict"] in section
    assert "Drain curve sync real not drawn: 2 of 12 lag bins" in section
    assert "drain: sync real" not in section and "sync harness" in section
