"""Adversarial campaigns against the rules the audit judges by (issue 21, part B).

Each attack starts from an honest fixture campaign that passes the gate (asserted first, or
by an honest control beside it) and passed the gate before the rule it tests:

* V counts every configured SLO (e2e, TTFT, TPOT; failed requests included);
* regime and policy names cannot be bent (NFKC, no invisible or mixed-script characters);
* the regression gate compares the protocol's content, not its name;
* the words of the verdict match the numbers (which rule blocks, direction, practical size);
* a summary table's design columns are the table's word (vouched, never verified).

Campaigns: ``python fixtures/make_campaigns.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli

CAMPAIGNS = Path(__file__).resolve().parents[2] / "fixtures" / "campaigns"
BASE = "sim_missing_no_sync"     # wa = good on 7 seeds, 2 draws each: reaches matched_budget


@pytest.fixture()
def runs(tmp_path):
    out = tmp_path / "runs"
    shutil.copytree(CAMPAIGNS / BASE, out)
    return out


def gate(path, *extra, policy="wa"):
    return CliRunner().invoke(cli, ["gate", str(path), "--policy", policy, *extra])


def check(claim, name):
    return next(c for c in claim.checks if c.name == name)


def run_dirs(root: Path):
    return sorted(d for d in root.iterdir() if (d / "run.json").exists())


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def edit_requests(run_dir: Path, fn) -> None:
    path = run_dir / "requests.parquet"
    pd.read_parquet(path).pipe(fn).to_parquet(path, index=False)


# ------------------------------------------------------------------ V counts every SLO

def _configure_slo(root: Path, key: str, seconds: float) -> None:
    """The same extra SLO in every run of the campaign (like for like)."""
    for d in run_dirs(root):
        edit_meta(d, lambda m: m["slo"].update({key: seconds}))


def _late_first_tokens(req: pd.DataFrame) -> pd.DataFrame:
    """First token at 80% of the request's latency; the end (e2e latency) is unchanged."""
    req = req.copy()
    req["first_token_s"] = req.arrival_s + 0.8 * (req.end_s - req.arrival_s)
    return req


def _early_first_tokens(req: pd.DataFrame) -> pd.DataFrame:
    """First token 10 ms after arrival, the end unchanged: every later token comes slower."""
    req = req.copy()
    req["first_token_s"] = req.arrival_s + 0.01
    return req


def test_a_configured_ttft_slo_that_holds_everywhere_leaves_the_honest_claim(runs):
    _configure_slo(runs, "ttft_s", 1.0)      # no request's first token is later than 0.3 s
    res = gate(runs)
    assert res.exit_code == 0, res.output
    wa = audit_campaign(runs).claim("wa").to_dict()
    b = wa["slo_breakdown"]
    assert b["configured"] == {"e2e": 5.0, "ttft": 1.0, "tpot": None}
    assert b["policy"]["ttft"] == 0.0 and b["policy"]["any"] == pytest.approx(b["policy"]["e2e"])


@pytest.mark.parametrize("key, seconds, edit", [("ttft_s", 1.0, _late_first_tokens),
                                                ("tpot_s", 0.01, _early_first_tokens)])
def test_a_policy_worse_by_a_configured_slo_fails(runs, key, seconds, edit):
    # the policy's e2e latencies are untouched (it still wins on e2e), but it misses the
    # configured TTFT (or, own attack, TPOT) SLO far more often than its draws: before V
    # counted every configured SLO, this passed matched_budget on e2e alone
    _configure_slo(runs, key, seconds)
    for d in run_dirs(runs):
        if d.name.startswith("wa-"):
            edit_requests(d, edit)
    wa = audit_campaign(runs).claim("wa")
    per_seed = wa.to_dict()["slo_breakdown"]
    part = key.split("_")[0]
    assert per_seed["policy"]["e2e"] < per_seed["matched_random"]["e2e"]     # e2e: better
    assert per_seed["policy"][part] > per_seed["matched_random"][part]       # the SLO: worse
    assert per_seed["policy"]["any"] > per_seed["matched_random"]["any"]
    gs = check(wa, "gain_significant")
    assert gs.passed is False and wa.tier != "matched_budget"
    res = gate(runs)
    assert res.exit_code == 1, res.output


def test_the_report_shows_the_per_slo_breakdown(runs, tmp_path):
    _configure_slo(runs, "ttft_s", 1.0)
    edit_requests(runs / "wa-s0", _late_first_tokens)
    out = tmp_path / "report"
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "SLOs counted in V" in md and "TTFT 1 s" in md and "end-to-end 5 s" in md
    audit = json.loads((out / "audit.json").read_text())
    b = audit["claims"][0]["slo_breakdown"]
    # seed 0's policy run misses TTFT on most requests: the mean over 7 seeds shows it
    assert b["policy"]["ttft"] > 0.05 and b["matched_random"]["ttft"] == 0.0
    # against a brute-force count over the policy runs' request logs
    shares = {"ttft": [], "e2e": [], "any": []}
    for d in run_dirs(runs):
        if not d.name.startswith("wa-"):
            continue
        req = pd.read_parquet(d / "requests.parquet")
        done = req.ok & req.end_s.notna()
        e2e = ~done | (req.end_s - req.arrival_s > 5.0)
        ttft = ~(req.ok & req.first_token_s.notna()) | (req.first_token_s - req.arrival_s > 1.0)
        shares["e2e"].append(e2e.mean())
        shares["ttft"].append(ttft.mean())
        shares["any"].append((e2e | ttft).mean())
    for key, vals in shares.items():
        assert b["policy"][key] == pytest.approx(np.mean(vals), rel=1e-9), key
    assert "TTFT" in (out / "report.html").read_text()


# ------------------------------------------------------- the gate compares rules, not labels

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "diloco-slo.toml"


def _protocol_without(path: Path, *names: str) -> Path:
    """The bundled protocol, same name and version, with checks removed from their tier."""
    import re

    text = PROTOCOL.read_text()
    for name in names:
        text = re.sub(rf',\s*"{name}"|"{name}",\s*', "", text, count=1)
        text = re.sub(rf"\[checks\.{name}\]\n(?:(?!\[).*\n)*", "", text)
    path.write_text(text)
    return path


def _baseline(runs: Path, out: Path, *extra) -> Path:
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return out / "audit.json"


@pytest.fixture(scope="module")
def base_audit(tmp_path_factory) -> dict:
    """audit.json of the unmodified base campaign (the accepted baseline)."""
    out = tmp_path_factory.mktemp("baseline") / "report"
    return json.loads(_baseline(CAMPAIGNS / BASE, out).read_text())


@pytest.fixture()
def base(base_audit, tmp_path) -> Path:
    """A writable copy of the baseline's audit.json."""
    path = tmp_path / "old" / "audit.json"
    path.parent.mkdir()
    path.write_text(json.dumps(base_audit))
    return path


def _worse_policy(runs: Path, every: int = 5, extra_s: float = 6.0) -> None:
    """Every ``every``-th request of each wa run takes ``extra_s`` longer: wa loses."""
    def slower(req):
        req = req.copy()
        idx = req.index[::every]
        req.loc[idx, "end_s"] += extra_s
        return req
    for d in run_dirs(runs):
        if d.name.startswith("wa-"):
            edit_requests(d, slower)


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


# ------------------------------------------------------------ words that match the numbers

def _paired_table(path, d, v_policy=0.1):
    """Per seed: wa at ``v_policy``, one matched-random row ``d[seed]`` above it, K = 4 both."""
    rows = []
    for seed, diff in enumerate(d):
        rows.append({"policy": "wa", "seed": seed, "violation_rate": v_policy, "K": 4,
                     "draws_per_row": 1})
        rows.append({"policy": "matched_random", "seed": seed, "matched_to": "wa", "K": 4,
                     "violation_rate": v_policy + diff, "draws_per_row": 1})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _vouched(min_effect=None):
    from dataclasses import replace

    from evalkit.audit.protocol import load_protocol

    proto = load_protocol().with_accept_vouched(True)
    if min_effect is not None:
        spec = proto.checks["gain_significant"]
        spec = replace(spec, params={**spec.params, "min_effect": min_effect})
        proto = replace(proto, checks={**proto.checks, "gain_significant": spec})
    return proto


@pytest.mark.parametrize("gain, passed", [(0.005, True), (0.0049, False), (0.0051, True)])
def test_a_significant_gain_below_the_smallest_effect_of_interest_is_negligible(
        tmp_path, gain, passed):
    # 8 seeds, every one favours wa by `gain`: exact p = 2/256, significant at any size
    path = _paired_table(tmp_path / "t.csv", [gain] * 8)
    wa = audit_campaign(path, protocol=_vouched()).claim("wa")
    gs = check(wa, "gain_significant")
    assert gs.passed is passed, gs.found
    assert (wa.tier == "matched_budget") is passed
    if not passed:
        assert gs.found.startswith("negligible") and "0.005" in gs.found
        assert wa.verdict.startswith("negligible") and "beats" not in wa.verdict


def test_the_decision_uses_the_protocols_min_effect(tmp_path):
    path = _paired_table(tmp_path / "t.csv", [0.01] * 8)
    assert audit_campaign(path, protocol=_vouched()).claim("wa").tier == "matched_budget"
    wa = audit_campaign(path, protocol=_vouched(0.02)).claim("wa")
    assert wa.tier != "matched_budget" and "negligible" in wa.verdict
    assert audit_campaign(path, protocol=_vouched(0.0)).claim("wa").tier == "matched_budget"


def test_a_tiny_gain_over_many_seeds_is_negligible(tmp_path):
    # the case: +0.1 pp over many seeds is significant, and does not matter
    rng = np.random.default_rng(3)
    path = _paired_table(tmp_path / "t.csv", list(0.001 + rng.normal(0, 0.002, 60)))
    wa = audit_campaign(path, protocol=_vouched()).claim("wa")
    gs = check(wa, "gain_significant")
    assert wa.ctx.p_adjusted <= 0.05 and gs.passed is False and gs.found.startswith("negligible")


def test_min_effect_must_not_be_negative(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text(PROTOCOL.read_text().replace("min_effect = 0.005", "min_effect = -0.01"))
    res = gate(CAMPAIGNS / BASE, "--protocol", str(bad))
    assert res.exit_code == 2 and "min_effect" in res.output


def _four_seeds_worse(runs: Path) -> None:
    """Keep seeds 0-3 of the base campaign and make wa clearly worse on them."""
    for d in run_dirs(runs):
        if json.loads((d / "run.json").read_text())["seed"] >= 4:
            shutil.rmtree(d)
    _worse_policy(runs, every=2, extra_s=8.0)


def test_underpowered_by_the_protocol_minimum_says_so_and_says_worse(runs, tmp_path):
    # 4 seeds x 2 draws: the test reaches alpha with 4 seeds (2 * 3^-4 = 0.025 two-sided), the
    # protocol asks for 5; the policy is significantly worse.  The old words said
    # "underpowered: needs >= 4 seeds" -- it has 4.
    _four_seeds_worse(runs)
    wa = audit_campaign(runs).claim("wa")
    assert wa.ctx.seeds_needed == 4 and wa.ctx.informative_n == 4
    assert wa.underpowered and wa.ctx.p_adjusted <= 0.05 and wa.sign_flip.statistic < 0
    assert "needs >= 4" not in wa.verdict
    assert "below the protocol's minimum of 5" in wa.verdict
    assert "significantly worse than matched random" in wa.verdict
    es = check(wa, "enough_seeds")
    assert "minimum of 5" in es.found and es.recommendation == "underpowered: needs >= 5 seeds"
    out = tmp_path / "report"
    assert CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out)]).exit_code == 0
    md = (out / "report.md").read_text()
    head = md.split("### Tier ladder")[0]
    assert "significantly worse than matched random" in head and "minimum of 5" in head
    assert "needs \\>= 4 seeds" not in head and "needs >= 4 seeds" not in head


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
                  "output_tokens_total": 100000, "step_rate": 0.5, "horizon_s": 200.0}
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
    res = gate(path, "--tier", "placement_gain")
    assert res.exit_code == 1, res.output           # passed placement_gain before
    assert "the table's word" in res.output and "--accept-vouched" in res.output
    wa = audit_campaign(path).claim("wa")
    for name in ("pairing_real", "schedules_in_corridor", "merge_durations_match",
                 "open_loop_sending", "load_match"):
        c = check(wa, name)
        assert c.evaluable is False and c.blocking and c.found.startswith("the table's word")
    res = gate(path, "--tier", "placement_gain", "--accept-vouched")
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
    df.loc[pol, "violation_rate"] *= 0.1
    df.to_csv(table, index=False)
    assert gate(table, "--tier", "placement_gain", "--accept-vouched",
                policy="ewma").exit_code == 0           # what it passed before, unvouched
    res = gate(table, "--tier", "placement_gain", policy="ewma")
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
               .campaign.notes)
