"""Sidecar-transfer checks: the harness effect, paired against no-sync per seed, on a real
sidecar (:mod:`evalkit.audit.transfer_evidence`)."""

from __future__ import annotations

from evalkit.audit.checks.core import Outcome, _fmt, _listing, check, not_evaluable
from evalkit.audit.checks.deployable import sidecar_evidence

__all__ = ["transfer_ci_excludes_one", "transfer_paired", "unshown_real_runs"]

TIER = "sidecar_transfer"
_LIST = (list,)
_NUM = (int, float)
# both transfer checks share one estimate (evalkit.audit.transfer_evidence): same parameters
TRANSFER_PARAMS = {"mechanism": ((str,), "sync"), "harness_backends": (_LIST, ["sim"]),
                   "real_backends": (_LIST, ["torch", "vllm"]), "block_s": (_NUM, 30.0),
                   "drain_bin_s": (_NUM, 5.0), "drain_max_lag_s": (_NUM, 60.0),
                   "fallback_guard_band_s": ((int, float, list), 30.0),
                   "fallback_length_strata": ((int,), 10)}


def unshown_real_runs(ctx, spec) -> Outcome | None:
    """A failure when a run the transfer estimate takes as real serving (its backend string
    is one of ``real_backends``) lacks a real sidecar's evidence; None otherwise.  Asked only
    once the estimate exists (a campaign without both sides leaves the tier not evaluable)."""
    runset = ctx.runset
    if not runset.has_logs:
        return None
    runs = runset.runs
    real = runs.loc[runs.backend.isin(spec["real_backends"]), "run_id"].tolist()
    unshown = [f"{r}: {why}" for r in real if (why := sidecar_evidence(runset, r)) is not None]
    if not unshown:
        return None
    return Outcome(False, "every run taken as real serving carries a real sidecar's evidence "
                   "(metrics scrapes joined to the client's requests)",
                   f"{len(unshown)} run(s) labelled {'/'.join(spec['real_backends'])} without "
                   "it: " + _listing(unshown, 3),
                   "replay the real side on a real serving sidecar with its metrics scrape "
                   "on; a backend name in run.json is not evidence")


@check("transfer_ci_excludes_one", params=TRANSFER_PARAMS, tier=TIER,
       choices={"mechanism": ("sync",)})
def transfer_ci_excludes_one(ctx, spec) -> Outcome:
    expected = (f"real-sidecar rho_{spec['mechanism'][0]} (p95 of the in-window requests over "
                "the same requests in the seed's no-sync run) with a 95% CI above 1")
    res = ctx.transfer(spec)
    if isinstance(res, str):
        return not_evaluable(expected, res)
    if (unshown := unshown_real_runs(ctx, spec)) is not None:
        return unshown
    lo, hi = res["rho_real_ci"]
    glo, ghi = res["gm_ratio_real_ci"]
    f_lo, f_hi = res["transfer_fraction_ci"]
    found = (f"rho_real = {_fmt(res['rho_real'])} [{_fmt(lo)}, {_fmt(hi)}] (mean-log ratio "
             f"{_fmt(res['gm_ratio_real'])} [{_fmt(glo)}, {_fmt(ghi)}]), rho_harness = "
             f"{_fmt(res['rho_harness'])}, transfer fraction {_fmt(res['transfer_fraction'])} "
             f"[{_fmt(f_lo)}, {_fmt(f_hi)}]; {res['method']}")
    if res["transferred"]:
        return Outcome(True, expected, found)
    if res["too_few_seeds"]:
        return Outcome(False, expected, found + ": " + res["verdict"],
                       "replay the real and harness campaigns with >= 5 seeds")
    return Outcome(False, expected, found + ": the harness effect did not transfer",
                   "the mechanism is not shown in real serving; do not cite harness effect "
                   "sizes as real")


@check("transfer_paired", params=TRANSFER_PARAMS, tier=TIER,
       choices={"mechanism": ("sync",)})
def transfer_paired(ctx, spec) -> Outcome:
    """rho paired against no-sync on both sides, with the measured drain curve; the
    guard-band fallback (no no-sync pairing) is weaker evidence and not evaluable here."""
    expected = ("both sides paired against the same requests in each seed's no-sync run, "
                "with the post-window drain curve measured")
    res = ctx.transfer(spec)
    if isinstance(res, str):
        return not_evaluable(expected, res)
    if (unshown := unshown_real_runs(ctx, spec)) is not None:
        return unshown
    band = res["guard_band_s"]
    if not res["guard_band_measured"]:
        return not_evaluable(
            expected, f"weaker evidence only ({res['method']}): no no-sync run to pair with, "
                      f"so the post-window effect was assumed to end after "
                      f"{_fmt(band['real'])} s, not measured. " + " ".join(res["notes"]),
            "replay a load-matched no-sync run for every seed on both backends")
    parts = []
    for side in ("harness", "real"):
        d = res[side]
        drained = ("at 1 from lag 0 (no post-window effect)" if d["drains"] and not band[side]
                   else "returns to 1 after " + _fmt(band[side]) + " s" if d["drains"] else
                   f"still above 1 at {_fmt(band[side])} s")
        parts.append(f"{side}: {d['n_runs']} runs over {d['n_seeds']} seeds paired, "
                     f"{d['n_active']} in-window requests, drain curve {drained}")
    note = (" (" + "; ".join(res["notes"]) + ")") if res["notes"] else ""
    return Outcome(True, expected, "; ".join(parts) + note)
