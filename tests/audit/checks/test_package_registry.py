"""The @check registry: a check registered with the decorator is known to the protocol reader
(with its parameters, validated) and reaches audit.json with its status and values, without
editing any list; a check that raises is a bug (exit 3, traceback logged), never a failed
check."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.audit.checks import core as C
from evalkit.audit.protocol import CheckSpec, parse_protocol
from evalkit.cli.main import cli
from evalkit.errors import InputError
from tests.conftest import REPO

CAMPAIGN = REPO / "fixtures" / "campaigns" / "sim_underpowered"


def _protocol(checks: list[str], tables: str = ""):
    listed = ", ".join(f'"{c}"' for c in checks)
    text = (f'[protocol]\nname = "probe"\nalpha = 0.05\ntier_order = ["matched_budget"]\n\n'
            f'[tiers.matched_budget]\nclaim = "probe"\nchecks = [{listed}]\n\n[checks]\n{tables}')
    return parse_protocol(text, source="p.toml", file="p.toml")


@pytest.fixture
def probes():
    """Two checks registered for the test only, removed afterwards."""
    @C.check("probe_seed_count", params={"at_least": ((int,), 1)}, tier="matched_budget")
    def probe_seed_count(ctx, spec):
        n = len(ctx.claim.pairs)
        return C.Outcome(n >= spec["at_least"], f">= {spec['at_least']} seeds", f"{n} seeds",
                         values={"n": n})

    @C.check("probe_raises", tier="matched_budget")
    def probe_raises(ctx, spec):
        raise RuntimeError("the probe exploded")

    yield
    for name in ("probe_seed_count", "probe_raises"):
        for table in (C.CHECKS, C.CHECK_PARAMS, C.CHECK_TIERS):
            table.pop(name, None)


def test_a_registered_check_reaches_the_protocol_and_the_audit_json(probes):
    proto = _protocol(["probe_seed_count", "probe_raises"],
                      "[checks.probe_seed_count]\nat_least = 3\n")
    assert proto.checks["probe_seed_count"].params == {"at_least": 3}
    assert proto.to_dict()["checks"]["probe_seed_count"]["at_least"] == 3
    # the registry's parameters are validated like the built-in checks' ones
    with pytest.raises(InputError) as err:
        _protocol(["probe_seed_count"], "[checks.probe_seed_count]\nat_most = 3\n")
    assert err.value.column == "checks.probe_seed_count.at_most" and "at_least" in err.value.fix
    with pytest.raises(InputError) as err:
        _protocol(["probe_seed_count"], '[checks.probe_seed_count]\nat_least = "3"\n')
    assert err.value.column == "checks.probe_seed_count.at_least"
    with pytest.raises(InputError) as err:
        _protocol(["probe_unknown"])
    assert "probe_seed_count" in err.value.fix        # the error lists the registered checks

    doc = json.loads(audit_campaign(CAMPAIGN, protocol=_protocol(
        ["probe_seed_count"], "[checks.probe_seed_count]\nat_least = 3\n")).to_json())
    assert doc["protocol"]["checks"]["probe_seed_count"]["at_least"] == 3
    for claim in doc["claims"]:
        checks = {c["name"]: c for c in claim["checks"]}
        assert set(checks) == {"probe_seed_count"}
        mine = checks["probe_seed_count"]
        n = mine["values"]["n"]
        assert mine["found"] == f"{n} seeds" and n == len(claim["seeds"]) > 0
        assert mine["status"] == ("passed" if n >= 3 else "failed")
        assert mine["passed"] is (n >= 3)


def test_a_check_that_raises_is_exit_3_with_its_traceback_logged(probes, tmp_path,
                                                                  monkeypatch):
    """Never a "failed check": a bug inside a check stops the audit (exit 3) and the
    traceback goes to the log, not into audit.json."""
    with pytest.raises(RuntimeError, match="the probe exploded"):
        audit_campaign(CAMPAIGN, protocol=_protocol(["probe_seed_count", "probe_raises"]))
    (tmp_path / "p.toml").write_text(
        '[protocol]\nname = "probe"\nalpha = 0.05\ntier_order = ["matched_budget"]\n\n'
        '[tiers.matched_budget]\nclaim = "probe"\nchecks = ["probe_raises"]\n\n[checks]\n')
    monkeypatch.setenv("EVALKIT_LOG_DIR", str(tmp_path / "logs"))
    res = CliRunner().invoke(cli, ["audit", str(CAMPAIGN), "--protocol",
                                   str(tmp_path / "p.toml"), "--out", str(tmp_path / "out")])
    assert res.exit_code == 3, res.output
    logged = "".join(p.read_text() for p in (tmp_path / "logs").rglob("*") if p.is_file())
    assert "RuntimeError: the probe exploded" in logged and "Traceback" in logged
    assert not (tmp_path / "out" / "audit.json").exists()


def test_a_name_registered_twice_is_refused(probes):
    with pytest.raises(ValueError, match="registered twice"):
        @C.check("probe_seed_count")
        def another(ctx, spec):
            return C.Outcome(True, "e", "f")


def test_every_check_module_registers_through_the_decorator():
    # the families and the plan / like-for-like / drift modules: one registry, one entry each
    assert set(C.CHECKS) == set(C.CHECK_PARAMS) == set(C.CHECK_TIERS)
    assert len(C.CHECKS) == 27
    assert C.CHECK_TIERS["registration"] == "placement_gain"
    assert C.CHECK_TIERS["gain_significant"] == "matched_budget"
    assert C.CHECK_TIERS["psi_fit"] == "calibrated"
    assert C.CHECK_PARAMS["execution_drift"]["require_run_order"] == ((bool,), False)
    assert C.CHECK_CHOICES[("transfer_paired", "mechanism")] == ("sync",)


@pytest.mark.parametrize("outcome, status", [
    (C.Outcome(True, "e", "f"), C.Status.PASSED),
    (C.Outcome(False, "e", "f"), C.Status.FAILED),
    (C.Outcome(False, "e", "f", status=C.Status.UNDERPOWERED), C.Status.UNDERPOWERED),
    (C.Outcome(False, "e", "f", status=C.Status.NEGLIGIBLE), C.Status.NEGLIGIBLE),
    (C.not_evaluable("e", "f"), C.Status.NOT_EVALUABLE),
])
def test_run_check_status_comes_from_the_outcome_not_the_text(outcome, status):
    C.CHECKS["_probe_status"] = lambda ctx, spec: outcome
    try:
        spec = CheckSpec("_probe_status", "d", "block")
        got = C.run_check("_probe_status", "t", SimpleNamespace(), spec)
        assert got.status is status and got.to_dict()["status"] == status.value
        vouch = CheckSpec("_probe_status", "d", "vouch")
        got = C.run_check("_probe_status", "t",
                          SimpleNamespace(protocol=SimpleNamespace(accept_vouched=True)), vouch)
        assert got.status is (C.Status.VOUCHED if status is C.Status.NOT_EVALUABLE else status)
    finally:
        C.CHECKS.pop("_probe_status")


def test_an_outcome_cannot_call_a_pass_underpowered():
    with pytest.raises(ValueError):
        C.Outcome(True, "e", "f", status=C.Status.UNDERPOWERED)
    with pytest.raises(ValueError):
        C.Outcome(False, "e", "f", status=C.Status.PASSED)
