"""Protocol files: the bundled hierarchy, validation errors naming key and line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from evalkit.audit.protocol import load_protocol, parse_protocol
from evalkit.config import find_key_line
from evalkit.cli.main import cli
from evalkit.errors import InputError


@pytest.fixture
def protocol_text(repo_root):
    return (repo_root / "protocols" / "diloco-slo.toml").read_text()


def test_bundled_protocol_encodes_the_hierarchy():
    p = load_protocol()
    assert p.tier_names == ("harness", "sidecar_transfer", "matched_budget", "placement_gain",
                            "calibrated", "deployable")
    assert p.alpha == 0.05 and p.alternative == "two-sided" and p.multiplicity == "holm"
    assert p.tier("matched_budget").checks == (
        "matched_random_present", "policy_runs_complete", "k_match", "pairing_real",
        "schedules_in_corridor", "merge_durations_match", "open_loop_sending",
        "like_for_like", "plan_complete", "draws_as_planned", "plan_rules", "draws_phi_uniform",
        "enough_seeds", "gain_significant", "execution_drift")
    assert p.tier("deployable").checks == ("not_oracle", "real_sidecar", "pre_registered")
    assert p.checks["gain_explained_by_overlap"]["unexplained_tolerance"] == 0.25
    assert p.tier("sidecar_transfer").checks == ("transfer_ci_excludes_one", "transfer_paired")
    assert p.checks["load_match"]["tolerances"]["arrival_rate_achieved"] == 0.02
    assert p.tier("harness").skip_if_not_evaluable and not p.tier("calibrated").skip_if_not_evaluable
    assert p.source == "builtin:diloco-slo" and len(p.sha256) == 64


def test_load_by_path_and_alpha_override(repo_root):
    p = load_protocol(repo_root / "protocols" / "diloco-slo.toml")
    assert p.source == "diloco-slo.toml"
    assert p.with_alpha(0.01).alpha == 0.01
    with pytest.raises(InputError, match="alpha"):
        p.with_alpha(1.5)


def test_unknown_protocol_name_lists_bundled():
    with pytest.raises(InputError, match="diloco-slo"):
        load_protocol("no-such-protocol")


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("old, new, key", [
    ("alpha = 0.05", "alpha = 1.5", "protocol.alpha"),
    ("alpha = 0.05", "alpha = \"0.05\"", "protocol.alpha"),
    ('alternative = "two-sided"', 'alternative = "sideways"', "protocol.alternative"),
    ("min_seeds = 5", "min_seeds = 5.5", "checks.enough_seeds.min_seeds"),
    ('checks = ["no_sync_present", "load_match"]', 'checks = ["no_sync_present", "nosync"]',
     "tiers.placement_gain.checks"),
    ("step_rate = 0.05", "step_rate = -1", "checks.load_match.tolerances.step_rate"),
    ("unexplained_tolerance = 0.25", 'unexplained_tolerance = "a quarter"',
     "checks.gain_explained_by_overlap.unexplained_tolerance"),
    ("drain_bin_s = 5.0", 'drain_bin_s = "5 s"', "checks.transfer_ci_excludes_one.drain_bin_s"),
    ("min_runs = 6", "min_runs = 6\nbogus = 1", "checks.psi_fit.bogus"),
])
def test_semantic_error_names_key_and_line(protocol_text, old, new, key):
    assert old in protocol_text
    bad = protocol_text.replace(old, new)
    with pytest.raises(InputError) as info:
        parse_protocol(bad, source="bad.toml", file="bad.toml")
    line = _line_of(bad, new.splitlines()[-1])
    assert info.value.column == key
    assert info.value.file == f"bad.toml:{line}"
    assert f"line {line}" in str(info.value)


def test_missing_tier_table_points_at_its_parent(protocol_text):
    start = protocol_text.index("[tiers.calibrated]")
    end = protocol_text.index("[tiers.deployable]")
    bad = protocol_text[:start] + protocol_text[end:]
    with pytest.raises(InputError) as info:
        parse_protocol(bad, source="bad.toml", file="bad.toml")
    assert info.value.column == "tiers.calibrated"
    assert "missing" in str(info.value)


def test_syntax_error_reports_tomllib_line(protocol_text):
    bad = protocol_text.replace("[checks.psi_fit]", "[checks.psi_fit")
    with pytest.raises(InputError) as info:
        parse_protocol(bad, source="bad.toml", file="bad.toml")
    line = _line_of(bad, "[checks.psi_fit")
    assert info.value.file == f"bad.toml:{line}"


def test_find_key_line_handles_tables_and_dotted_keys():
    text = "[a]\nx = 1\n[a.b]\ny = 2\nz = {w = 3}\n"
    assert find_key_line(text, "a.x") == 2
    assert find_key_line(text, "a.b") == 3
    assert find_key_line(text, "a.b.y") == 4
    assert find_key_line(text, "a.b.z.w") == 5
    assert find_key_line(text, "a.b.missing") == 3


def test_cli_rejects_bad_protocol_with_exit_2(tmp_path, protocol_text, fixtures_dir):
    bad = tmp_path / "mine.toml"
    bad.write_text(protocol_text.replace("alpha = 0.05", "alpha = 2"))
    res = CliRunner().invoke(cli, ["audit", str(fixtures_dir / "campaigns" / "summary_table.csv"),
                                   "--protocol", str(bad), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "protocol.alpha" in res.output and f"line {_line_of(protocol_text, 'alpha = 0.05')}" \
        in res.output
    assert not (tmp_path / "out").exists()


def test_a_protocol_cut_at_a_tier_keeps_the_whole_protocols_content_sha256():
    # a plan freezes the whole protocol; --until-decided audits only up to the gate's tier
    whole = load_protocol(None)
    cut = whole.up_to("matched_budget")
    assert cut.tier_names == whole.tier_names[:whole.tier_names.index("matched_budget") + 1]
    assert len(cut.tier_names) < len(whole.tier_names)
    assert cut.content_sha256 == whole.content_sha256
    assert whole.with_alpha(0.01).up_to("matched_budget").content_sha256 != whole.content_sha256
