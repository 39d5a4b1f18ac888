"""The gate compares the protocol's rules, not its name: content hash in audit.json, edited or
loosened rules, a shopped audit seed, older baselines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli

from tests.support.rule_attacks import (PROTOCOL, _baseline, _worse_policy, base, base_audit, gate,
                                        runs)


def _protocol_without(path: Path, *names: str) -> Path:
    """The bundled protocol, same name and version, with checks removed from their tier."""
    import re

    text = PROTOCOL.read_text()
    for name in names:
        text = re.sub(rf',\s*"{name}"|"{name}",\s*', "", text, count=1)
        text = re.sub(rf"\[checks\.{name}\]\n(?:(?!\[).*\n)*", "", text)
    path.write_text(text)
    return path


def test_audit_json_records_the_protocols_content_hash(base_audit, tmp_path):
    from evalkit.audit.protocol import load_protocol

    audit = base_audit
    assert audit["protocol"]["content_sha256"] == load_protocol().content_sha256
    # a comment or description is a label: the same rules, the same content hash
    reworded = tmp_path / "reworded.toml"
    reworded.write_text("# reworded\n" + PROTOCOL.read_text().replace(
        'description = "every seed of the policy has at least one matched-random draw"',
        'description = "each seed has a draw"'))
    from evalkit.audit.protocol import load_protocol as load

    assert load(str(reworded)).content_sha256 == load_protocol().content_sha256
    assert load(str(reworded)).sha256 != load_protocol().sha256


def test_gate_fails_when_a_pull_request_edits_the_protocol(runs, tmp_path, base):
    # the pull request makes wa worse and removes the two checks that would catch it from
    # a protocol file of the same name and version
    assert gate(runs, "--baseline", str(base)).exit_code == 0
    _worse_policy(runs)
    edited = _protocol_without(tmp_path / "diloco-slo.toml", "enough_seeds", "gain_significant")
    assert gate(runs).exit_code == 1                      # the real rules catch it
    res = gate(runs, "--protocol", str(edited), "--baseline", str(base))
    assert res.exit_code == 1, res.output
    assert "gate PASS (protocol changed since the baseline)" in res.output
    assert "baseline FAIL" in res.output and "protocol's rules changed" in res.output
    assert "same name and version" in res.output and "gain_significant" in res.output
    assert "--accept-protocol-change" in res.output
    # accepted on purpose: the gate passes and says the protocol changed
    res = gate(runs, "--protocol", str(edited), "--baseline", str(base),
               "--accept-protocol-change")
    assert res.exit_code == 0, res.output
    assert "protocol changed since the baseline" in res.output and "accepted" in res.output
    # and the verdict does not call a loss a win: G < 0 reads "no win ... is shown"
    wa = audit_campaign(runs, protocol=str(edited)).claim("wa")
    assert wa.tier == "matched_budget" and wa.sign_flip.statistic < 0
    assert "beats" not in wa.verdict and "no win over matched random is shown" in wa.verdict


@pytest.mark.parametrize("flag", [("--alpha", "0.2"), ("--accept-vouched",)])
def test_gate_fails_when_the_rules_are_loosened_on_the_command_line(runs, base, flag):
    # own attack: the same protocol file, loosened by a flag at gate time (alpha 0.2, or
    # vouching for what cannot be checked) -- a rule change like an edited file
    res = gate(runs, "--baseline", str(base), *flag)
    assert res.exit_code == 1, res.output
    assert "protocol's rules changed" in res.output
    assert gate(runs, "--baseline", str(base), *flag,
                "--accept-protocol-change").exit_code == 0


def test_gate_fails_when_the_audit_seed_is_shopped(runs, base):
    # own attack: another --seed draws another Monte Carlo / bootstrap stream; trying seeds
    # until one passes is a rule change too
    res = gate(runs, "--baseline", str(base), "--seed", "7")
    assert res.exit_code == 1 and "the audit seed changed (0 -> 7)" in res.output
    assert gate(runs, "--baseline", str(base), "--seed", "7",
                "--accept-protocol-change").exit_code == 0


def test_an_older_baseline_without_a_content_hash_is_compared_by_its_rules(runs, base):
    audit = json.loads(base.read_text())
    del audit["protocol"]["content_sha256"]
    base.write_text(json.dumps(audit))
    assert gate(runs, "--baseline", str(base)).exit_code == 0
    audit["protocol"]["tiers"][2]["checks"].remove("gain_significant")
    base.write_text(json.dumps(audit))
    res = gate(runs, "--baseline", str(base))
    assert res.exit_code == 1 and "protocol's rules changed" in res.output


def test_diff_exits_1_on_a_protocol_change_when_asked(runs, tmp_path, base):
    old = base
    edited = _protocol_without(tmp_path / "diloco-slo.toml", "enough_seeds", "gain_significant")
    new = _baseline(runs, tmp_path / "new", "--protocol", str(edited))
    plain = CliRunner().invoke(cli, ["diff", str(old), str(new)])
    assert plain.exit_code == 0 and "protocol's rules changed" in plain.output
    res = CliRunner().invoke(cli, ["diff", str(old), str(new), "--fail-on-protocol-change"])
    assert res.exit_code == 1 and "diff FAIL" in res.output
    same = CliRunner().invoke(cli, ["diff", str(old), str(old), "--fail-on-protocol-change"])
    assert same.exit_code == 0, same.output
