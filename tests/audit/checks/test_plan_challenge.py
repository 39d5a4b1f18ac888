"""A commitment the judged party cannot grind: the reviewer's challenge, the ledger of
attempts, and defence in depth (a plan never switches a check off).  Each attack campaign of
issue 33 against the plan is a test here: grinding draw seeds or the policy label offline,
restarting under fresh plans, re-freezing the seeds in another order, a plan that repeats a
seed, deleting a losing claim's runs, deleting whole seeds of an unplanned campaign."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.audit.protocol import load_protocol
from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.sweep import run_campaign
from evalkit.runlog.challenge import (LEDGER_FILE, commitment, derivation_faults,
                                      read_ledger)
from evalkit.runlog.plan import PLAN_FILE, read_plan
from evalkit.stats import holm
from tests.support.one_check import audit_check
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import tiny_campaign
from tests.support.selfreg import SELFREG_PROTOCOL

BUNDLED_FILE = Path(__file__).resolve().parents[3] / "protocols" / "diloco-slo.toml"
PLACEMENT = 'checks = ["no_sync_present", "load_match", "registration"]'


def protocol_file(folder: Path, *, allow: bool = False) -> Path:
    """A copy of the bundled protocol (``registration`` in its placement_gain tier), with
    ``allow_self_registered = true`` when ``allow``."""
    text = (SELFREG_PROTOCOL if allow else BUNDLED_FILE).read_text()
    assert PLACEMENT in text
    path = folder / ("allow.toml" if allow else "strict.toml")
    path.write_text(text)
    return path


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def challenged(tmp_path_factory):
    """Two claims (wa, calibrated_offline), 3 seeds, 2 draws each, swept under a plan frozen
    with the reviewer's challenge."""
    root = tmp_path_factory.mktemp("challenged")
    camp = root / "tiny.toml"
    camp.write_text(tiny_campaign(3, 2, calibrated_offline=True))
    proto = protocol_file(root)
    reviewer = root / "reviewer"
    reviewer.mkdir()
    res = invoke("plan", "challenge", camp, "--protocol", proto, "--out",
                 reviewer / "challenge.json")
    assert res.exit_code == 0, res.output
    (root / "runs").mkdir()
    res = invoke("plan", "freeze", camp, "--protocol", proto, "--challenge",
                 reviewer / "challenge.json", "--out", root / "runs" / PLAN_FILE)
    assert res.exit_code == 0, res.output
    assert "attempt 1 at tiny/wa" in res.output
    assert run_campaign(camp, root / "runs", progress=False, protocol=BUNDLED).ok
    return root


@pytest.fixture()
def case(challenged, tmp_path):
    """A writable copy: (campaign, protocol, challenge file, runs directory)."""
    root = tmp_path / "case"
    shutil.copytree(challenged, root)
    return (root / "tiny.toml", root / "strict.toml", root / "reviewer" / "challenge.json",
            root / "runs")


def claim_checks(runs, proto, challenge=None, policy="wa"):
    claim = audit_campaign(runs, protocol=load_protocol(proto),
                           challenge=challenge).claim(policy, "tiny")
    return {c.name: c for c in claim.checks}, claim


def one_check(runs, proto, name, challenge=None, policy="wa"):
    """The claim's check ``name`` alone, as the full audit computes it."""
    return audit_check(runs, policy, name, regime="tiny", protocol=load_protocol(proto),
                       challenge=challenge)


def rewrite_plan(runs: Path, fn) -> None:
    path = runs / PLAN_FILE
    plan = json.loads(path.read_text())
    fn(plan)
    path.write_text(json.dumps(plan, indent=2, sort_keys=True))


# ----------------------------------------------------------------- the honest campaign

def test_a_campaign_frozen_under_the_given_challenge_is_registered(case):
    _, proto, challenge, runs = case
    got, claim = claim_checks(runs, proto, challenge)
    reg = got["registration"]
    assert reg.passed is True, reg.found
    assert "attempt 1 of 1 at tiny/wa" in reg.found and reg.values["registration"] == "challenge"
    for name in ("plan_complete", "draws_as_planned", "plan_rules"):
        assert got[name].passed is True, (name, got[name].found)
    plan = read_plan(runs)
    assert derivation_faults(plan) == []
    # the sweep ran every draw with the seed the commitment derived, not the label's
    planned = {r["run_id"]: r["rng_seed"] for r in plan["runs"]}
    for d in runs.glob("tiny__mr-wa__*"):
        meta = json.loads((d / "run.json").read_text())
        assert meta["rng_seeds"]["policy"] == planned[d.name]


def test_without_the_challenge_file_the_campaign_is_self_registered(case):
    _, proto, _, runs = case
    got, claim = claim_checks(runs, proto)
    reg = got["registration"]
    assert reg.passed is False and reg.found.startswith("self-registered")
    assert "no challenge file" in reg.found
    assert claim.tier_status["placement_gain"] != "reached"
    assert claim.tier in (None, "harness", "sidecar_transfer", "matched_budget")


def test_a_protocol_may_allow_self_registration_explicitly(case, tmp_path):
    _, _, _, runs = case
    got, _ = claim_checks(runs, protocol_file(tmp_path, allow=True))
    assert got["registration"].passed is True
    assert "self-registered" in got["registration"].found


def test_the_cli_gate_and_audit_take_the_challenge(case, tmp_path):
    _, proto, challenge, runs = case
    res = invoke("audit", runs, "--protocol", proto, "--challenge", challenge, "--out",
                 tmp_path / "report")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "report" / "audit.json").read_text())
    wa = next(c for c in doc["claims"] if c["policy"] == "wa")
    reg = next(c for c in wa["checks"] if c["name"] == "registration")
    assert reg["passed"] is True
    assert doc["pre_registration"]["registration"]["kind"] == "challenge"
    # the same runs audited without the challenge: the document says self-registered
    res = invoke("audit", runs, "--protocol", proto, "--out", tmp_path / "plain")
    assert res.exit_code == 0, res.output
    plain = json.loads((tmp_path / "plain" / "audit.json").read_text())["pre_registration"]
    assert plain["registration"]["kind"] == "self-registered"
    assert "none given to verify it" in plain["registration"]["text"]
    # a gate on the document cannot verify a challenge: exit 2, never a silent pass
    res = invoke("gate", tmp_path / "report" / "audit.json", "--policy", "wa", "--protocol",
                 proto, "--challenge", challenge)
    assert res.exit_code == 2 and "--challenge" in res.output


# ----------------------------------------------------------------- grinding offline

def test_draw_seeds_chosen_offline_break_the_commitment(case):
    # attack (a): the best of 40 seeds per draw written into plan.json
    _, proto, challenge, runs = case

    def grind(plan):
        for r in plan["runs"]:
            if r["role"] == "matched_random":
                r["rng_seed"] = int(r["rng_seed"]) + 17
    rewrite_plan(runs, grind)
    reg = one_check(runs, proto, "registration", challenge)
    assert reg.passed is False and "RNG seed the commitment does not derive" in reg.found


def test_a_relabelled_campaign_cannot_be_frozen_under_the_challenge(case, tmp_path):
    # attack (b): try policy labels offline; the challenge bound the campaign file
    camp, proto, challenge, _ = case
    ground = tmp_path / "ground.toml"
    ground.write_text(camp.read_text().replace('name = "calibrated_offline"',
                                               'name = "calibrated_offline"\nlabel = "co7"'))
    res = invoke("plan", "freeze", ground, "--protocol", proto, "--challenge", challenge,
                 "--out", tmp_path / "p.json")
    assert res.exit_code == 2, res.output
    assert "campaign_sha256" in res.output and "another campaign file" in res.output
    assert not (tmp_path / "p.json").exists()


def test_a_plan_frozen_under_another_challenge_fails(case, tmp_path):
    camp, proto, challenge, runs = case
    other = tmp_path / "other" / "challenge.json"
    other.parent.mkdir()
    assert invoke("plan", "challenge", camp, "--protocol", proto, "--out", other).exit_code == 0
    reg = one_check(runs, proto, "registration", other)
    assert reg.passed is False and "nonce differs" in reg.found


def test_a_made_up_challenge_block_with_its_own_nonce_is_not_the_reviewers(case):
    # the judged party writes its own nonce (and recomputes everything from it): the
    # derivation holds, but the reviewer's file names another nonce
    _, proto, challenge, runs = case
    from evalkit.runlog.challenge import apply_challenge

    plan = read_plan(runs)
    own = dict(json.loads(challenge.read_text()), nonce="ab" * 32)
    forged = apply_challenge({k: v for k, v in plan.items() if k != "challenge"}, own)
    assert derivation_faults(forged) == []
    (runs / PLAN_FILE).write_text(json.dumps(forged))
    reg = one_check(runs, proto, "registration", challenge)
    assert reg.passed is False and "nonce differs" in reg.found


def test_the_commitment_ignores_the_written_seed_order_and_fixes_its_own(case):
    # attack (d): freeze the same seeds in another order until one passes
    _, proto, challenge, runs = case
    plan = read_plan(runs)
    nonce = plan["challenge"]["nonce"]
    flipped = dict(plan, campaign=dict(plan["campaign"], settings=dict(
        plan["campaign"]["settings"], seeds=plan["campaign"]["settings"]["seeds"][::-1])))
    assert commitment(nonce, flipped) == commitment(nonce, plan)
    rewrite_plan(runs, lambda p: p["campaign"]["settings"].update(
        seeds=p["campaign"]["settings"]["seeds"][::-1]))
    reg = one_check(runs, proto, "registration", challenge)
    assert reg.passed is False and "is not the derived order" in reg.found


# ----------------------------------------------------------------- the ledger of attempts

def test_a_restart_under_a_fresh_plan_is_a_later_attempt_and_refused(case, tmp_path):
    # attack (c): restart on a fresh plan (same challenge) until one passes
    camp, proto, challenge, runs = case
    again = tmp_path / "again"
    again.mkdir()
    res = invoke("plan", "freeze", camp, "--protocol", proto, "--challenge", challenge,
                 "--out", again / PLAN_FILE)
    assert res.exit_code == 0 and "attempt 2 at tiny/wa" in res.output, res.output
    assert len(read_ledger(challenge)) == 2
    # the second attempt's runs: the first attempt's, restamped with the second plan's hash
    from evalkit.runlog.plan import plan_sha256

    shutil.copytree(runs, again, dirs_exist_ok=True, ignore=shutil.ignore_patterns(PLAN_FILE))
    sha = plan_sha256(read_plan(again))
    for d in again.glob("tiny__*"):
        meta = json.loads((d / "run.json").read_text())
        meta["plan_sha256"] = sha
        (d / "run.json").write_text(json.dumps(meta))
    reg = one_check(again, proto, "registration", challenge)
    assert reg.passed is False and "attempt 2 of 2" in reg.found
    # the first attempt still counts
    assert one_check(runs, proto, "registration", challenge).passed is True


def test_a_plan_missing_from_the_ledger_fails(case):
    _, proto, challenge, runs = case
    (challenge.parent / LEDGER_FILE).unlink()
    reg = one_check(runs, proto, "registration", challenge)
    assert reg.passed is False and "is not in the ledger" in reg.found


@pytest.mark.parametrize("edit", ["drop_first", "rewrite"])
def test_an_edited_ledger_is_refused(case, edit):
    camp, proto, challenge, runs = case
    ledger = challenge.parent / LEDGER_FILE
    assert invoke("plan", "freeze", camp, "--protocol", proto, "--challenge", challenge,
                  "--out", ledger.parent / "p2.json").exit_code == 0
    lines = ledger.read_text().splitlines()
    if edit == "drop_first":             # hide the first attempt: the second looks first
        lines = lines[1:]
    else:
        entry = json.loads(lines[0])
        entry["time"] = "2020-01-01T00:00:00+00:00"
        lines[0] = json.dumps(entry)
    ledger.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_ledger(challenge)
    assert "hash chain" in err.value.message and err.value.file == str(ledger)
    res = invoke("gate", runs, "--policy", "wa", "--protocol", proto, "--challenge", challenge)
    assert res.exit_code == 2 and "ledger" in res.output


def test_a_malformed_challenge_is_exit_2_naming_the_field(case):
    _, proto, challenge, runs = case
    doc = json.loads(challenge.read_text())
    doc["nonce"] = "1234"
    challenge.write_text(json.dumps(doc))
    res = invoke("gate", runs, "--policy", "wa", "--protocol", proto, "--challenge", challenge)
    assert res.exit_code == 2 and "nonce" in res.output and "challenge.json" in res.output


# ----------------------------------------------------------------- one rule set

def test_a_plan_that_repeats_a_seed_is_refused(case):
    # the e-process counted "26 seeds" for 12 real ones
    _, proto, challenge, runs = case
    rewrite_plan(runs, lambda p: p["campaign"]["settings"]["seeds"].extend([0, 0]))
    res = invoke("gate", runs, "--policy", "wa", "--protocol", proto, "--challenge", challenge)
    assert res.exit_code == 2, res.output
    assert "campaign.settings.seeds" in res.output and "more than once" in res.output


def test_a_campaign_that_repeats_a_seed_is_refused_at_freeze():
    from dataclasses import replace

    from evalkit.replay.campaign import load_campaign
    from evalkit.replay.plan import plan_from_campaign

    path = Path(__file__).resolve().parents[3] / "examples" / "bursty.toml"
    camp = load_campaign(path)
    with pytest.raises(InputError) as err:
        plan_from_campaign(replace(camp, seeds=[0, 1, 1]), load_protocol(None))
    assert err.value.column == "seeds" and "[1]" in err.value.message


def test_deleting_a_losing_claims_runs_fails_the_family(case, monkeypatch):
    # a plan's losing claim with every run deleted: the winner's plan_complete fails and the
    # Holm family still counts the deleted claim (p = 1), it does not shrink
    import evalkit.audit.claims as claims_module

    _, proto, challenge, runs = case
    families = []

    def spy(pvals, alpha):
        families.append([float(p) for p in pvals])
        return holm(pvals, alpha=alpha)

    monkeypatch.setattr(claims_module, "holm", spy)
    for d in list(runs.glob("tiny__calibrated_offline__*")) + list(
            runs.glob("tiny__mr-calibrated_offline__*")):
        shutil.rmtree(d)
    res = audit_campaign(runs, protocol=load_protocol(proto), challenge=challenge)
    assert [c.policy for c in res.claims] == ["wa"]
    wa = res.claim("wa", "tiny")
    pc = next(c for c in wa.checks if c.name == "plan_complete")
    assert pc.passed is False and "tiny/calibrated_offline have no runs" in pc.found
    assert families == [[wa.ctx.sign_flip.p_value, 1.0]]


def test_the_draws_phi_uniformity_runs_with_a_plan(case):
    # defence in depth: draws selected for their overlap are caught with a plan as without
    from evalkit.stats import RequestIndex, overlap_cost, sample_schedules

    _, proto, challenge, runs = case
    for d in sorted(runs.glob("tiny__mr-*")):
        req = pd.read_parquet(d / "requests.parquet")
        merges = pd.read_parquet(d / "merges.parquet")
        if not len(merges):
            continue
        cand = sample_schedules(len(merges), (req.arrival_s.min(), req.arrival_s.max()), 8.0,
                                40.0, 100.0, 400, np.random.default_rng(1), train_start=0.0,
                                run_end=240.0)
        index = RequestIndex(req.arrival_s.to_numpy(), req.end_s.to_numpy())
        worst = cand[int(np.argmax(overlap_cost(cand, 8.0, index=index).phi))]
        merges["start_s"] = worst
        merges["end_s"] = worst + 8.0
        merges.to_parquet(d / "merges.parquet", index=False)
    got, _ = claim_checks(runs, proto, challenge)
    phi = got["draws_phi_uniform"]
    assert phi.passed is False and "not uniform placements" in phi.found


def test_deleting_whole_seeds_of_an_unplanned_campaign_fails(case):
    _, proto, _, runs = case
    (runs / PLAN_FILE).unlink()
    for d in runs.glob("tiny__*"):
        meta = json.loads((d / "run.json").read_text())
        meta.pop("plan_sha256", None)
        (d / "run.json").write_text(json.dumps(meta))
    assert one_check(runs, proto, "plan_complete").passed is True
    for d in runs.glob("tiny__*__s1*"):
        shutil.rmtree(d)
    pc = one_check(runs, proto, "plan_complete")
    assert pc.passed is False and "seeds 1 are missing from the range 0..2" in pc.found


@pytest.mark.slow
def test_a_sequential_sweep_runs_the_seeds_in_the_order_the_challenge_derived(tmp_path):
    # the seed order is the commitment's, not the order the campaign lists them in
    import hashlib

    from evalkit.compose.until_decided import sweep_until_decided
    from evalkit.replay.plan import freeze_plan
    from evalkit.runlog.challenge import issue_challenge, write_challenge
    from evalkit.runlog.plan import write_plan

    camp = tmp_path / "seq.toml"
    camp.write_text(tiny_campaign(6, 1) + '\n[design]\nkind = "sequential"\nmax_seeds = 6\n'
                    'batch = 2\n')
    proto = load_protocol(None)
    doc = issue_challenge(hashlib.sha256(camp.read_bytes()).hexdigest(), proto.name,
                          proto.content_sha256)
    for i in range(100):             # a nonce whose order does not start with seeds 0 and 1
        plan = freeze_plan(camp, BUNDLED, dict(doc, nonce=f"{i:064x}"))
        if set(plan["campaign"]["settings"]["seeds"][:2]) != {0, 1}:
            break
    write_challenge(dict(doc, nonce=f"{i:064x}"), tmp_path / "challenge.json")
    (tmp_path / "runs").mkdir()
    write_plan(plan, tmp_path / "runs" / PLAN_FILE)
    sweep_until_decided(camp, tmp_path / "runs", max_seeds=2, batch=2, progress=False)
    ran = {json.loads((d / "run.json").read_text())["seed"]
           for d in (tmp_path / "runs").iterdir() if (d / "run.json").exists()}
    assert ran == set(plan["campaign"]["settings"]["seeds"][:2])


def test_a_challenge_is_issued_once_and_bound_to_its_campaign(tmp_path):
    camp = tmp_path / "tiny.toml"
    camp.write_text(tiny_campaign(2, 1))
    out = tmp_path / "challenge.json"
    assert invoke("plan", "challenge", camp, "--out", out).exit_code == 0
    first = out.read_text()
    doc = json.loads(first)
    import hashlib

    assert doc["campaign_sha256"] == hashlib.sha256(camp.read_bytes()).hexdigest()
    assert len(doc["nonce"]) == 64 and doc["protocol"]["name"] == "diloco-slo"
    res = invoke("plan", "challenge", camp, "--out", out)
    assert res.exit_code == 2 and "exists already" in res.output
    assert out.read_text() == first
