"""`evalkit diff` and `evalkit gate --baseline` on constructed pairs of audits."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.document.tiers import tier_drops
from evalkit.report.diff import DOWN, GONE, NEW, SAME, UP, diff_audits
from evalkit.document.schema import load_audit

TIERS = ["harness", "sidecar_transfer", "matched_budget", "placement_gain", "calibrated",
         "deployable"]


def _claim(policy, tier, g=0.01, ci=(0.005, 0.015), p=0.01, regime="bursty",
           verdict=None):
    return {"regime": regime, "policy": policy, "tier": tier, "mean_diff": g,
            "ci": list(ci) if ci else None, "p_adjusted": p,
            "verdict": verdict or f"verdict at {tier}"}


def _audit(*claims, sha="abc", alpha=0.05, fingerprint="f1"):
    return {"evalkit_version": "0.1.0", "alpha": alpha,
            "protocol": {"name": "diloco-slo", "version": 1, "sha256": sha,
                         "tiers": [{"name": t} for t in TIERS]},
            "provenance": {"input_fingerprint": fingerprint},
            "claims": list(claims)}


def _write(tmp_path, name, audit):
    path = tmp_path / name / "audit.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(audit))
    return path


def test_diff_classifies_every_move():
    old = _audit(_claim("wa", "placement_gain"), _claim("ewma", "matched_budget"),
                 _claim("fixed_h", "harness", g=-0.013), _claim("gone", "calibrated"))
    new = _audit(_claim("wa", "calibrated", g=0.02, ci=(0.01, 0.03), p=0.002),
                 _claim("ewma", "harness", p=0.2, verdict="mechanism only"),
                 _claim("fixed_h", "harness", g=-0.013), _claim("fresh", "matched_budget"))
    moves = {m.policy: m for m in diff_audits(old, new).moves}
    assert {k: m.tier_move for k, m in moves.items()} == {
        "wa": UP, "ewma": DOWN, "fixed_h": SAME, "gone": GONE, "fresh": NEW}
    assert moves["fixed_h"].moved == {}
    wa = moves["wa"].moved
    assert wa["tier"] == ("placement_gain", "calibrated")
    assert wa["G"] == ("+1.00 pp [+0.50, +1.50]", "+2.00 pp [+1.00, +3.00]")
    assert wa["p"] == ("0.01", "0.002")
    assert moves["ewma"].moved["verdict"] == ("verdict at matched_budget", "mechanism only")
    assert [m.policy for m in diff_audits(old, new).drops()] == ["ewma", "gone"]


def test_diff_notes_protocol_and_alpha_changes():
    old = _audit(_claim("wa", "calibrated"), sha="one")
    new = _audit(_claim("wa", "calibrated"), sha="two", alpha=0.01)
    res = diff_audits(old, new)
    notes = " | ".join(res.notes)
    # same rules in another text (the sha256 of the file differs, the content hash not)
    assert "text differs, their rules do not" in notes and res.protocol_changed is None
    assert "alpha changed: 0.05 -> 0.01" in notes
    new["protocol"]["tiers"] = new["protocol"]["tiers"][:-1]       # deployable removed
    res = diff_audits(old, new)
    assert res.protocol_changed and "rules changed" in " | ".join(res.notes)
    assert "same name and version" in res.protocol_changed


def test_diff_cli_text_and_markdown(tmp_path):
    old = _write(tmp_path, "old", _audit(_claim("wa", "placement_gain"),
                                         _claim("x|[y](z)", "harness")))
    new = _write(tmp_path, "new", _audit(_claim("wa", "matched_budget", p=0.04),
                                         _claim("x|[y](z)", "harness")))
    res = CliRunner().invoke(cli, ["diff", str(old), str(new)])
    assert res.exit_code == 0, res.output
    assert "1 of 2 claim(s) moved" in res.output
    assert "bursty/wa: DOWN" in res.output
    assert "tier: placement_gain -> matched_budget" in res.output
    assert "p: 0.01 -> 0.04" in res.output
    assert "unchanged (tier harness" in res.output
    res = CliRunner().invoke(cli, ["diff", str(old.parent), str(new.parent), "--format",
                                   "markdown"])
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("| bursty/")]
    assert len(rows) == 2 and all(line.count(" | ") == 3 for line in rows)   # 4 columns
    assert "\\[y\\]\\(z\\)" in res.output and "x\\|" in res.output          # escaped name
    assert "placement\\_gain → **matched\\_budget**" in res.output


@pytest.mark.parametrize("content, what", [(None, "no such audit file"),
                                           ("{not json", "not valid JSON"),
                                           ('{"claims": 3}', "not an evalkit audit"),
                                           ('{"claims": [{}], "protocol": {}}', "no policy")])
def test_diff_bad_input_exits_2(tmp_path, content, what):
    good = _write(tmp_path, "good", _audit(_claim("wa", "harness")))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    res = CliRunner().invoke(cli, ["diff", str(bad), str(good)])
    assert res.exit_code == 2, res.output
    assert what in res.output and "bad.json" in res.output


def test_tier_drops_counts_missing_claims_and_rejects_unknown_tiers():
    base = _audit(_claim("wa", "placement_gain"), _claim("ewma", None),
                  _claim("gone", "harness"))
    drops = tier_drops(base, {("bursty", "wa"): "matched_budget", ("bursty", "ewma"): None},
                       TIERS)
    assert drops == ["bursty/wa: dropped from placement_gain to matched_budget",
                     "bursty/gone: was harness, now absent from the audit"]
    assert tier_drops(base, {("bursty", "wa"): "calibrated", ("bursty", "gone"): "harness"},
                      TIERS) == []
    with pytest.raises(InputError, match="does not have"):
        tier_drops(_audit(_claim("wa", "platinum")), {}, TIERS)


def test_load_audit_accepts_a_report_directory(tmp_path):
    path = _write(tmp_path, "rep", _audit(_claim("wa", "harness")))
    assert load_audit(path.parent)["claims"][0]["policy"] == "wa"


# ------------------------------------------------------------- gate --baseline on real runs
# the gate reads the campaign's fresh audit.json (a gate of the runs decides the same,
# tests/cli/test_gate.py) instead of auditing the runs again at each call

def _audit_document(protocol=None) -> dict:
    """The audit.json 'evalkit audit' writes for the real_oracle fixture campaign with seed 0
    (the document as the report writes it, tests/report/test_document.py), without drawing
    the report these tests do not read."""
    from tests.conftest import REPO

    from evalkit.audit.result import audit_campaign
    from evalkit.jsonio import canonical_json

    result = audit_campaign(REPO / "fixtures" / "campaigns" / "real_oracle", protocol=protocol,
                            seed=0)
    return json.loads(canonical_json(result.to_dict(), digits=None))


@pytest.fixture(scope="module")
def oracle_audit():
    """audit.json of the real_oracle fixture campaign (claims at two different tiers): its
    golden document, which tests/e2e/test_audit_golden.py holds to a fresh audit."""
    from tests.golden.compare import golden_path

    return json.loads(golden_path("real_oracle").read_text())


@pytest.fixture(scope="module")
def selfreg_oracle_audit():
    """audit.json of the same campaign under the protocol copy that allows self-registration:
    its self-registered claims walk past matched_budget, where the bundled protocol stops them
    (a genuine document whose tiers are above the bundled audit's)."""
    from tests.support.selfreg import SELFREG_PROTOCOL

    return _audit_document(protocol=SELFREG_PROTOCOL)


def _gate(gated, baseline, policy, tier, *extra):
    args = ["gate", str(gated), "--policy", policy, "--tier", tier,
            "--baseline", str(baseline), *extra]
    return CliRunner().invoke(cli, args)


def test_gate_baseline_passes_against_itself_and_fails_on_a_drop(oracle_audit,
                                                                 selfreg_oracle_audit,
                                                                 tmp_path):
    reached = [c for c in oracle_audit["claims"] if c["tier"] is not None]
    assert len(reached) >= 2, "the fixture must reach tiers"
    low = min(reached, key=lambda c: TIERS.index(c["tier"]))
    other = next(c for c in reached if c is not low)

    gated = _write(tmp_path, "gated", oracle_audit)
    same = _gate(gated, _write(tmp_path, "same", oracle_audit), other["policy"], "harness")
    assert same.exit_code == 0, same.output
    assert "baseline PASS" in same.output and "0 fell below their baseline tier" in same.output

    # a baseline whose tier was raised by hand is refused on read, not compared
    raised = copy.deepcopy(oracle_audit)
    edited = next(c for c in raised["claims"] if c["policy"] == low["policy"]
                  and c["regime"] == low["regime"])
    edited["tier"] = TIERS[TIERS.index(low["tier"]) + 1]
    res = _gate(gated, _write(tmp_path, "edited", raised), other["policy"], "harness")
    assert res.exit_code == 2, res.output
    assert "tier" in res.output and edited["tier"] in res.output, res.output

    # a genuine baseline where `low` reached a higher tier (audited under rules that allow
    # self-registration, the change accepted): the gated policy still passes, but the drop
    # fails the build
    up = next(c for c in selfreg_oracle_audit["claims"] if c["policy"] == low["policy"]
              and c["regime"] == low["regime"])
    assert TIERS.index(up["tier"]) > TIERS.index(low["tier"]), up["tier"]
    res = _gate(gated, _write(tmp_path, "higher", selfreg_oracle_audit), other["policy"],
                "harness", "--accept-protocol-change")
    assert res.exit_code == 1, res.output
    assert "gate PASS" in res.output and "baseline FAIL" in res.output
    assert f"dropped from {up['tier']} to {low['tier']}" in res.output
    assert "accepted: --accept-protocol-change" in res.output


def test_gate_baseline_with_an_unknown_tier_exits_2(oracle_audit, tmp_path):
    audit = copy.deepcopy(oracle_audit)
    audit["claims"][0]["tier"] = "platinum"
    res = _gate(_write(tmp_path, "gated", oracle_audit), _write(tmp_path, "weird", audit),
                audit["claims"][0]["policy"], "harness")
    assert res.exit_code == 2, res.output
    assert "platinum" in res.output
