"""Audit soundness, runs and draws: every run is judged only by what it cannot set itself.

Each attack starts from an honest fixture campaign (asserted to pass first) and tampers with
it the way a party whose scheduler is judged would: a run setting its own terms (SLO,
training start, steps, oracle flag), runs of a seed differing in more than the schedule
(backend, merge payload, request contents, training activity), and matched-random draws that
are selected, hand-placed, copied or dropped.  Every attack here passed the gate before the
checks it names.  Campaigns: ``python fixtures/make_campaigns.py``.
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
from evalkit.policies import POLICIES, policy_identity
from tests.support import fixture_model
from tests.support.gating import gate_decision
from tests.support.one_check import audit_check, audit_checks

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGNS = ROOT / "fixtures" / "campaigns"


def _fixture_module():
    """The fixture world the committed campaigns are generated from."""
    return fixture_model


def copy(tmp_path, name):
    out = tmp_path / name
    shutil.copytree(CAMPAIGNS / name, out)
    return out


def gate(path, policy="wa", *extra):
    return CliRunner().invoke(cli, ["gate", str(path), "--policy", policy, *extra])


def audit_to_matched_budget(path):
    """The audit's checks up to matched_budget, the tier of every check these attacks aim at
    (like_for_like, the corridor, pairing, the draws): each computed as in the full audit;
    the higher tiers' evidence, which they do not read, is left out."""
    return audit_campaign(path, max_tier="matched_budget")


def check(claim, name):
    return next(c for c in claim.checks if c.name == name)


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def edit_table(run_dir: Path, name: str, fn) -> None:
    path = run_dir / f"{name}.parquet"
    fn(pd.read_parquet(path)).to_parquet(path, index=False)


@pytest.fixture()
def base(tmp_path):
    """sim_missing_no_sync: wa = good on 10 seeds, 2 draws each, reaches matched_budget."""
    return copy(tmp_path, "sim_missing_no_sync")


def test_honest_bases_pass(base, tmp_path):
    assert gate(base).exit_code == 0
    wa = audit_campaign(base).claim("wa")
    for name in ("like_for_like", "plan_complete", "draws_as_planned", "plan_rules",
                 "draws_phi_uniform"):
        assert check(wa, name).passed is True, (name, check(wa, name).found)
    assert "not pre-registered" in check(wa, "plan_complete").found
    # the honest real campaign's tiers above matched_budget (self-registered: under the
    # protocol copy that allows it): tests/audit/test_result_audit_campaign.py


# ------------------------------------------------- 1. each run sets the terms it is judged by

def test_policy_declaring_a_looser_slo_fails(base):
    for seed in range(10):
        edit_meta(base / f"wa-s{seed}", lambda m: m["slo"].update(e2e_s=50.0))
    audit = audit_to_matched_budget(base)
    c = check(audit.claim("wa"), "like_for_like")
    assert c.passed is False and "slo.e2e_s differs: wa-s0 (policy) 50.0" in c.found
    assert gate_decision(audit).exit_code == 1


def test_undeclared_training_start_does_not_move_the_edge(base):
    # the first merge 14 s after training start at 0 (min_gap 20 s): a key in the policy's
    # own run.json claiming training started at -5 s used to hide it
    def early(m):
        m = m.copy()
        m.loc[0, "start_s"] = 14.0
        m["end_s"] = m["start_s"] + 8.0
        return m
    edit_table(base / "wa-s2", "merges", early)
    edit_meta(base / "wa-s2", lambda m: m.update(training_start_s=-5.0))
    audit = audit_to_matched_budget(base)
    wa = audit.claim("wa")
    c = check(wa, "schedules_in_corridor")
    assert c.passed is False and "wa-s2 (policy)" in c.found and "< min_gap" in c.found
    assert "training_start_s" in check(wa, "like_for_like").found
    assert gate_decision(audit).exit_code == 1


def _long_overlapping_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Same count and extent (so the same step rate), each step 5 s long: they overlap."""
    steps = steps.copy()
    n = len(steps)
    steps["start_s"] = np.linspace(0.0, 195.0, n)
    steps["end_s"] = steps["start_s"] + 5.0
    return steps


def test_overlapping_steps_do_not_widen_the_corridor_tolerance(base):
    # the forced merge skipped: 86 s from the last merge to the last feasible start (80 s
    # allowed); 1.5 steps of 2 s of tolerance do not hide it, 1.5 "steps" of 5 s did
    def skip_forced(m):
        m = m.copy()
        m["start_s"] = [26.0, 46.0, 66.0, 106.0]
        m["end_s"] = m["start_s"] + 8.0
        return m
    edit_table(base / "wa-s4", "merges", skip_forced)
    edit_table(base / "wa-s4", "steps", _long_overlapping_steps)
    audit = audit_to_matched_budget(base)
    wa = audit.claim("wa")
    c = check(wa, "schedules_in_corridor")
    assert c.passed is False and "wa-s4 (policy)" in c.found and "forced merge" in c.found
    lfl = check(wa, "like_for_like")
    assert lfl.passed is False and "wa-s4" in lfl.found and "overlap" in lfl.found
    assert gate_decision(audit).exit_code == 1


def test_run_json_oracle_false_does_not_make_the_oracle_deployable(tmp_path):
    runs = copy(tmp_path, "real_oracle")
    for seed in range(10):
        edit_meta(runs / f"calibrated_offline-s{seed}", lambda m: m.update(
            oracle=False, policy_identity=policy_identity(POLICIES["calibrated_offline"])))
    audit = audit_campaign(runs)
    claim = audit.claim("calibrated_offline")
    c = check(claim, "not_oracle")
    assert c.passed is False and "CalibratedOffline sees the future (its recorded code)" in \
        c.found
    assert claim.data.oracle and claim.tier != "deployable"
    assert gate_decision(audit, "calibrated_offline", "deployable").exit_code == 1


def test_oracle_under_another_label_is_an_oracle(tmp_path):
    # own attack: a label that is no registered class, the class named in the settings
    runs = copy(tmp_path, "real_oracle")
    for seed in range(10):
        edit_meta(runs / f"calibrated_offline-s{seed}", lambda m: (m.update(
            oracle=False, policy_identity=policy_identity(POLICIES["calibrated_offline"])),
            m["settings"]["effective"].update(policy={"name": "ewma", "oracle": False})))
    c = audit_check(runs, "calibrated_offline", "not_oracle")
    assert c.passed is False and "its recorded code" in c.found
    # a class the registry does not know: its oracle status is unknown, never assumed false
    for seed in range(10):
        edit_meta(runs / f"ewma-s{seed}", lambda m: (m.update(policy="home_made"),
                                                      m.pop("policy_identity")))
        for d in range(2):
            edit_meta(runs / f"mr-ewma-s{seed}-d{d}", lambda m: m.update(matched_to="home_made"))
    c = audit_check(runs, "home_made", "not_oracle")
    assert c.passed is None and "records no policy_identity" in c.found


# ------------------------------------------------ 2. like for like is the rule, not a list

def test_draws_on_the_simulator_beside_a_real_policy_run_fail(tmp_path):
    runs = copy(tmp_path, "real_oracle")
    for seed in range(10):
        for d in range(2):
            edit_meta(runs / f"mr-ewma-s{seed}-d{d}", lambda m: m.update(backend="sim"))
    got = audit_checks(runs, "ewma", ["real_sidecar", "like_for_like"])
    c = got["real_sidecar"]
    assert c.passed is False and "mr-ewma-s0-d0 (sim)" in c.found
    lfl = got["like_for_like"]
    assert lfl.passed is False and "backend" in lfl.found


def test_merges_of_a_tenth_of_the_payload_fail(base):
    for seed in range(10):
        edit_table(base / f"wa-s{seed}", "merges", lambda m: m.assign(bytes=m.bytes // 10))
    audit = audit_to_matched_budget(base)
    c = check(audit.claim("wa"), "like_for_like")
    assert c.passed is False and "100000000" in c.found and "bytes" in c.found
    assert gate_decision(audit).exit_code == 1


def test_same_arrivals_carrying_other_requests_fail(base):
    # long outputs moved between requests: arrivals, count and token totals unchanged
    def shuffle(req):
        req = req.copy()
        req["output_tokens"] = np.random.default_rng(3).permutation(req.output_tokens.to_numpy())
        return req
    edit_table(base / "wa-s5", "requests", shuffle)
    audit = audit_to_matched_budget(base)
    wa = audit.claim("wa")
    assert check(wa, "pairing_real").passed is True          # arrivals alone do not see it
    c = check(wa, "like_for_like")
    assert c.passed is False and "wa-s5" in c.found and "other requests" in c.found
    assert gate_decision(audit).exit_code == 1


@pytest.mark.parametrize("stop_s, ok", [(None, True), (195.0, True), (150.0, False),
                                        (30.0, False)])
def test_no_sync_trainer_must_run_the_whole_span(tmp_path, stop_s, ok):
    runs = copy(tmp_path, "sim_underpowered")
    if stop_s is not None:
        edit_table(runs / "no_sync-s3", "steps", lambda s: s[s.start_s < stop_s])
    c = audit_check(runs, "wa", "like_for_like")
    assert c.passed is ok, c.found
    if not ok:
        assert "no_sync-s3 (no_sync): training covers" in c.found


def test_new_key_in_one_run_is_a_difference(base):
    # own attack: a key no allowlist names, set in one draw only
    edit_meta(base / "mr-wa-s1-d0", lambda m: m["settings"]["effective"].update(turbo=True))
    c = audit_check(base, "wa", "like_for_like")
    assert c.passed is False and "settings.effective.turbo" in c.found
    assert "mr-wa-s1-d0 (matched_random)" in c.found


@pytest.mark.parametrize("median_s, ok", [(2.0 * 1.49, True), (2.0 * 1.51, False)])
def test_step_time_threshold(base, median_s, ok):
    """A run's median step within step_rel_tol (50%) of the seed's median step."""
    # contiguous steps of median_s: the same coverage, no overlap, another step time
    def sparse(steps):
        start = np.arange(0.0, 200.0, median_s)
        return pd.DataFrame({"step": np.arange(start.size), "start_s": start,
                             "end_s": start + median_s, "loss": 1.0,
                             "tokens": np.full(start.size, 4096)})
    edit_table(base / "mr-wa-s2-d1", "steps", sparse)
    c = check(audit_to_matched_budget(base).claim("wa"), "like_for_like")
    assert c.passed is ok, c.found
    if not ok:
        assert "mr-wa-s2-d1 (matched_random): median inner step" in c.found


# --------------------------------------------------- 3. matched random, verified not trusted

@pytest.fixture(scope="module")
def twenty_draws(tmp_path_factory) -> Path:
    """sim_missing_no_sync's design with 20 honest draws per seed and a random-placement wa."""
    mc = _fixture_module()
    out = tmp_path_factory.mktemp("twenty") / "runs"
    mc.campaign(out, regime="bursty", seeds=range(7), policies={"wa": "random"}, no_sync=False,
                draws=20)
    return out


def _keep_draws(src: Path, tmp_path: Path, keep) -> Path:
    """A copy of ``src`` keeping, per seed, the draws ``keep(V of the 20 draws)`` names,
    renumbered 0, 1, 2."""
    mc = _fixture_module()
    out = tmp_path / "kept"
    shutil.copytree(src, out)
    for seed in range(7):
        v = []
        for d in range(20):
            req = pd.read_parquet(out / f"mr-wa-s{seed}-d{d}" / "requests.parquet")
            v.append(float(((req.end_s - req.arrival_s) > mc.SLO).mean()))
        kept = sorted(keep(np.array(v)))
        for d in range(20):
            if d not in kept:
                shutil.rmtree(out / f"mr-wa-s{seed}-d{d}")
        for new, d in enumerate(kept):
            (out / f"mr-wa-s{seed}-d{d}").rename(out / f"mr-wa-s{seed}-d{new}x")
        for new in range(len(kept)):
            dst = out / f"mr-wa-s{seed}-d{new}"
            (out / f"mr-wa-s{seed}-d{new}x").rename(dst)
            edit_meta(dst, lambda m, new=new, dst=dst: m.update(run_id=dst.name, draw=new))
    return out


def test_keeping_the_worst_draws_fails_without_a_plan(twenty_draws, tmp_path):
    # wa places its merges like a draw: random placement, selected draws make it "win"
    runs = _keep_draws(twenty_draws, tmp_path, lambda v: np.argsort(v)[-3:].tolist())
    audit = audit_to_matched_budget(runs)
    wa = audit.claim("wa")
    c = check(wa, "draws_phi_uniform")
    assert c.passed is False and "not uniform" in c.found
    assert gate_decision(audit).exit_code == 1


def test_honest_draws_of_the_same_campaign_pass(twenty_draws, tmp_path):
    runs = _keep_draws(twenty_draws, tmp_path, lambda v: [0, 1, 2])      # the first three
    assert audit_check(runs, "wa", "draws_phi_uniform").passed is True


def test_worst_case_placements_labelled_as_draws_fail(base):
    from evalkit.stats import RequestIndex, overlap_cost, sample_schedules

    mc = _fixture_module()
    for seed in range(10):
        req = pd.read_parquet(base / f"wa-s{seed}" / "requests.parquet")
        index = RequestIndex(req.arrival_s.to_numpy(), req.end_s.to_numpy())
        cand = sample_schedules(4, (float(req.arrival_s.min()), 190.0), 8.0, 20.0, 80.0, 4000,
                                np.random.default_rng(seed), train_start=0.0, run_end=200.0)
        worst = cand[np.argsort(overlap_cost(cand, 8.0, index=index).phi)[-2:]]
        for d in range(2):
            edit_table(base / f"mr-wa-s{seed}-d{d}", "merges",
                       lambda m, s=worst[d]: mc.merges_for(s))
    c = audit_check(base, "wa", "draws_phi_uniform")
    assert c.passed is False and "mean rank 1.00" in c.found


def test_one_draw_copied_three_times_counts_once(tmp_path):
    runs = copy(tmp_path, "sim_underpowered")
    for seed in range(5):
        for d in (1, 2):
            dst = runs / f"mr-wa-s{seed}-d{d}"
            shutil.copytree(runs / f"mr-wa-s{seed}-d0", dst)
            edit_meta(dst, lambda m, d=d, seed=seed: m.update(run_id=f"mr-wa-s{seed}-d{d}",
                                                              draw=d))
    res = audit_campaign(runs)
    wa = res.claim("wa")
    assert wa.to_dict()["draws_per_seed"] == [1] * 5
    assert any("duplicate draws count once" in n for n in res.runset.notes)
    assert wa.underpowered and gate_decision(res).exit_code == 1


def test_draws_with_identical_request_logs_count_once(base):
    # own attack: another schedule's run whose request log is a copy of its sibling's
    for seed in range(10):
        shutil.copy(base / f"mr-wa-s{seed}-d0" / "requests.parquet",
                    base / f"mr-wa-s{seed}-d1" / "requests.parquet")
    wa = audit_to_matched_budget(base).claim("wa")
    assert wa.to_dict()["draws_per_seed"] == [1] * 10


def test_phi_uniformity_threshold(base):
    """KS p against min_p: p >= min_p passes, p < min_p blocks (at, just above, just below);
    the ranks are recomputed here and tested with scipy's KS test."""
    import zlib

    from scipy import stats

    from evalkit.audit.checks import plan as plan_checks
    from evalkit.audit.protocol import CheckSpec

    wa = audit_to_matched_budget(base).claim("wa")
    ctx = wa.ctx
    tag = zlib.crc32(b"bursty\0wa")
    u = [r for p in ctx.claim.pairs for _, r in plan_checks.phi_ranks(
        ctx, p, 999, np.random.default_rng([ctx.seed, tag, 5, p.seed]))]
    assert len(u) == 20 and all(0 < x < 1 for x in u)
    p0 = stats.kstest(u, "uniform").pvalue
    assert f"p = {p0:.3g}" in check(wa, "draws_phi_uniform").found

    def run(min_p):
        spec = CheckSpec("draws_phi_uniform", "d", "vouch", {"n_reference": 999, "min_p": min_p})
        return plan_checks.draws_phi_uniform(ctx, spec).passed

    assert run(p0) is True
    assert run(np.nextafter(p0, 1.0)) is False
    assert run(np.nextafter(p0, 0.0)) is True


def test_phi_ranks_of_worst_and_best_placements_are_extreme(base):
    """Independent reference: a draw whose schedule is the reference sample's own maximum of
    Phi ranks at the top, its minimum at the bottom (Phi by brute force over the policy run's
    requests, which the ranks use when a seed has no no-sync run)."""
    from evalkit.audit.checks import plan as plan_checks

    wa = audit_to_matched_budget(base).claim("wa")
    ctx, pair = wa.ctx, wa.data.pairs[0]
    req = pd.read_parquet(base / pair.policy_run / "requests.parquet")
    from evalkit.stats import sample_schedules

    cand = sample_schedules(4, (float(req.arrival_s.min()), 190.0), 8.0, 20.0, 80.0, 3000,
                            np.random.default_rng(9), train_start=0.0, run_end=200.0)

    def phi(s):      # brute force: requests in flight during [u, u + D], summed over windows
        a, e = req.arrival_s.to_numpy(), req.end_s.to_numpy()
        return sum(int(np.count_nonzero((a < u + 8.0) & (e > u))) for u in s)

    phis = np.array([phi(s) for s in cand])
    mc = _fixture_module()
    for d, s in zip(pair.draws.run_id, (cand[phis.argmax()], cand[phis.argmin()])):
        edit_table(base / d, "merges", lambda m, s=s: mc.merges_for(s))
    ctx.runset._cache.clear()
    (_, hi), (_, lo) = plan_checks.phi_ranks(ctx, pair, 999, np.random.default_rng(1))
    assert hi > 0.98 and lo < 0.02


def test_honest_real_runs_are_like_for_like():
    """The committed CPU-real torch runs: what the real backend measured per run (steps,
    timings, the rig's state) is allowed to differ; everything configured is the same."""
    # the committed audit document, which tests/e2e/test_audit_golden.py holds to a fresh one
    doc = json.loads((ROOT / "examples" / "cpu_real" / "audit_real.json").read_text())
    assert doc["claims"]
    for claim in doc["claims"]:
        c = {c["name"]: c for c in claim["checks"]}
        assert c["like_for_like"]["passed"] is True, c["like_for_like"]["found"]
        assert c["draws_phi_uniform"]["passed"] is True
