"""Protocol files: the bundled hierarchy, validation errors naming key and line.

Boundaries of protocol files: every default pinned against the shipped protocol, every
validation error at the value where it flips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.audit.checks.core import CHECK_PARAMS
from evalkit.audit.protocol import load_protocol, parse_protocol
from evalkit.cli.main import cli
from evalkit.config import find_key_line
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
    ('checks = ["no_sync_present", "load_match", "registration"]',
     'checks = ["no_sync_present", "nosync", "registration"]',
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


REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "protocols" / "diloco-slo.toml"

# ================================================================================ protocol

ALL_CHECKS = ", ".join(f'"{name}"' for name in CHECK_PARAMS)


def mini(*, head="", order='["matched_budget"]', tiers=None, checks="", top=""):
    """A protocol with one tier holding every check and no check parameters."""
    if tiers is None:
        tiers = f'[tiers.matched_budget]\nclaim = "beats random"\nchecks = [{ALL_CHECKS}]\n'
    return (f'{top}[protocol]\nname = "mini"\nalpha = 0.05\ntier_order = {order}\n{head}\n'
            f'{tiers}[checks]\n{checks}')


def parse(text):
    return parse_protocol(text, source="p.toml", file="p.toml")


def parse_error(text, match):
    with pytest.raises(InputError, match=match) as info:
        parse(text)
    return info.value


def test_protocol_defaults_of_every_check_parameter():
    p = parse(mini())
    transfer = {"mechanism": "sync", "harness_backends": ["sim"],
                "real_backends": ["torch", "vllm"], "block_s": 30.0, "drain_bin_s": 5.0,
                "drain_max_lag_s": 60.0, "fallback_guard_band_s": 30.0,
                "fallback_length_strata": 10}
    expected = {
        "fixed_cadence_baseline": {"policies": ["fixed_h"], "harness_backends": ["sim"]},
        "deferral_baseline": {"policies": ["pressure_gate", "random_deferral"],
                              "harness_backends": ["sim"]},
        "transfer_ci_excludes_one": transfer, "transfer_paired": transfer,
        "matched_random_present": {"min_draws": 1}, "policy_runs_complete": {},
        "schedules_in_corridor": {"tolerance_s": 0.05}, "merge_durations_match": {"rel_tol": 0.25},
        "open_loop_sending": {"max_completion_tied_share": 0.2,
                              "max_identical_arrival_share": 0.2},
        "k_match": {"max_abs_diff": 0}, "pairing_real": {}, "enough_seeds": {"min_seeds": 5},
        "gain_significant": {"min_effect": 0.005}, "no_sync_present": {},
        "execution_drift": {"max_explained_share": 0.5, "load_rel_tol": 0.05,
                            "probe_rel_tol": 0.25, "require_run_order": False},
        "load_match": {"tolerances": {}},
        "psi_fit": {"min_runs": 6}, "gain_explained_by_overlap": {"unexplained_tolerance": 0.25},
        "not_oracle": {}, "real_sidecar": {"real_backends": ["torch", "vllm"],
                                           "server_time_allowance_s": 0.05,
                                           "server_time_min_share": 0.99},
        "like_for_like": {"step_rel_tol": 0.5, "min_training_coverage": 0.95,
                          "max_idle_steps": 20.0},
        "plan_complete": {}, "draws_as_planned": {"tolerance_s": 0.05, "start_lag_s": 0.25}, "plan_rules": {},
        "draws_phi_uniform": {"n_reference": 999, "min_p": 0.001}, "pre_registered": {},
        "registration": {"allow_self_registered": False},
    }
    assert {name: spec.params for name, spec in p.checks.items()} == expected
    for name, spec in p.checks.items():
        assert spec.description == name and spec.on_not_evaluable == "block"
    assert (p.n_resamples, p.bootstrap_resamples, p.version) == (20000, 2000, 1)
    assert (p.alternative, p.multiplicity, p.description) == ("two-sided", "holm", "")
    assert p.accept_vouched is False
    assert p.tiers[0].skip_if_not_evaluable is False and p.tiers[0].claim == "beats random"


def test_protocol_defaults_are_the_shipped_values():
    """Every parameter the bundled file writes out equals the parser's default for it
    (load_match tolerances excepted: the file sets them, the default is none)."""
    shipped, defaults = load_protocol(), parse(mini())
    for name, spec in shipped.checks.items():
        params = dict(spec.params)
        if name == "load_match":
            params.pop("tolerances")
        assert params == {k: v for k, v in defaults.checks[name].params.items()
                          if k in params}, name
    assert shipped.n_resamples == defaults.n_resamples
    assert shipped.bootstrap_resamples == defaults.bootstrap_resamples
    # a file without a version is v1; the bundled file is v2 (it lists registration)
    assert (defaults.version, shipped.version) == (1, 2)


@pytest.mark.parametrize("alpha, ok", [("0", False), ("0.0", False), ("1e-9", True),
                                       ("0.999", True), ("1", False), ("1.0", False),
                                       ("1.01", False), ("-0.05", False)])
def test_protocol_alpha_lies_strictly_inside_zero_one(alpha, ok):
    text = mini().replace("alpha = 0.05", f"alpha = {alpha}")
    if ok:
        assert parse(text).alpha == float(alpha)
    else:
        err = parse_error(text, r"alpha must lie in \(0, 1\)")
        assert err.column == "protocol.alpha" and err.file == "p.toml:3"


def test_protocol_with_alpha_bounds_and_identity():
    p = parse(mini())
    assert p.with_alpha(None) is p
    assert p.with_alpha(0.5).alpha == 0.5 and p.with_alpha(1e-9).alpha == 1e-9
    for bad in (0, 0.0, 1, 1.0, 1.5, -0.1):
        with pytest.raises(InputError, match="alpha must lie in") as info:
            p.with_alpha(bad)
        assert info.value.column == "alpha"


@pytest.mark.parametrize("key, default", [("n_resamples", 20000),
                                          ("bootstrap_resamples", 2000)])
@pytest.mark.parametrize("value, ok", [(99, False), (100, True), (1_000_000, True),
                                       (1_000_001, False), (0, False)])
def test_protocol_resample_counts_range(key, default, value, ok):
    text = mini(head=f"{key} = {value}")
    if ok:
        assert getattr(parse(text), key) == value
    else:
        err = parse_error(text, f"{key} is out of range")
        assert err.column == f"protocol.{key}" and err.file == "p.toml:5"
        assert "[100, 1,000,000]" in err.fix and f"e.g. {default}" in err.fix


def test_protocol_tier_order_accepts_each_known_tier():
    for tier in ("harness", "deployable"):
        p = parse(mini(order=f'["{tier}"]', tiers=f'[tiers.{tier}]\nclaim = "x"\n'
                       f'checks = [{ALL_CHECKS}]\n'))
        assert p.tier_names == (tier,) and p.tier(tier).checks == tuple(CHECK_PARAMS)


def test_protocol_unknown_tier_named_even_with_its_table():
    err = parse_error(mini(order='["golden"]', tiers='[tiers.golden]\nclaim = "x"\n'
                           'checks = []\n'), "unknown tier 'golden'")
    assert err.column == "protocol.tier_order" and "harness" in err.fix


@pytest.mark.parametrize("order", ['[]', '["matched_budget", "harness"]',
                                   '["harness", "harness"]'])
def test_protocol_tier_order_distinct_non_empty_in_order(order):
    tiers = "[tiers]\n" + "".join(f'[tiers.{t}]\nclaim = "x"\nchecks = []\n'
                                  for t in ("harness", "matched_budget") if t in order)
    err = parse_error(mini(order=order, tiers=tiers), "distinct, non-empty and in hierarchy")
    assert err.column == "protocol.tier_order"


def test_protocol_two_tiers_in_order_keep_their_checks():
    tiers = ('[tiers.harness]\nclaim = "h"\nskip_if_not_evaluable = true\n'
             'checks = ["fixed_cadence_baseline"]\n'
             '[tiers.matched_budget]\nclaim = "m"\nchecks = ["k_match", "enough_seeds"]\n')
    p = parse(mini(order='["harness", "matched_budget"]', tiers=tiers))
    assert p.tier_names == ("harness", "matched_budget")
    assert p.tier("harness").skip_if_not_evaluable is True
    assert p.tier("matched_budget").checks == ("k_match", "enough_seeds")
    assert sorted(p.checks) == ["enough_seeds", "fixed_cadence_baseline", "k_match"]
    with pytest.raises(InputError, match="tier 'deployable' is not in protocol 'mini'"):
        p.tier("deployable")


@pytest.mark.parametrize("text, key", [
    (lambda: mini(top="extra = 1\n"), "extra"),
    (lambda: mini(head="colour = 1"), "protocol.colour"),
    (lambda: mini() .replace("[checks]", '[tiers.harness]\nclaim = "x"\nchecks = []\n[checks]'),
     "tiers.harness"),
    (lambda: mini().replace('claim = "beats random"', 'claim = "x"\nweight = 2'),
     "tiers.matched_budget.weight"),
    (lambda: mini(tiers='[tiers.matched_budget]\nclaim = "x"\nchecks = ["k_match"]\n',
                  checks="[checks.psi_fit]\nmin_runs = 6\n"), "checks.psi_fit"),
    (lambda: mini(checks="[checks.k_match]\nmax_abs = 1\n"), "checks.k_match.max_abs"),
])
def test_protocol_unknown_keys_at_every_level(text, key):
    err = parse_error(text(), "unknown key")
    assert err.column == key and err.fix.startswith("remove it or use one of: ")


def test_protocol_check_errors():
    err = parse_error(mini(tiers='[tiers.matched_budget]\nclaim = "x"\nchecks = ["nosync"]\n'),
                      "unknown check 'nosync'")
    assert err.column == "tiers.matched_budget.checks" and "k_match" in err.fix
    tiers = ('[tiers.harness]\nclaim = "h"\nchecks = ["k_match"]\n'
             '[tiers.matched_budget]\nclaim = "m"\nchecks = ["k_match"]\n')
    err = parse_error(mini(order='["harness", "matched_budget"]', tiers=tiers),
                      "check 'k_match' is listed in two tiers")
    assert err.column == "tiers.matched_budget.checks"


@pytest.mark.parametrize("value", ["3", '"k"', "[1, 2]", '["max_abs_diff"]'])
def test_protocol_check_entry_that_is_not_a_table(value):
    err = parse_error(mini(checks=f"k_match = {value}\n"), "expected a table")
    assert err.column == "checks.k_match" and err.fix == "write [checks.k_match]"


def test_protocol_missing_required_keys():
    err = parse_error(mini().replace('claim = "beats random"\n', ""), "required key is missing")
    assert err.column == "tiers.matched_budget.claim" and err.fix == "add 'claim = ...'"
    err = parse_error(mini().replace('name = "mini"\n', ""), "required key is missing")
    assert err.column == "protocol.name" and err.file == "p.toml:1"
    err = parse_error(mini().replace("[checks]\n", ""), "required key is missing")
    assert err.column == "checks" and err.file == "p.toml"      # no line: nowhere to point


@pytest.mark.parametrize("checks, key, match", [
    ("[checks.enough_seeds]\nmin_seeds = true\n", "checks.enough_seeds.min_seeds",
     "expected int, got a boolean"),
    ("[checks.k_match]\nmax_abs_diff = false\n", "checks.k_match.max_abs_diff",
     "expected int, got a boolean"),
    ("[checks.psi_fit]\nmin_runs = 6.0\n", "checks.psi_fit.min_runs", "expected int, got float"),
    ("[checks.real_sidecar]\nreal_backends = \"torch\"\n", "checks.real_sidecar.real_backends",
     "expected list, got str"),
    ("[checks.transfer_paired]\nmechanism = \"load\"\n", "checks.transfer_paired.mechanism",
     "invalid value 'load'"),
    ("[checks.k_match]\non_not_evaluable = \"ignore\"\n", "checks.k_match.on_not_evaluable",
     "invalid value 'ignore'"),
])
def test_protocol_parameter_types_and_choices(checks, key, match):
    err = parse_error(mini(checks=checks), match)
    assert err.column == key


def test_protocol_boolean_where_a_boolean_belongs():
    p = parse(mini(head="accept_vouched = true"))
    assert p.accept_vouched is True
    err = parse_error(mini(head='accept_vouched = "yes"'), "expected bool, got str")
    assert err.column == "protocol.accept_vouched"
    err = parse_error(mini(head="version = true"), "got a boolean")
    assert err.column == "protocol.version"


def test_protocol_choices_of_alternative_and_multiplicity():
    p = parse(mini(head='alternative = "greater"\nmultiplicity = "none"'))
    assert (p.alternative, p.multiplicity) == ("greater", "none")
    err = parse_error(mini(head='multiplicity = "bonferroni"'), "invalid value 'bonferroni'")
    assert err.fix == "use one of: holm, none"


def test_protocol_on_not_evaluable_values_and_description():
    checks = ('[checks.k_match]\non_not_evaluable = "note"\n'
              '[checks.pairing_real]\non_not_evaluable = "vouch"\ndescription = "same requests"\n'
              '[checks.psi_fit]\non_not_evaluable = "block"\n')
    p = parse(mini(checks=checks))
    assert p.checks["k_match"].on_not_evaluable == "vouch"
    assert p.checks["pairing_real"].on_not_evaluable == "vouch"
    assert p.checks["pairing_real"].description == "same requests"
    assert p.checks["psi_fit"].on_not_evaluable == "block"


@pytest.mark.parametrize("tol, ok", [("0", True), ("0.0", True), ("0.02", True), ("3", True),
                                     ("-0.001", False), ("true", False), ('"0.1"', False)])
def test_protocol_load_match_tolerances(tol, ok):
    text = mini(checks=f"[checks.load_match.tolerances]\nstep_rate = {tol}\n")
    if ok:
        assert parse(text).checks["load_match"]["tolerances"] == {"step_rate": float(tol)}
    else:
        err = parse_error(text, "tolerance must be a non-negative number")
        assert err.column == "checks.load_match.tolerances.step_rate"


@pytest.mark.parametrize("key, value, said", [
    ("server_time_allowance_s", "-0.01", "non-negative number of seconds"),
    ("server_time_allowance_s", "true", "got a boolean"),
    ("server_time_min_share", "0", "in (0, 1]"),
    ("server_time_min_share", "1.5", "in (0, 1]"),
])
def test_protocol_real_sidecar_server_time_bounds(key, value, said):
    err = parse_error(mini(checks=f"[checks.real_sidecar]\n{key} = {value}\n"),
                      re.escape(said))
    assert err.column == f"checks.real_sidecar.{key}"


def test_find_key_line_of_missing_keys():
    text = "[a]\nx = 1\n"
    assert find_key_line(text, "a.missing") == 1          # the table it belongs in
    assert find_key_line(text, "nowhere") is None
    assert find_key_line(text, "a") == 1 and find_key_line(text, "a.x") == 2
    # an inline table holding the key, found after an unrelated key of the same table
    text = "top = 0\n[t]\nother = 1\ninline = {deep = 2}\n"
    assert find_key_line(text, "t.inline.deep") == 4
    assert find_key_line(text, "top") == 1


def test_load_protocol_by_path(tmp_path):
    text = BUNDLED.read_text()
    plain = tmp_path / "mine.txt"              # any existing file, whatever its suffix
    plain.write_text(text)
    p = load_protocol(plain)
    assert p.source == "mine.txt" and p.name == "diloco-slo"
    assert load_protocol(str(plain)).sha256 == p.sha256 == load_protocol().sha256
    with pytest.raises(InputError, match="protocol file does not exist") as info:
        load_protocol(tmp_path / "missing.toml")
    assert "diloco-slo" in info.value.fix
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(InputError, match="protocol file does not exist"):
        load_protocol(tmp_path / "dir.toml")
    (tmp_path / "latin.toml").write_bytes(b"[protocol]\nname = \"\xe9\"\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_protocol(tmp_path / "latin.toml")
    with pytest.raises(InputError, match="unknown protocol 'nope'") as info:
        load_protocol("nope")
    assert info.value.column == "protocol"
    assert load_protocol(None).source == "builtin:diloco-slo"


def test_the_bundled_protocol_file_lists_every_parameter_of_its_checks():
    """A reader of the file sees every threshold the audit applies (real_sidecar's server
    time allowance and share among them), not a default hidden in the code."""
    import tomllib
    tables = tomllib.loads(BUNDLED.read_text())["checks"]
    unlisted = [f"{name}.{key}" for name, table in tables.items()
                for key in CHECK_PARAMS.get(name, {}) if key not in table]
    assert unlisted == []
