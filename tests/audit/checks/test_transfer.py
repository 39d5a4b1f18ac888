"""Decisions of the sidecar-transfer checks on a stub context."""

from __future__ import annotations

from types import SimpleNamespace

from evalkit.audit.checks import transfer as C

from tests.support.decision_stubs import ctx, spec


# ---------------------------------------------------------------------- sidecar transfer


def _ctx(**kw):
    """A claim context of a summary table (no run logs to look for sidecar evidence in)."""
    return ctx(runset=SimpleNamespace(has_logs=False), **kw)


def _transfer_res(transferred=True, measured=True, drains=True, band=0.0, few=False):
    side = {"n_runs": 2, "n_seeds": 2, "n_active": 40, "drains": drains}
    return {"too_few_seeds": few, "verdict": "cannot be estimated: too few seeds (2 < 5)",
            "rho_real_ci": (1.1, 1.5), "gm_ratio_real_ci": (1.0, 1.2),
            "transfer_fraction_ci": (0.2, 0.9), "rho_real": 1.3, "gm_ratio_real": 1.1,
            "rho_harness": 1.6, "transfer_fraction": 0.5, "method": "paired",
            "transferred": transferred, "guard_band_s": {"real": band, "harness": band},
            "guard_band_measured": measured, "harness": side, "real": side, "notes": []}


def test_transfer_checks():
    sp = spec(mechanism="sync")
    assert C.transfer_ci_excludes_one(_ctx(transfer=lambda s: _transfer_res()), sp).passed
    out = C.transfer_ci_excludes_one(_ctx(transfer=lambda s: _transfer_res(False)), sp)
    assert out.passed is False and "did not transfer" in out.found
    # too few seeds for a CI: said by the estimate's flag, not by its verdict's words
    out = C.transfer_ci_excludes_one(_ctx(transfer=lambda s: _transfer_res(False, few=True)), sp)
    assert out.passed is False and out.found.endswith(": cannot be estimated: too few seeds "
                                                      "(2 < 5)")
    assert out.recommendation == "replay the real and harness campaigns with >= 5 seeds"
    out = C.transfer_ci_excludes_one(_ctx(transfer=lambda s: _transfer_res(False)), sp)
    assert out.found.endswith("the harness effect did not transfer")
    out = C.transfer_ci_excludes_one(_ctx(transfer=lambda s: "no real runs"), sp)
    assert out.evaluable is False and out.found == "no real runs"
    assert C.transfer_paired(_ctx(transfer=lambda s: _transfer_res()), sp).passed is True
    out = C.transfer_paired(_ctx(transfer=lambda s: _transfer_res(measured=False)), sp)
    assert out.evaluable is False and "weaker evidence" in out.found
    out = C.transfer_paired(_ctx(transfer=lambda s: _transfer_res(drains=False, band=20)), sp)
    assert out.passed is True and "still above 1 at 20 s" in out.found
    out = C.transfer_paired(_ctx(transfer=lambda s: _transfer_res(band=15)), sp)
    assert "returns to 1 after 15 s" in out.found
    assert "at 1 from lag 0" in C.transfer_paired(
        _ctx(transfer=lambda s: _transfer_res()), sp).found
