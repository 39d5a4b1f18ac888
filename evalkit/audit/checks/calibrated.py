"""Calibrated checks: psi fitted on the regime's runs, and the gain explained by request overlap."""

from __future__ import annotations

from evalkit.document import words as wording
from evalkit.audit.checks.core import Outcome, check, not_evaluable
from evalkit.document.words import pp

__all__ = ["gain_explained_by_overlap", "psi_fit"]

TIER = "calibrated"
_NUM = (int, float)


@check("psi_fit", params={"min_runs": ((int,), 6)}, tier=TIER)
def psi_fit(ctx, spec) -> Outcome:
    expected = (f"isotonic psi fitted on >= {spec['min_runs']} runs of the regime, eps_cal "
                "reported in-sample and leave-one-seed-out")
    ev = ctx.regime_evidence
    if ev.psi is None:
        return not_evaluable(expected, ev.psi_reason,
                             "audit a runs directory with no-sync runs to fit psi")
    n = len(ev.phi_table)
    found = (f"eps_cal = {pp(ev.psi.eps_cal, signed=False)} pp in-sample, "
             f"{pp(ev.psi.eps_cal_loso, signed=False)} pp leave-one-seed-out, {n} runs")
    if n < spec["min_runs"]:
        return Outcome(False, expected, found, "replay more runs in this regime")
    return Outcome(True, expected, found)


@check("gain_explained_by_overlap", params={"unexplained_tolerance": (_NUM, 0.25)},
       tier=TIER)
def gain_explained_by_overlap(ctx, spec) -> Outcome:
    """Inference on the claim: the gain psi (leave-one-seed-out) predicts from the policy's
    and the draws' overlap Phi, against the gain measured (:mod:`evalkit.stats.explained`)."""
    tol = float(spec["unexplained_tolerance"])
    level = 1 - ctx.alpha
    expected = (f"psi-predicted gain G_pred (psi refitted leave-one-seed-out) with a "
                f"{level:.0%} CI above 0, and the unexplained part G - G_pred shown small: "
                f"its {1 - 2 * ctx.alpha:.0%} CI inside +-{tol:g} x |G| (equivalence, TOST "
                f"at alpha = {ctx.alpha:g})")
    ev = ctx.regime_evidence
    if ev.psi is None:
        return not_evaluable(expected, ev.psi_reason)
    res, reason = ev.explained_gain(ctx.claim, ctx.protocol.bootstrap_resamples,
                                    ctx.rng(3), level, tol)
    if res is None:
        return not_evaluable(expected, reason)
    (g_lo, g_hi), (u_lo, u_hi) = res.g_pred_ci, res.unexplained_ci
    found = (f"G = {pp(res.gain)} pp, G_pred = {pp(res.g_pred)} pp [{pp(g_lo)}, {pp(g_hi)}], "
             f"G - G_pred = {pp(res.unexplained)} pp [{pp(u_lo)}, {pp(u_hi)}] "
             f"({res.equivalence_level:.0%} CI; tolerance "
             f"+-{pp(res.tolerance_abs, signed=False)} pp) over {res.n_seeds} seeds; eps_cal "
             f"{pp(ev.psi.eps_cal, signed=False)} pp in-sample, "
             f"{pp(ev.psi.eps_cal_loso, signed=False)} pp leave-one-seed-out"
             + (f"; {reason}" if reason else ""))
    if res.explained:
        return Outcome(True, expected, found)
    state = wording.gain_state(res.gain, getattr(ctx, "p_adjusted", None), ctx.alpha)
    reason = wording.explained_reason(res.predicts_gain, res.within_tolerance, res.g_pred_ci,
                                      res.unexplained_ci, res.tolerance_abs)
    return Outcome(False, expected, f"{found}: {reason}",
                   wording.explained_fix(state, res.predicts_gain))
