"""Boundaries of the audit's input layer: protocol files, summary tables, campaign assembly
and the audit result's JSON.

Each validation error is raised with its message at the value where it flips, every default
is pinned against the shipped protocol, and every field the campaign and audit result report
is compared with values written into a small input by hand.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import AuditResult, _normalise, audit_campaign, canonical_json
from evalkit.compose import run_audit
from evalkit.audit.campaign import (ClaimData, SeedPair, assemble_claims, load_campaign)
from evalkit.audit.protocol import (CHECK_PARAMS, find_key_line, load_protocol,
                                    parse_protocol)
from evalkit.audit.summary_table import is_summary_table, read_summary_table
from evalkit.errors import InputError

REPO = Path(__file__).resolve().parents[1]
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
        "not_oracle": {}, "real_sidecar": {"real_backends": ["torch", "vllm"]},
        "like_for_like": {"step_rel_tol": 0.5, "min_training_coverage": 0.95,
                          "max_idle_steps": 20.0},
        "plan_complete": {}, "draws_as_planned": {"tolerance_s": 0.05, "start_lag_s": 0.25}, "plan_rules": {},
        "draws_phi_uniform": {"n_reference": 999, "min_p": 0.001}, "pre_registered": {},
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
    assert shipped.version == defaults.version


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


# =========================================================================== summary tables

def write_csv(tmp_path, text, name="t.csv", one_draw_a_row=True):
    """The table as a CSV; ``one_draw_a_row``: add draws_per_row = 1 to every row (each row is
    one replayed run), which a table with single matched-random rows must state."""
    if one_draw_a_row and "draws_per_row" not in text.split("\n", 1)[0]:
        lines = text.split("\n")
        lines = [lines[0] + ",draws_per_row"] + [ln + ",1" if ln else ln for ln in lines[1:]]
        text = "\n".join(lines)
    path = tmp_path / name
    path.write_text(text)
    return path


def values(frame, *cols):
    """Rows of some columns, with every missing value as None."""
    return [[None if pd.isna(v) else v for v in row] for row in frame[list(cols)].values.tolist()]


def read_csv(tmp_path, text):
    return read_summary_table(write_csv(tmp_path, text))


def table_error(tmp_path, text, match, name="t.csv"):
    with pytest.raises(InputError, match=match) as info:
        read_summary_table(write_csv(tmp_path, text, name))
    return info.value


def test_is_summary_table(tmp_path):
    for name in ("a.csv", "a.CSV", "a.parquet", "a.pq"):
        (tmp_path / name).write_text("x")
        assert is_summary_table(tmp_path / name)
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "d.csv").mkdir()
    assert not is_summary_table(tmp_path / "a.txt")
    assert not is_summary_table(tmp_path / "d.csv")
    assert not is_summary_table(tmp_path / "missing.csv")


def test_summary_table_row_numbers_of_csv_and_parquet(tmp_path):
    err = table_error(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\nwa,1,1.5\n",
                      r"row 3: 1.5 is outside \[0, 1\]")
    assert err.column == "violation_rate" and err.file == "t.csv"
    path = tmp_path / "t.parquet"
    pd.DataFrame({"policy": ["wa", "wa"], "seed": [0, 1],
                  "violation_rate": [0.1, 1.5]}).to_parquet(path)
    with pytest.raises(InputError, match=r"row 2: 1.5 is outside"):
        read_summary_table(path)


def test_summary_table_from_parquet_with_numbers_and_nulls(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"policy": ["wa", "matched_random"], "seed": [3, 3],
                  "violation_rate": [0.25, 0.5], "K": [4.0, np.nan],
                  "matched_to": [None, "wa"], "draws_per_row": [1, 1]}).to_parquet(path)
    runs, notes = read_summary_table(path)
    assert runs.seed.tolist() == [3, 3] and runs.violation_rate.tolist() == [0.25, 0.5]
    assert runs.k_observed.iloc[0] == 4 and np.isnan(runs.k_observed.iloc[1])
    assert runs.run_id.tolist() == ["t.parquet:row1", "t.parquet:row2"]
    assert values(runs, "matched_to") == [[None], ["wa"]] and notes == []


def test_summary_table_structure_errors(tmp_path):
    err = table_error(tmp_path, "policy,violation_rate\nwa,0.1\n",
                      "lacks a required column")
    assert err.column == "seed"
    table_error(tmp_path, "policy,seed,violation_rate\n", "summary table has no rows")


def test_summary_table_notes_only_unused_columns(tmp_path):
    runs, notes = read_csv(tmp_path, "policy,seed,violation_rate,run_id,k_observed,"
                           "arrival_rate_achieved,colour,role\nwa,0,0.1,r0,3,2.5,red,policy\n")
    assert notes == ["summary table columns not used by the audit: colour"]
    assert runs.run_id.tolist() == ["r0"] and runs.k_observed.tolist() == [3]
    runs, notes = read_csv(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\n")
    assert notes == []


@pytest.mark.parametrize("seed, match", [("", "value is missing"), ("x", "not a number: 'x'"),
                                         ("inf", "not a finite number: 'inf'"),
                                         ("nan", "not a finite number: 'nan'"),
                                         ("1.5", "not an integer: '1.5'")])
def test_summary_table_number_errors(tmp_path, seed, match):
    err = table_error(tmp_path, f"policy,seed,violation_rate\nwa,{seed},0.1\n", f"row 2: {match}")
    assert err.column == "seed"


def test_summary_table_blank_required_and_non_finite_rates(tmp_path):
    err = table_error(tmp_path, "policy,seed,violation_rate\nwa,0, \n", "row 2: value is missing")
    assert err.column == "violation_rate"
    err = table_error(tmp_path, "policy,seed,violation_rate\nwa,0,nan\n", "not a finite number")
    assert err.column == "violation_rate"
    err = table_error(tmp_path, "policy,seed,violation_rate\n ,0,0.1\n", "row 2: value is missing")
    assert err.column == "policy"


@pytest.mark.parametrize("col, value, ok", [
    ("violation_rate", "0", True), ("violation_rate", "1", True),
    ("violation_rate", "-0.01", False), ("violation_rate", "1.01", False),
    ("no_sync_violation_rate", "0", True), ("no_sync_violation_rate", "1", True),
    ("no_sync_violation_rate", "-0.01", False), ("no_sync_violation_rate", "1.01", False),
    ("K", "0", True), ("K", "-1", False), ("k_observed", "0", True), ("k_observed", "-1", False),
    ("n_requests", "1", True), ("n_requests", "0", False),
    ("draw", "0", True), ("draw", "-1", False),
])
def test_summary_table_value_bounds(tmp_path, col, value, ok):
    cols = {"policy": "wa", "seed": "0", "violation_rate": "0.5", col: value}
    text = ",".join(cols) + "\n" + ",".join(cols.values()) + "\n"
    if ok:
        runs, _ = read_csv(tmp_path, text)
        field = {"K": "k_observed", "no_sync_violation_rate": "violation_rate"}.get(col, col)
        row = runs[runs.role == ("no_sync" if col.startswith("no_sync") else "policy")].iloc[0]
        assert float(row[field]) == float(value)
    else:
        err = table_error(tmp_path, text, f"row 2: {float(value)} is outside")
        assert err.column == col


def test_summary_table_k_column_choice(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,K,k_observed\n"
                       "wa,0,0.1,5,7\nwa,1,0.1,,7\nwa,2,0.1,,\n")
    assert runs.k_observed.iloc[:2].tolist() == [5, 7] and np.isnan(runs.k_observed.iloc[2])
    err = table_error(tmp_path, "policy,seed,violation_rate,K,k_observed\nwa,0,0.1,,x\n",
                      "not a number")
    assert err.column == "k_observed"


def test_summary_table_roles_policies_and_draws(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,role,matched_to,draw,regime\n"
                       "wa,0,0.1,,,,\n"
                       "wa,0,0.2,matched_random,,3,\n"
                       "ewma,0,0.3,matched_random,ewma,,r2\n"
                       "matched_random,0,0.4,matched_random,wa,,\n"
                       "matched_random,0,0.5,,,,\n"
                       "idle,0,0.05,no_sync,,,\n"
                       "no_sync,1,0.06,,,,\n")
    assert values(runs, "role", "policy", "matched_to", "regime") == [["policy", "wa", None, "default"],
                   ["matched_random", "matched_random", "wa", "default"],
                   ["matched_random", "matched_random", "ewma", "r2"],
                   ["matched_random", "matched_random", "wa", "default"],
                   ["matched_random", "matched_random", None, "default"],
                   ["no_sync", "no_sync", None, "default"],
                   ["no_sync", "no_sync", None, "default"]]
    assert runs.draw.iloc[1] == 3 and np.isnan(runs.draw.iloc[0])


@pytest.mark.parametrize("row, col, match", [
    ("matched_random,0,0.2,policy,", "role", "role 'policy' contradicts policy 'matched_random'"),
    ("no_sync,0,0.2,matched_random,", "role", "role 'matched_random' contradicts policy"),
    ("wa,0,0.2,baseline,", "role", "unknown role 'baseline'"),
    ("wa,0,0.2,matched_random,ewma", "matched_to", "draw names policy 'wa' but matched_to 'ewma'"),
])
def test_summary_table_role_errors(tmp_path, row, col, match):
    err = table_error(tmp_path, f"policy,seed,violation_rate,role,matched_to\n{row}\n",
                      f"row 2: {match}")
    assert err.column == col


def test_summary_table_oracle_values(tmp_path):
    values = ["true", "TRUE", "1", "yes", "y", "t", "false", "0", "no", "n", "f", ""]
    text = "policy,seed,violation_rate,oracle\n" + "".join(
        f"wa,{i},0.1,{v}\n" for i, v in enumerate(values))
    runs, _ = read_csv(tmp_path, text)
    assert runs.oracle.tolist() == [True] * 6 + [False] * 6
    err = table_error(tmp_path, "policy,seed,violation_rate,oracle\nwa,0,0.1,maybe\n",
                      "cannot read 'maybe' as true/false")
    assert err.column == "oracle"


def test_summary_table_passthrough_columns(tmp_path):
    runs, notes = read_csv(tmp_path, "policy,seed,violation_rate,arrival_fingerprint,"
                           "corridor_note,arrival_rate_achieved,corridor_violations\n"
                           "wa,0,0.1,fp-abc,late window,2.5,1\n"
                           "wa,1,0.1,,,,\n")
    assert values(runs, "arrival_fingerprint") == [["fp-abc"], [None]]
    assert runs.corridor_note.tolist() == ["late window", ""]
    assert runs.arrival_rate_achieved.iloc[0] == 2.5 and np.isnan(runs.arrival_rate_achieved[1])
    assert runs.corridor_violations.iloc[0] == 1.0 and notes == []
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\n")
    assert "arrival_fingerprint" not in runs and "step_rate" not in runs
    err = table_error(tmp_path, "policy,seed,violation_rate,step_rate\nwa,0,0.1,fast\n",
                      "not a number: 'fast'")
    assert err.column == "step_rate"


def test_summary_table_run_ids(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,run_id\nwa,0,0.1,first\nwa,1,0.1,\n")
    assert runs.run_id.tolist() == ["first", "t.csv:row3"]


def test_summary_table_no_sync_from_column(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                       "wa,0,0.1,0.05\n"
                       "matched_random,0,0.2,0.05\n"
                       "wa,1,0.1,\n"
                       "wa,2,0.1,0.07\n")
    ns = runs[runs.role == "no_sync"]
    assert ns.run_id.tolist() == ["t.csv:row2:no_sync", "t.csv:row5:no_sync"]
    assert ns.seed.tolist() == [0, 2] and ns.violation_rate.tolist() == [0.05, 0.07]
    assert ns.k_observed.tolist() == [0, 0] and ns.policy.tolist() == ["no_sync"] * 2
    assert not ns.oracle.any() and ns.regime.tolist() == ["default"] * 2


def test_summary_table_no_sync_column_contradicting_itself(tmp_path):
    err = table_error(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                      "wa,0,0.1,0.05\nmatched_random,0,0.2,0.06\n",
                      r"row 3: 0.06 contradicts 0.05 on row 2 \(regime default, seed 0\)")
    assert err.column == "no_sync_violation_rate"
    # other seeds and regimes carry their own no-sync V
    runs, _ = read_csv(tmp_path, "policy,seed,regime,violation_rate,no_sync_violation_rate\n"
                       "wa,0,a,0.1,0.05\nwa,1,a,0.1,0.06\nwa,0,b,0.1,0.07\n")
    ns = runs[runs.role == "no_sync"]
    assert sorted(zip(ns.regime, ns.seed, ns.violation_rate)) == [
        ("a", 0, 0.05), ("a", 1, 0.06), ("b", 0, 0.07)]


def test_summary_table_no_sync_column_and_explicit_no_sync_rows(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                       "no_sync,0,0.05,\n"
                       "wa,0,0.1,0.05\n"
                       "wa,1,0.1,0.07\n")
    ns = runs[runs.role == "no_sync"]
    assert ns.seed.tolist() == [0, 1] and ns.violation_rate.tolist() == [0.05, 0.07]
    assert ns.run_id.tolist() == ["t.csv:row2", "t.csv:row4:no_sync"]
    err = table_error(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                      "no_sync,0,0.05,\nwa,0,0.1,0.06\n",
                      "row 3: no_sync_violation_rate 0.06 contradicts the no_sync row")
    assert err.column == "no_sync_violation_rate"


GENERIC_NOTE = ("matched-random rows without matched_to serve every policy of their regime; "
                "the table vouches that their K matches each policy's K")


def test_summary_table_generic_draw_note(tmp_path):
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\nmatched_random,0,0.2\n")
    assert notes == [GENERIC_NOTE]
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate\nmatched_random,0,0.2\n")
    assert notes == [GENERIC_NOTE]
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate,matched_to\n"
                        "wa,0,0.1,\nmatched_random,0,0.2,wa\n")
    assert notes == []
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate,matched_to\n"
                        "wa,0,0.1,\nmatched_random,0,0.2,\n")
    assert notes == [GENERIC_NOTE]


# ================================================================================ campaigns

def campaign_of(tmp_path, text, name="t.csv"):
    return load_campaign(write_csv(tmp_path, text, name))


TWO_POLICIES = ("policy,seed,violation_rate,matched_to,oracle,draw\n"
                "wa,0,0.10,,,\newma,0,0.12,,false,\n"
                "matched_random,0,0.20,wa,,0\nmatched_random,0,0.30,wa,,1\n"
                "matched_random,0,0.40,ewma,,0\nno_sync,0,0.05,,,\n"
                "wa,1,0.11,,,\newma,1,0.13,,true,\n"
                "matched_random,1,0.31,wa,,1\nmatched_random,1,0.21,wa,,0\n"
                "matched_random,1,0.41,ewma,,0\nno_sync,1,0.06,,,\n")


def test_claims_pair_each_seed_with_its_own_draws_and_no_sync(tmp_path):
    campaign = campaign_of(tmp_path, TWO_POLICIES)
    assert campaign.source == "summary" and not campaign.has_logs and campaign.runs_dir is None
    ewma, wa = assemble_claims(campaign)
    assert (wa.regime, wa.policy, ewma.policy) == ("default", "wa", "ewma")
    assert wa.seeds == [0, 1] and not wa.generic_draws and not wa.oracle and ewma.oracle
    assert [p.draws.violation_rate.tolist() for p in wa.pairs] == [[0.2, 0.3], [0.21, 0.31]]
    assert [p.draws.violation_rate.tolist() for p in ewma.pairs] == [[0.4], [0.41]]
    assert [p.policy_run for p in wa.pairs] == ["t.csv:row2", "t.csv:row8"]
    assert [float(p.no_sync.violation_rate) for p in wa.pairs] == [0.05, 0.06]
    assert wa.pairs[0].d == pytest.approx(0.25 - 0.10)
    assert wa.pairs[1].v_mr == pytest.approx(0.26) and len(wa.paired) == 2
    table = wa.per_seed_table()
    assert table.seed.tolist() == [0, 1] and table.n_draws.tolist() == [2, 2]
    assert table.v_mr_min.tolist() == [0.2, 0.21] and table.v_mr_max.tolist() == [0.3, 0.31]
    assert table.v_no_sync.tolist() == [0.05, 0.06] and table.v_policy.tolist() == [0.1, 0.11]
    assert table.k_policy.isna().all()
    assert table.d.tolist() == pytest.approx([0.15, 0.15])
    assert campaign.row("t.csv:row4").violation_rate == 0.2
    assert campaign.row("t.csv:row5").violation_rate == 0.3
    assert campaign.row("t.csv:row8").policy == "wa"


def test_seed_pair_without_draws_or_no_sync():
    pair = SeedPair(seed=0, policy_run="p", v_policy=0.1, k_policy=2.0, realisation=None,
                    draws=pd.DataFrame({"violation_rate": []}), no_sync=None)
    assert math.isnan(pair.v_mr) and math.isnan(pair.d)
    claim = ClaimData(regime="r", policy="wa", policy_runs=pd.DataFrame({"oracle": [False]}),
                      pairs=[pair], generic_draws=False)
    row = claim.per_seed_table().iloc[0]
    assert claim.paired == [] and row.n_draws == 0 and row.k_policy == 2.0
    assert np.isnan(row.v_mr_min) and np.isnan(row.v_mr_max) and np.isnan(row.v_no_sync)


def test_claims_regimes_are_separate(tmp_path):
    campaign = campaign_of(tmp_path, "policy,seed,regime,violation_rate,matched_to\n"
                           "wa,0,r1,0.1,\nmatched_random,0,r1,0.2,\nno_sync,0,r1,0.01,\n"
                           "wa,0,r2,0.3,\newma,0,r2,0.3,\nmatched_random,0,r2,0.4,wa\n"
                           "matched_random,0,r2,0.5,ewma\nno_sync,0,r2,0.02,\n")
    claims = assemble_claims(campaign)
    assert [(c.regime, c.policy) for c in claims] == [("r1", "wa"), ("r2", "ewma"), ("r2", "wa")]
    r1, r2_ewma, r2_wa = claims
    assert r1.generic_draws and not r2_wa.generic_draws
    assert r1.pairs[0].draws.violation_rate.tolist() == [0.2]
    assert r2_wa.pairs[0].draws.violation_rate.tolist() == [0.4]
    assert r2_ewma.pairs[0].draws.violation_rate.tolist() == [0.5]
    assert float(r1.pairs[0].no_sync.violation_rate) == 0.01
    assert float(r2_wa.pairs[0].no_sync.violation_rate) == 0.02


def test_generic_draws_serve_one_policy_only(tmp_path):
    one = "policy,seed,violation_rate\nwa,0,0.1\nmatched_random,0,0.2\n"
    assert len(assemble_claims(campaign_of(tmp_path, one))[0].paired) == 1
    with pytest.raises(InputError, match="1 matched-random rows without matched_to, but the "
                       r"regime has 2 policies \(ewma, wa\)") as info:
        assemble_claims(campaign_of(tmp_path, one + "ewma,0,0.15\n"))
    assert info.value.column == "matched_to"
    # a harness baseline without draws of its own is not served by them
    campaign = campaign_of(tmp_path, one + "fixed_h,0,0.15\n")
    claims = assemble_claims(campaign, baseline_policies=("fixed_h",))
    assert [c.policy for c in claims] == ["wa"] and claims[0].generic_draws
    assert campaign.notes[-1] == ("regime default: fixed_h is a harness baseline with no "
                                  "matched-random draws of its own; audited as a baseline, "
                                  "not as a claim")


def test_generic_draws_flag_with_some_matched_draws(tmp_path):
    campaign = campaign_of(tmp_path, "policy,seed,violation_rate,matched_to\n"
                           "wa,0,0.1,\nmatched_random,0,0.2,wa\nwa,1,0.1,\nmatched_random,1,0.3,\n")
    (claim,) = assemble_claims(campaign)
    assert claim.generic_draws and len(claim.paired) == 2


def test_claims_duplicates_and_only_baselines(tmp_path):
    text = "policy,seed,violation_rate\nwa,0,0.1\nwa,1,0.1\nwa,1,0.2\nwa,2,0.1\nwa,2,0.2\n"
    with pytest.raises(InputError, match="several policy runs for seed 1 "
                       r"\(t.csv:row3, t.csv:row4\)"):
        assemble_claims(campaign_of(tmp_path, text))
    text = "policy,seed,violation_rate\nwa,0,0.1\nno_sync,0,0.01\nno_sync,1,0.01\n"
    assert [p.no_sync is not None for p in assemble_claims(
        campaign_of(tmp_path, text))[0].pairs] == [True]
    with pytest.raises(InputError, match="several no-sync runs for seed 0"):
        assemble_claims(campaign_of(tmp_path, text + "no_sync,0,0.02\n"))
    # a policy run exists, its draws are missing: the error says so, not "every run is a
    # baseline"
    with pytest.raises(InputError, match="no claim to audit: the policy runs fixed_h "
                       r"\(regime default, 1 run\) have no matched-random draws") as info:
        assemble_claims(campaign_of(tmp_path, "policy,seed,violation_rate\nfixed_h,0,0.1\n"),
                        baseline_policies=("fixed_h",))
    assert info.value.column == "matched_to" and "--matched-to POLICY" in info.value.fix
    assert "every run is a baseline" not in str(info.value)
    with pytest.raises(InputError, match=r"no policy runs to audit \(every run is a "
                       r"baseline\)") as info:
        assemble_claims(campaign_of(tmp_path, "policy,seed,violation_rate\nno_sync,0,0.1\n"))
    assert info.value.column == "role"


def test_load_campaign_input_kinds(tmp_path):
    with pytest.raises(InputError, match="input does not exist"):
        load_campaign(tmp_path / "nothing")
    (tmp_path / "notes.txt").write_text("policy,seed,violation_rate\n")
    with pytest.raises(InputError, match="neither a runs directory nor a summary table"):
        load_campaign(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no runs found") as info:
        load_campaign(tmp_path / "empty")
    # named by its base name: no absolute path in what the audit reports
    assert info.value.message == "no runs found (no run.json below this directory)"
    assert info.value.file == "empty"


def _edit_run(run_dir: Path, **changes):
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(changes)
    (run_dir / "run.json").write_text(json.dumps(meta))


def test_runs_campaign_lists_incomplete_runs_once_with_owner(copy_fixture):
    runs_dir = copy_fixture("runs")
    _edit_run(runs_dir / "fixture-s1-fixed_h", complete=False, error="boom")
    campaign = load_campaign(runs_dir)
    assert campaign.source == "runs" and campaign.has_logs and campaign.runs_dir == runs_dir
    assert campaign.excluded == [{"run_id": "fixture-s1-fixed_h", "reason": "incomplete run: boom",
                                  "regime": "fixture", "seed": 1, "role": "policy",
                                  "policy": "fixed_h", "matched_to": None, "draw": None}]
    assert len(campaign.runs) == 11 and "fixture-s1-fixed_h" not in set(campaign.runs.run_id)
    for run_dir in runs_dir.iterdir():
        _edit_run(run_dir, complete=False)
    with pytest.raises(InputError, match="no complete runs"):
        load_campaign(runs_dir)


def test_runs_campaign_of_a_single_run(copy_fixture):
    runs_dir = copy_fixture("runs")
    for run_dir in runs_dir.iterdir():
        if run_dir.name != "fixture-s0-fixed_h":
            shutil.rmtree(run_dir)
    campaign = load_campaign(runs_dir)
    assert campaign.runs.run_id.tolist() == ["fixture-s0-fixed_h"] and campaign.excluded == []


def test_runs_campaign_notes_draws_of_policies_without_runs(copy_fixture):
    runs_dir = copy_fixture("runs")
    assert load_campaign(runs_dir).notes == []
    _edit_run(runs_dir / "fixture-s0-matched_random-d0", matched_to="ghost")
    notes = load_campaign(runs_dir).notes
    assert notes[-1] == ("matched-random draws matched to policies with no policy runs (not "
                         "audited): ghost")


def _patched_summary(monkeypatch, edit):
    import evalkit.runlog.summary as summary_module

    real = summary_module.summarize_runs

    def fake(path):
        summary = real(path)
        attrs = dict(summary.attrs)
        summary = edit(summary.copy(), attrs)
        summary.attrs = attrs
        return summary

    monkeypatch.setattr(summary_module, "summarize_runs", fake)


def test_runs_campaign_k_observed_is_not_k_total(monkeypatch, fixtures_dir):
    def more_total(summary, attrs):
        summary["k_total"] = summary["k_observed"] + 3
        return summary

    truth = load_campaign(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    _patched_summary(monkeypatch, more_total)
    got = load_campaign(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    assert got.to_dict() == truth.to_dict()


def test_runs_campaign_k_total_fallback(monkeypatch, fixtures_dir):
    def no_observed(summary, attrs):
        summary["k_total"] = summary["k_observed"] + 1
        return summary.drop(columns=["k_observed"])

    truth = load_campaign(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    _patched_summary(monkeypatch, no_observed)
    got = load_campaign(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    assert got.to_dict() == (truth + 1).to_dict()


def test_runs_campaign_drops_incomplete_summary_rows(monkeypatch, fixtures_dir):
    def one_incomplete(summary, attrs):
        summary.loc[summary.run_id == "fixture-s2-no_sync", "complete"] = False
        return summary

    _patched_summary(monkeypatch, one_incomplete)
    runs = load_campaign(fixtures_dir / "runs").runs
    assert len(runs) == 11 and "fixture-s2-no_sync" not in set(runs.run_id)


def test_runs_campaign_excluded_and_unreadable_from_the_summary(monkeypatch, copy_fixture):
    runs_dir = copy_fixture("runs")
    _edit_run(runs_dir / "fixture-s1-fixed_h", complete=False, error="boom")

    def extra(summary, attrs):
        attrs["excluded"] = list(attrs.get("excluded", [])) + ["other-run"]
        attrs["unreadable"] = [{"run_id": "locked-run", "reason": "cannot read: denied"},
                               {"run_id": "fixture-s1-fixed_h", "reason": "cannot read"}]
        attrs["warnings"] = ["odd spacing"]
        return summary

    _patched_summary(monkeypatch, extra)
    campaign = load_campaign(runs_dir)
    assert [(e["run_id"], e["reason"]) for e in campaign.excluded] == [
        ("fixture-s1-fixed_h", "incomplete run: boom"), ("locked-run", "cannot read: denied"),
        ("other-run", "incomplete run")]
    assert campaign.notes == ["validation warning: odd spacing"]


def test_runs_campaign_rejects_summary_rows_without_a_run(monkeypatch, fixtures_dir):
    def ghost(summary, attrs):
        row = summary.iloc[[0]].copy()
        row["run_id"] = "ghost-run"
        return pd.concat([summary, row], ignore_index=True)

    _patched_summary(monkeypatch, ghost)
    with pytest.raises(InputError, match="summary lists run ghost-run without a complete run"):
        load_campaign(fixtures_dir / "runs")


def test_runs_campaign_columns_before_the_table(fixtures_dir):
    campaign = load_campaign(fixtures_dir / "runs")
    run_id = "fixture-s0-no_sync"
    reference = pd.read_parquet(fixtures_dir / "runs" / run_id / "requests.parquet")
    got = campaign.columns(run_id, "requests", ("arrival_s", "end_s"))
    assert np.array_equal(got["arrival_s"], reference.arrival_s.to_numpy(float))
    assert np.array_equal(got["end_s"], reference.end_s.to_numpy(float), equal_nan=True)
    assert campaign.columns(run_id, "requests", ("arrival_s", "end_s")) is got
    full = campaign.table(run_id, "requests")
    assert len(full) == len(reference)
    again = campaign.columns(run_id, "requests", ("end_s",))
    assert np.array_equal(again["end_s"], reference.end_s.to_numpy(float), equal_nan=True)


def test_runs_campaign_corrupt_log_is_an_input_error(copy_fixture):
    runs_dir = copy_fixture("runs")
    campaign = load_campaign(runs_dir)
    run_id = "fixture-s0-no_sync"
    (runs_dir / run_id / "requests.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="cannot read Parquet"):
        campaign.columns(run_id, "requests", ("arrival_s",))
    with pytest.raises(InputError, match="cannot read Parquet"):
        campaign.table(run_id, "requests")


# ============================================================================ audit result

def test_normalise_values():
    assert _normalise(1 / 3) == 0.3333333333 and _normalise(2 / 3) == 0.6666666667
    assert _normalise(123456.7890123) == 123456.789
    zero = _normalise(-0.0)
    assert zero == 0.0 and math.copysign(1.0, zero) == 1.0
    assert _normalise(1.0) == 1.0 and _normalise(np.float32(0.5)) == 0.5
    for bad in (float("nan"), float("inf"), -np.inf, None, pd.NA, pd.NaT):
        assert _normalise(bad) is None
    assert _normalise(True) is True and _normalise(np.bool_(False)) is False
    assert _normalise(np.int64(7)) == 7 and type(_normalise(np.int64(7))) is int
    assert type(_normalise(7)) is int
    assert _normalise("text") == "text" and _normalise(Path("a/b")) == "a/b"
    assert _normalise({1: (np.array([1.5, np.nan]), [np.int32(2)])}) == {"1": [[1.5, None], [2]]}


def test_canonical_json_layout():
    assert canonical_json({"b": [1, True], "a": 0.5}) == (
        '{\n  "a": 0.5,\n  "b": [\n    1,\n    true\n  ]\n}\n')


def _stub_result(tmp_path=None):
    claims = [SimpleNamespace(policy="wa", regime="r1"), SimpleNamespace(policy="wa", regime="r2"),
              SimpleNamespace(policy="ewma", regime="r1")]
    campaign = SimpleNamespace(runs_dir=tmp_path, input_name="runs")
    return AuditResult(protocol=None, seed=0, campaign=campaign, claims=claims)


def test_audit_result_claim_lookup():
    result = _stub_result()
    assert result.claim("ewma") is result.claims[2]
    assert result.claim("wa", "r2") is result.claims[1]
    assert result.claim("wa", regime="r1") is result.claims[0]
    with pytest.raises(InputError, match=r"policy 'wa' has claims in several regimes \(r1, r2\)") \
            as info:
        result.claim("wa")
    assert info.value.column == "regime"
    with pytest.raises(InputError, match="no claim for policy 'nope'") as info:
        result.claim("nope")
    assert info.value.column == "policy" and "r1/wa, r2/wa, r1/ewma" in info.value.fix
    with pytest.raises(InputError, match="no claim for policy 'ewma' in regime 'r2'"):
        result.claim("ewma", "r2")


def test_audit_result_scrubs_the_runs_directory(tmp_path):
    root = tmp_path / "campaign"
    result = _stub_result(root)
    assert result._scrub(f"see {root}/a and {root.resolve()}/b") == "see runs/a and runs/b"
    assert _stub_result(None)._scrub(f"see {root}/a") == f"see {root}/a"


def test_audit_result_to_dict_of_a_summary_table(fixtures_dir):
    result = audit_campaign(fixtures_dir / "campaigns" / "summary_table.csv")
    assert result.seed == 0 and result.alpha == 0.05
    out = result.to_dict()
    (claim,) = out["claims"]
    assert (claim["regime"], claim["policy"]) == ("paper", "wa")
    # a summary table has no logs: no psi and no exposure figure, and the names are the
    # report's files
    assert claim["figures"] == {"null": "figures/paper__wa__null.png",
                                "v_per_seed": "figures/paper__wa__v_per_seed.png"}
    assert result.files["figures"] == sorted(claim["figures"].values())
    assert out["schema"] == "evalkit-audit/1" and out["provenance"]["campaign_source"] == \
        "summary table"
    assert out["transfer"] == {"sync": "not evaluable: a summary table has no request logs"}
    regime = out["regimes"]["paper"]
    assert list(out["regimes"]) == ["paper"]
    assert regime["psi"] is None and regime["exposure_regression"] is None
    assert regime["psi_reason"].startswith("not evaluable")
    assert regime["exposure_reason"].startswith("not evaluable")
    assert out["seed"] == 0 and out["input"]["kind"] == "summary"
    assert out["input"]["n_runs"] == len(result.campaign.runs)
    assert json.loads(result.to_json()) == out
    assert audit_campaign(fixtures_dir / "campaigns" / "summary_table.csv", alpha=0.01,
                          seed=3).to_dict()["alpha"] == 0.01


def test_audit_baselines_come_from_the_protocol(tmp_path):
    path = write_csv(tmp_path, "policy,seed,violation_rate,matched_to\n"
                     "wa,0,0.1,\nmatched_random,0,0.2,wa\nfixed_h,0,0.3,\n"
                     "pressure_gate,0,0.3,\nother,0,0.3,\n")
    result = audit_campaign(path)
    assert sorted(c.policy for c in result.claims) == ["other", "wa"]


def test_run_audit_default_seed(monkeypatch, tmp_path, fixtures_dir):
    import evalkit.compose as compose

    seen = {}
    monkeypatch.setattr(compose, "publish", lambda out, files: seen.setdefault(
        "seed", json.loads(files["audit.json"])["seed"]))
    result = run_audit(fixtures_dir / "campaigns" / "summary_table.csv", tmp_path / "out")
    assert result.seed == 0 and seen == {"seed": 0} and result.out_dir == tmp_path / "out"
    assert result.document["seed"] == 0
