"""A summary table's design columns are the table's word: vouched, never verified, and still
checked for internal consistency."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli

from tests.support.rule_attacks import CAMPAIGNS, _vouched, check, gate, runs
from tests.support.selfreg import SELFREG_PROTOCOL

# the tables are self-registered (no plan): placement_gain is gated under the protocol copy
# that allows self-registration, so what stops a claim there is the table's word alone
SELFREG = ("--protocol", str(SELFREG_PROTOCOL))


# ----------------------------------------------------- tables speak for themselves

def _typed_table(path: Path, fingerprint=lambda seed, role: f"seed-{seed}") -> Path:
    """A typed-in table: wa 5 pp better than its draws on 8 seeds, with made-up design and
    load columns that every check reading them would accept."""
    rows = []
    for seed in range(8):
        common = {"seed": seed, "K": 4, "n_requests": 1000, "corridor_violations": 0,
                  "corridor_note": "", "merge_duration_s": 8.0, "merge_duration_median_s": 8.0,
                  "completion_tied_share": 0.0, "identical_arrival_share": 0.0,
                  "arrival_rate_achieved": 5.0, "prompt_tokens_total": 200000,
                  "output_tokens_total": 100000, "step_rate": 0.5,
                  "trainer_active_share": 1.0, "horizon_s": 200.0}
        rows.append({**common, "policy": "wa", "violation_rate": 0.10,
                     "arrival_fingerprint": fingerprint(seed, "policy")})
        for d in range(2):
            rows.append({**common, "policy": "matched_random", "matched_to": "wa", "draw": d,
                         "violation_rate": 0.15 + 0.01 * d,
                         "arrival_fingerprint": fingerprint(seed, "matched_random")})
        rows.append({**common, "policy": "no_sync", "violation_rate": 0.05, "K": 0,
                     "arrival_fingerprint": fingerprint(seed, "no_sync")})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_typed_in_table_with_made_up_design_columns_needs_vouching(tmp_path):
    path = _typed_table(tmp_path / "typed.csv")
    res = gate(path, "--tier", "placement_gain", *SELFREG)
    assert res.exit_code == 1, res.output           # passed placement_gain before
    assert "the table's word" in res.output and "--accept-vouched" in res.output
    wa = audit_campaign(path).claim("wa")
    for name in ("pairing_real", "schedules_in_corridor", "merge_durations_match",
                 "open_loop_sending", "load_match"):
        c = check(wa, name)
        assert c.evaluable is False and c.blocking and c.found.startswith("the table's word")
    res = gate(path, "--tier", "placement_gain", *SELFREG, "--accept-vouched")
    assert res.exit_code == 0, res.output
    assert "vouched by the user (--accept-vouched), not verified" in res.output
    out = tmp_path / "report"
    assert CliRunner().invoke(cli, ["audit", str(path), "--out", str(out),
                                    "--accept-vouched"]).exit_code == 0
    audit = json.loads((out / "audit.json").read_text())
    assert {"pairing_real", "load_match"} <= set(audit["claims"][0]["vouched"])
    for name in ("report.md", "report.html"):    # the headline marks the claim vouched
        head = (out / name).read_text().split("Tier ladder")[0]
        assert "Vouched, not verified" in head and "pairing" in head, name


def test_a_vouched_table_is_still_checked_for_internal_consistency(tmp_path):
    # vouching lets the table's word count; it does not let the table contradict itself
    path = _typed_table(tmp_path / "typed.csv",
                        lambda seed, role: f"seed-{seed}" if role != "matched_random" or seed
                        else "other")
    wa = audit_campaign(path, protocol=_vouched()).claim("wa")
    c = check(wa, "pairing_real")
    assert c.passed is False and "nominal pairing" in c.found and not c.vouched
    assert wa.tier != "matched_budget"


def test_an_edited_summarize_table_cannot_pass_unvouched(tmp_path):
    # own attack: a real `evalkit summarize` table (true fingerprints, corridor and load) of a
    # campaign where ewma does not beat its draws, with ewma's V typed at 10% of its value
    table = tmp_path / "summary.csv"
    res = CliRunner().invoke(cli, ["summarize", str(CAMPAIGNS / "sim_bursty"), "--out",
                                   str(table)])
    assert res.exit_code == 0, res.output
    assert gate(table, policy="ewma", *("--accept-vouched",)).exit_code == 1   # honest: no win
    df = pd.read_csv(table)
    pol = (df.policy == "ewma") & (df.role == "policy")
    typed = df.loc[pol, "violation_rate"] * 0.1
    df.loc[pol, "violation_rate"] = typed
    df.to_csv(table, index=False)
    refused = gate(table, "--tier", "placement_gain", *SELFREG, "--accept-vouched",
                   policy="ewma")
    assert refused.exit_code == 2 and "not a whole number of requests" in refused.output
    # typed as whole violating requests, the table no longer contradicts itself
    df.loc[pol, "violation_rate"] = (typed * df.loc[pol, "n_requests"]).round() / \
        df.loc[pol, "n_requests"]
    df.to_csv(table, index=False)
    assert gate(table, "--tier", "placement_gain", *SELFREG, "--accept-vouched",
                policy="ewma").exit_code == 0           # what it passed before, unvouched
    res = gate(table, "--tier", "placement_gain", *SELFREG, policy="ewma")
    assert res.exit_code == 1 and "the table's word" in res.output


def test_runs_synthesised_from_a_table_carry_the_tables_word(tmp_path):
    # own attack: the typed table imported as runs (backend import): the design facts of
    # its synthetic request logs are the table's word too
    path = _typed_table(tmp_path / "typed.csv")
    runs = tmp_path / "runs"
    res = CliRunner().invoke(cli, ["import", "table", str(path), "--out", str(runs)])
    assert res.exit_code == 0, res.output
    wa = audit_campaign(runs).claim("wa")
    c = check(wa, "pairing_real")
    assert c.evaluable is False and "synthesised from a summary table" in c.found
    assert any("synthesised from a summary table" in n for n in audit_campaign(runs)
               .runset.notes)
