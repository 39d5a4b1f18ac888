"""Regime and policy names cannot be bent (NFKC, no invisible or mixed-script characters):
adversarial campaigns against the names the audit keys claims by."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli

from tests.support.rule_attacks import _paired_table, _vouched, edit_meta, gate, run_dirs, runs


# ----------------------------------------------------------------- names cannot be bent

BENT = ["wa\u200b",          # zero-width space
        "wa\u202e",          # right-to-left override (bidi control)
        "w\u0430",           # Cyrillic a: mixed script
        "w\u2028a",          # line separator
        "\u0440\u0430",      # all Cyrillic, every letter a Latin lookalike
        "\u0251",            # Latin alpha, looks like a
        "wa\ufe0f",          # variation selector
        "wa\x07",           # control character
        "wa\u2010x"]         # hyphen U+2010, looks like wa-x


@pytest.mark.parametrize("how", ["policy", "regime"])
def test_losing_seeds_moved_to_an_invisible_name_are_refused(runs, how):
    # the two seeds where wa loses are moved to the "same" name with a zero-width space: they
    # would form a claim of their own, out of sight, and wa's claim keeps its winning seeds
    wa = audit_campaign(runs).claim("wa")
    d = {p.seed: p.d for p in wa.data.pairs}
    worst = sorted(d, key=d.get)[:2]
    for seed in worst:
        for d_ in run_dirs(runs):
            meta = json.loads((d_ / "run.json").read_text())
            if meta["seed"] != seed:
                continue
            if how == "policy" and meta["role"] == "policy":
                edit_meta(d_, lambda m: m.update(policy="wa\u200b"))
            elif how == "policy" and meta["role"] == "matched_random":
                edit_meta(d_, lambda m: m.update(matched_to="wa\u200b"))
            elif how == "regime":
                edit_meta(d_, lambda m: m.update(regime="bursty\u200b"))
    res = gate(runs)
    assert res.exit_code == 2, res.output
    assert "U+200B" in res.output and "run.json" in res.output
    key = "matched_to" if how == "policy" else how
    assert key in res.output or how in res.output
    val = CliRunner().invoke(cli, ["validate", str(runs)])
    assert val.exit_code == 2 and "U+200B" in val.output


@pytest.mark.parametrize("bent", BENT)
def test_bent_names_in_a_summary_table_are_refused_naming_row_and_column(tmp_path, bent):
    path = _paired_table(tmp_path / "t.csv", [0.1] * 8)
    df = pd.read_csv(path)
    i = int(df.index[(df.policy == "wa") & (df.seed == 3)][0])
    df.loc[i, "policy"] = bent
    df.to_csv(path, index=False)
    res = gate(path, "--accept-vouched")
    assert res.exit_code == 2, res.output
    assert "t.csv" in res.output and f"row {i + 2}" in res.output and "policy" in res.output
    assert "refused" in res.output


def test_compatibility_forms_name_the_same_claim(tmp_path):
    # NFKC: fullwidth "ｗａ" is "wa" -- the same claim, not a second one beside it
    path = _paired_table(tmp_path / "t.csv", [0.1] * 8)
    df = pd.read_csv(path)
    df.loc[df.seed == 2, "policy"] = df.loc[df.seed == 2, "policy"].replace(
        {"wa": "\uff57\uff41"})
    df.loc[df.seed == 2, "matched_to"] = "\uff57\uff41"
    df.to_csv(path, index=False)
    res = audit_campaign(path, protocol=_vouched())
    assert [c.policy for c in res.claims] == ["wa"] and res.claim("wa").ctx.effective_n == 8


@pytest.mark.parametrize("field, value", [("regime", "bursty\u200b"), ("regime", "bursty\n"),
                                          ("label", "wa\u200b"), ("label", "wa\n")])
def test_bent_names_in_a_campaign_toml_are_refused(tmp_path, field, value):
    # own attack on the sweep's input: the label (the runs' policy name) with a zero-width
    # space or a trailing newline, which the name pattern's "$" let through
    from evalkit.errors import InputError
    from evalkit.replay.campaign import load_campaign

    text = (Path(__file__).resolve().parents[2] / "examples" / "bursty.toml").read_text()
    if field == "regime":
        text = text.replace('regime = "bursty"', f"regime = {json.dumps(value)}")
    else:
        text = text.replace('name = "wa"', f'name = "wa"\nlabel = {json.dumps(value)}', 1)
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_campaign(path)
    assert field in (info.value.column or "") and "c.toml" in (info.value.file or "")


def test_names_the_projects_use_are_accepted():
    from evalkit.names import name_problem

    for ok in ("wa", "calibrated_offline", "h200", "cpu_real", "bursty_real", "paper",
               "regime-1.2", "é-policy", "Москва", "東京ポリシー", "w a"):
        assert name_problem(ok) is None, ok


@pytest.mark.parametrize("how", ["policy", "regime"])
def test_losing_seeds_moved_to_a_case_twin_are_refused_naming_both(runs, how):
    # Bursty/WA beside bursty/wa: without case folding they open a second claim, out of
    # sight, and wa keeps its winning seeds
    wa = audit_campaign(runs).claim("wa")
    d = {p.seed: p.d for p in wa.data.pairs}
    worst = sorted(d, key=d.get)[:2]
    for d_ in run_dirs(runs):
        meta = json.loads((d_ / "run.json").read_text())
        if meta["seed"] not in worst:
            continue
        if how == "policy" and meta["role"] == "policy" and meta["policy"] == "wa":
            edit_meta(d_, lambda m: m.update(policy="WA"))
        elif how == "policy" and meta["role"] == "matched_random" and meta["matched_to"] == "wa":
            edit_meta(d_, lambda m: m.update(matched_to="WA"))
        elif how == "regime":
            edit_meta(d_, lambda m: m.update(regime="Bursty"))
    res = gate(runs)
    assert res.exit_code == 2, res.output
    twins = ("'WA'", "'wa'") if how == "policy" else ("'Bursty'", "'bursty'")
    assert all(t in res.output for t in twins) and "case" in res.output, res.output


def test_case_twins_in_a_summary_table_are_refused(tmp_path):
    path = _paired_table(tmp_path / "t.csv", [0.1] * 8)
    df = pd.read_csv(path)
    df.loc[(df.seed == 2) & (df.policy == "wa"), "policy"] = "Wa"
    df.loc[(df.seed == 2) & (df.matched_to == "wa"), "matched_to"] = "Wa"
    df.to_csv(path, index=False)
    res = gate(path, "--accept-vouched")
    assert res.exit_code == 2, res.output
    assert "'Wa'" in res.output and "'wa'" in res.output and "t.csv" in res.output


def test_name_key_folds_case_and_compatibility_forms():
    from evalkit.names import name_key

    assert name_key("Bursty") == name_key("BURSTY") == name_key("\uff42ursty") == "bursty"
    assert name_key("wa") != name_key("wb")
