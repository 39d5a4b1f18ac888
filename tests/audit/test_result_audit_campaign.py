"""Each fixture campaign reaches the right tier with the right reasons; gate exit codes."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from evalkit.stats.floored import floored_mean_test
from click.testing import CliRunner
from scipy import stats

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.jsonio import canonical_json
from tests.golden.compare import golden_path
from tests.support.selfreg import SELFREG_PROTOCOL, selfreg_protocol


@pytest.fixture(scope="module")
def campaigns(request):
    from tests.conftest import REPO

    return REPO / "fixtures" / "campaigns"


_CACHE: dict = {}


def audited(campaigns, name, accept_vouched=False):
    """The fixture campaigns are self-registered: the tiers above matched_budget are audited
    under the protocol copy that allows self-registration."""
    key = (name, accept_vouched)
    if key not in _CACHE:
        _CACHE[key] = audit_campaign(
            campaigns / name, protocol=selfreg_protocol().with_accept_vouched(accept_vouched))
    return _CACHE[key]


@pytest.fixture(scope="module")
def audit_document(tmp_path_factory):
    """The audit.json 'evalkit audit --protocol SELFREG_PROTOCOL' writes for a fixture campaign
    (the document as the report writes it, tests/report/test_document.py), made from the audit
    the tier tests share: the gate reads it instead of auditing the campaign again."""
    folder = tmp_path_factory.mktemp("audit_documents")

    def document(campaigns, name, accept_vouched):
        path = folder / f"{name}{'-vouched' if accept_vouched else ''}.audit.json"
        if not path.exists():
            doc = audited(campaigns, name, accept_vouched).to_dict()
            path.write_text(canonical_json(doc, digits=None), encoding="utf-8")
        return path

    return document


def check(claim, name):
    return next(c for c in claim.checks if c.name == name)


def reference_design(runs_dir, policy):
    """Independent per-seed (V policy, [V draws]) from run.json + requests.parquet."""
    rows = []
    for meta_path in sorted(runs_dir.glob("*/run.json")):
        meta = json.loads(meta_path.read_text())
        if not meta["complete"]:
            continue
        req = pd.read_parquet(meta_path.parent / "requests.parquet")
        v = float(((req.end_s - req.arrival_s) > meta["slo"]["e2e_s"]).mean())
        rows.append((meta["role"], meta["policy"], meta["matched_to"], meta["seed"], v))
    pol = {s: v for r, p, m, s, v in rows if r == "policy" and p == policy}
    draws = {}
    for r, p, m, s, v in rows:
        if r == "matched_random" and m == policy:
            draws.setdefault(s, []).append(v)
    seeds = sorted(set(pol) & set(draws))
    return [pol[s] for s in seeds], [draws[s] for s in seeds]


def brute_force_permutation_p(pol, draws, alternative):
    """Every assignment of the policy label within each seed, studentized statistic
    mean(d)/se(d): the sums and sums of squares of d over the full null by repeated outer
    sums (no evalkit code)."""
    per_seed = []
    for p, d in zip(pol, draws):
        runs = np.array([p] + list(d))
        per_seed.append((runs.sum() - runs) / (runs.size - 1) - runs)    # label j -> d(j)
    s, q = np.zeros(1), np.zeros(1)
    for vals in per_seed:
        s = np.add.outer(s, vals).ravel()
        q = np.add.outer(q, vals ** 2).ravel()
    n = len(per_seed)
    t_all = (s / n) / np.sqrt((q - s ** 2 / n) / (n - 1) / n)
    t = t_all[0]                                  # label 0 everywhere: the observed one
    ge = np.mean(t_all >= t - 1e-9 * abs(t))
    le = np.mean(t_all <= t + 1e-9 * abs(t))
    return {"greater": ge, "two-sided": min(1.0, 2 * min(ge, le))}[alternative]


def reference_d(runs_dir, policy):
    """Independent per-seed d = mean(draws) - policy, seeds sorted."""
    pol, draws = reference_design(runs_dir, policy)
    return np.array([np.mean(d) - p for p, d in zip(pol, draws)])


def floored_p(claim_dict, d, alternative):
    """The claim's test on the document's units, after checking the units give the
    independently computed d."""
    units = claim_dict["units"]
    pol = np.array([u["v_policy"] for u in units])
    draws = [np.array(u["v_draws"]) for u in units]
    assert np.array([x.mean() for x in draws]) - pol == pytest.approx(d, abs=1e-12)
    return floored_mean_test(pol, draws, alternative).p_value


def test_beats_envelope_reaches_calibrated_and_deployable_is_not_shown(campaigns):
    res = audited(campaigns, "sim_bursty")
    wa = res.claim("wa")
    # 10 seeds x 2 draws: G - G_pred = +0.32 pp, its 90% CI [-1.16, +1.31] pp inside the
    # tolerance +-0.25 |G| = +-1.67 pp -- the gain is shown to be explained by overlap
    assert wa.tier == "calibrated"
    assert wa.tier_status["harness"] == "passed"
    assert wa.tier_status["sidecar_transfer"] == "not_evaluable"
    assert wa.tier_status["placement_gain"] == "passed"
    assert wa.tier_status["deployable"] == "failed"
    cal = check(wa, "gain_explained_by_overlap")
    assert cal.passed is True and "90% CI; tolerance" in cal.found
    assert wa.verdict.startswith("calibrated: ") and "head-to-head" not in wa.verdict
    # under the bundled protocol the same self-registered claim stops at matched_budget
    # (its golden document: tests/e2e/test_audit_golden.py holds it to a fresh audit)
    golden = json.loads(golden_path("sim_bursty").read_text())
    assert next(c for c in golden["claims"] if c["policy"] == "wa")["tier"] == "matched_budget"
    d = reference_d(campaigns / "sim_bursty", "wa")
    out = wa.to_dict()
    assert out["n_seeds"] == 10 and out["wins"] == int((d > 0).sum()) >= 9
    assert out["mean_diff"] == pytest.approx(d.mean(), abs=1e-12)
    # two draws a seed, one d a seed: the draw-floored t-test on d
    assert out["test"] == "draw-floored t-test"
    assert out["draws_per_seed"] == [2] * 10 and out["method"].startswith("draw-floored t-test")
    assert out["p_two_sided"] == pytest.approx(floored_p(out, d, "two-sided"), rel=1e-9)
    assert out["p_one_sided"] == pytest.approx(floored_p(out, d, "greater"), rel=1e-9)
    assert out["min_p"] == pytest.approx(2 / 2 ** 10)
    # Holm over the three testable claims of the regime (statsmodels as reference)
    from statsmodels.stats.multitest import multipletests

    testable = [c for c in res.claims if c.sign_flip is not None]
    adj = multipletests([c.sign_flip.p_value for c in testable], method="holm")[1]
    assert out["p_adjusted"] == pytest.approx(adj[[c.policy for c in testable].index("wa")])


def test_harness_baselines_are_not_claims_and_incomplete_runs_are_excluded(campaigns):
    res = audited(campaigns, "sim_bursty")
    assert {c.policy for c in res.claims} == {"wa", "ewma", "calibrated_online"}
    assert any("fixed_h is a harness baseline" in n for n in res.runset.notes)
    assert [e["run_id"] for e in res.runset.excluded] == ["wa-s6-attempt0"]
    assert list(res.claim("wa").data.seeds) == list(range(10))   # the attempt adds no seed


def test_ties_stop_at_harness_not_significant(campaigns):
    ewma = audited(campaigns, "sim_bursty").claim("ewma")
    assert ewma.tier == "harness"
    sig = check(ewma, "gain_significant")
    assert sig.passed is False and "not significant" in sig.found
    assert "stops before matched_budget" in ewma.stop_reason


def test_loses_is_reported_as_worse(campaigns):
    bad = audited(campaigns, "sim_bursty").claim("calibrated_online")
    assert bad.tier == "harness"
    found = check(bad, "gain_significant").found
    assert "not better than matched random" in found and "WORSE" not in found
    assert bad.to_dict()["wins"] == 0 and bad.to_dict()["mean_diff"] < 0


def test_missing_no_sync_is_head_to_head_only(campaigns):
    wa = audited(campaigns, "sim_missing_no_sync").claim("wa")
    assert wa.tier == "matched_budget"
    assert wa.verdict.startswith("matched_budget: ") and "(head-to-head SLO)" in wa.verdict
    ns = check(wa, "no_sync_present")
    assert ns.passed is False
    assert all(f"no_sync for seed {s}" in ns.found for s in range(7))
    assert "never V = 0" in ns.recommendation
    assert check(wa, "psi_fit").evaluable is False


def test_k_mismatch_fails_with_both_k_values(campaigns):
    wa = audited(campaigns, "sim_k_mismatch").claim("wa")
    km = check(wa, "k_match")
    assert km.passed is False
    assert "seed 1: policy K = 4, draw mr-wa-s1-d0 K = 3" in km.found
    assert "seed 4" in km.found and "seed 2" not in km.found
    assert wa.tier == "harness" and "k_match" in wa.stop_reason


def test_underpowered_says_seeds_needed(campaigns):
    wa = audited(campaigns, "sim_underpowered").claim("wa")
    assert wa.tier == "harness" and wa.underpowered
    es = check(wa, "enough_seeds")
    assert es.passed is False and es.found.startswith("underpowered")
    assert es.recommendation == "underpowered: needs >= 6 seeds"
    assert "min attainable" not in wa.verdict and "needs >= 6 seeds" in wa.verdict
    gs = check(wa, "gain_significant")
    assert gs.found.startswith("underpowered") and "0.0625" in gs.found
    d = reference_d(campaigns / "sim_underpowered", "wa")
    assert wa.to_dict()["wins"] == int((d > 0).sum()) and wa.to_dict()["test"] == (
        "draw-floored t-test")


def test_oracle_is_a_bound_and_non_oracle_is_deployable(campaigns):
    res = audited(campaigns, "real_oracle")
    oracle = res.claim("calibrated_offline")
    # 10 seeds x 2 draws show the unexplained part within tolerance (equivalence): both
    # claims reach calibrated and stop before deployable, whose checks say why not
    assert oracle.tier == "calibrated" and oracle.tier_status["deployable"] == "failed"
    assert oracle.verdict.startswith("oracle bound (never deployable)")
    no = check(oracle, "not_oracle")
    assert no.passed is False and "saw future information" in no.found
    # the fixture's "vllm" runs carry a sidecar's metrics scrapes joined to their requests
    sidecar = check(oracle, "real_sidecar")
    assert sidecar.passed is True and "metrics scrapes that join the client's requests" in \
        sidecar.found
    assert oracle.tier_status["harness"] == "not_evaluable"
    online = res.claim("ewma")
    assert online.tier == "calibrated" and online.tier_status["deployable"] == "failed"
    # its runs record their code identity: resolved, and the causality probe shows no look-ahead
    no = check(online, "not_oracle")
    assert no.passed is True and "recorded code, resolved" in no.found
    assert check(online, "real_sidecar").passed is True
    # deployable would also need pre-registration: the fixture runs have no campaign plan
    assert check(online, "pre_registered").passed is False
    assert any(n.startswith("not pre-registered") for n in online.notes)


def test_summary_table_blocks_until_vouched(campaigns):
    wa = audited(campaigns, "summary_table.csv").claim("wa")
    assert wa.tier is None
    for name in ("k_match", "pairing_real", "schedules_in_corridor", "merge_durations_match",
                 "open_loop_sending"):
        c = check(wa, name)
        assert c.evaluable is False and c.blocking and "--accept-vouched" in c.recommendation


def test_summary_table_reaches_matched_budget(campaigns):
    from evalkit.audit.protocol import load_protocol

    res = audit_campaign(campaigns / "summary_table.csv",
                         protocol=load_protocol().with_accept_vouched(True))
    wa = res.claim("wa")
    assert wa.tier == "matched_budget"
    km = check(wa, "k_match")
    assert km.evaluable is False and not km.blocking and km.vouched and "vouches" in km.found
    assert wa.to_dict()["vouched"] == sorted(["draws_phi_uniform", "execution_drift", "k_match", "like_for_like",
                                              "merge_durations_match",
                                              "open_loop_sending", "pairing_real",
                                              "schedules_in_corridor"])
    assert any("vouches" in n for n in wa.notes)
    assert check(wa, "load_match").evaluable is False
    assert "load_match" in wa.stop_reason
    table = pd.read_csv(campaigns / "summary_table.csv")
    pol = table[table.policy == "wa"].set_index("seed").violation_rate
    mr = table[table.policy == "matched_random"].groupby("seed").violation_rate.mean()
    draws = table[table.policy == "matched_random"].groupby("seed").violation_rate.apply(list)
    out = wa.to_dict()
    assert out["n_seeds"] == 10 and out["wins"] == 8
    d = (mr.sort_index() - pol.sort_index()).to_numpy()
    assert len(draws) == 10
    assert out["p_two_sided"] == pytest.approx(floored_p(out, d, "two-sided"), rel=1e-9)
    assert [r["v_no_sync"] for r in out["per_seed"]] == pytest.approx(
        table[table.policy == "wa"].sort_values("seed").no_sync_violation_rate.tolist())


def test_nominal_pairing_is_flagged(tmp_path, campaigns):
    runs = tmp_path / "runs"
    shutil.copytree(campaigns / "sim_missing_no_sync", runs)
    # the draw replayed seed 4's requests but keeps seed 3's metadata (trace.sha256 ...)
    shutil.copy(runs / "mr-wa-s4-d0" / "requests.parquet",
                runs / "mr-wa-s3-d0" / "requests.parquet")
    wa = audit_campaign(runs).claim("wa")
    pr = check(wa, "pairing_real")
    assert pr.passed is False and "nominal pairing" in pr.found and "mr-wa-s3-d0" in pr.found
    assert wa.tier == "harness"


def test_missing_draws_name_the_runs_and_audit_completes(tmp_path, campaigns):
    runs = tmp_path / "runs"
    shutil.copytree(campaigns / "sim_missing_no_sync", runs)
    for d in ("mr-wa-s2-d0", "mr-wa-s2-d1"):
        shutil.rmtree(runs / d)
    wa = audit_campaign(runs).claim("wa")
    mr = check(wa, "matched_random_present")
    assert mr.passed is False and "matched_random of wa for seed 2" in mr.found
    assert wa.to_dict()["n_seeds"] == 9      # the test still ran on the paired seeds


def test_summary_table_input_errors(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("policy,seed,violation_rate\nwa,0,12.5\n")
    with pytest.raises(InputError) as info:
        audit_campaign(bad)
    assert info.value.column == "violation_rate" and "row 2" in str(info.value)
    bad.write_text("policy,seed\nwa,0\n")
    with pytest.raises(InputError, match="violation_rate"):
        audit_campaign(bad)
    bad.write_text("policy,seed,violation_rate,oracle\nwa,0,0.1,maybe\n")
    with pytest.raises(InputError, match="true/false"):
        audit_campaign(bad)


@pytest.mark.parametrize("args, code", [
    (["sim_bursty", "--policy", "wa"], 0),
    (["sim_bursty", "--policy", "wa", "--tier", "placement_gain"], 0),
    (["sim_bursty", "--policy", "wa", "--tier", "calibrated"], 0),
    (["sim_bursty", "--policy", "wa", "--tier", "deployable"], 1),
    (["sim_bursty", "--policy", "ewma"], 1),
    (["sim_bursty", "--policy", "calibrated_online"], 1),
    (["sim_missing_no_sync", "--policy", "wa"], 0),
    (["sim_missing_no_sync", "--policy", "wa", "--tier", "placement_gain"], 1),
    (["sim_k_mismatch", "--policy", "wa"], 1),
    (["sim_underpowered", "--policy", "wa"], 1),
    (["real_oracle", "--policy", "calibrated_offline", "--tier", "deployable"], 1),
    (["real_oracle", "--policy", "ewma", "--tier", "placement_gain", "--regime", "h200"], 0),
    (["real_oracle", "--policy", "ewma", "--tier", "deployable", "--regime", "h200"], 1),
    (["summary_table.csv", "--policy", "wa"], 1),
    (["summary_table.csv", "--policy", "wa", "--accept-vouched"], 0),
    (["summary_table.csv", "--policy", "nope"], 2),
    (["summary_table.csv", "--policy", "wa", "--tier", "golden"], 2),
    (["does_not_exist", "--policy", "wa"], 2),
])
def test_gate_exit_codes(campaigns, audit_document, args, code):
    """Under the protocol copy that allows self-registration (the fixtures are self-registered).
    A decision (exit 0 or 1) is made on the campaign's audit.json under the same rules; a bad
    input (exit 2) is the runs directory or table itself, refused before any audit."""
    name, options = args[0], args[1:]
    source = (audit_document(campaigns, name, "--accept-vouched" in options) if code != 2
              else campaigns / name)
    res = CliRunner().invoke(cli, ["gate", str(source), *options, "--verbose",
                                   "--protocol", str(SELFREG_PROTOCOL)])
    assert res.exit_code == code, res.output
    if code in (0, 1):
        assert ("gate PASS" if code == 0 else "gate FAIL") in res.output
        assert "expected:" in res.output and "found:" in res.output


def test_gate_under_the_bundled_protocol_stops_a_self_registered_claim_at_matched_budget():
    """On the campaign's recorded audit.json under the bundled protocol (the golden audit,
    tests/audit/test_gate_tiers.py)."""
    from tests.conftest import REPO

    recorded = REPO / "tests" / "report_documents" / "sim_bursty.audit.json"
    gate = ["gate", str(recorded), "--policy", "wa", "--tier"]
    assert CliRunner().invoke(cli, [*gate, "matched_budget"]).exit_code == 0
    res = CliRunner().invoke(cli, [*gate, "placement_gain"])
    assert res.exit_code == 1, res.output
    assert "gate FAIL: bursty/wa reached matched_budget" in res.output
    assert "registration: self-registered" in res.output


def test_gate_prints_underpowered_reason(campaigns):
    res = CliRunner().invoke(cli, ["gate", str(campaigns / "sim_underpowered"), "--policy", "wa"])
    assert res.exit_code == 1
    assert "underpowered" in res.output and "needs >= 6 seeds" in res.output


def test_an_audit_parses_each_run_json_once(monkeypatch):
    """The validating scan hands every run.json it parsed to the campaign and the claims."""
    import collections

    import evalkit.runlog.io as runlog_io

    parsed = collections.Counter()
    real = runlog_io.loads_json

    def counting(raw, file=None, **kwargs):
        if file is not None and str(file).endswith("run.json"):
            parsed[str(file)] += 1
        return real(raw, file=file, **kwargs)

    monkeypatch.setattr(runlog_io, "loads_json", counting)
    from tests.conftest import REPO

    audit_campaign(REPO / "fixtures" / "campaigns" / "sim_k_mismatch")  # the report reads none
    assert len(parsed) >= 50 and set(parsed.values()) == {1}, parsed.most_common(3)
