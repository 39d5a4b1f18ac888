"""The audit against a campaign plan: an honest sweep passes; selected, renumbered, dropped,
renamed, hand-placed or unplanned runs fail, and so do rules changed after the plan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.audit.checks import plan as plan_checks
from evalkit.audit.protocol import load_protocol, parse_protocol
from evalkit.cli.main import cli
from evalkit.replay.sweep import run_campaign
from evalkit.runlog.plan import PLAN_FILE, read_plan
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import TINY_CAMPAIGN

CAMPAIGN = TINY_CAMPAIGN.format(seeds=2, draws=6)
PLAN_CHECKS = ("plan_complete", "draws_as_planned", "plan_rules", "draws_phi_uniform",
               "like_for_like", "pre_registered")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("planned")
    camp = root / "tiny.toml"
    camp.write_text(CAMPAIGN)
    summary = run_campaign(camp, root / "runs", progress=False, protocol=BUNDLED)
    assert summary.ok
    return root / "runs"


@pytest.fixture()
def runs(swept, tmp_path):
    out = tmp_path / "runs"
    shutil.copytree(swept, out)
    return out


def checks(runs, protocol=None, alpha=None):
    claim = audit_campaign(runs, protocol=protocol, alpha=alpha).claim("wa", "tiny")
    return {c.name: c for c in claim.checks}, claim


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def v_of(run_dir: Path) -> float:
    req = pd.read_parquet(run_dir / "requests.parquet")
    return float(((req.end_s - req.arrival_s) > 8.0).mean())


def test_honest_sweep_passes_every_plan_check(runs):
    got, claim = checks(runs)
    for name in PLAN_CHECKS:
        assert got[name].passed is True, (name, got[name].found)
    assert "all 12 draws regenerate" in got["draws_as_planned"].found
    assert claim.to_dict()["pre_registered"] is True
    assert not any("not pre-registered" in n for n in claim.notes)


@pytest.mark.parametrize("renumber", [False, True])
def test_keeping_the_worst_draws_fails(runs, renumber):
    for seed in (0, 1):
        ids = [runs / f"tiny__mr-wa__s{seed}__d{d}" for d in range(6)]
        worst = sorted(ids, key=v_of)[-2:]
        for d in ids:
            if d not in worst:
                shutil.rmtree(d)
        if renumber:                     # the kept two become d0 and d1
            for new, d in enumerate(sorted(worst)):
                d.rename(runs / f".tmp{new}")
            for new in range(2):
                dst = runs / f"tiny__mr-wa__s{seed}__d{new}"
                (runs / f".tmp{new}").rename(dst)
                edit_meta(dst, lambda m, new=new, dst=dst: m.update(run_id=dst.name, draw=new))
    got, _ = checks(runs)
    c = got["plan_complete"]
    assert c.passed is False and "missing" in c.found
    if renumber:
        assert got["draws_as_planned"].passed is False


def test_deleting_a_losing_seed_fails(runs):
    for d in runs.glob("tiny__*__s1*"):
        shutil.rmtree(d)
    got, claim = checks(runs)
    assert got["plan_complete"].passed is False
    assert "tiny__wa__s1 missing" in got["plan_complete"].found
    assert claim.data.seeds == [0]


def test_moving_a_seed_to_a_renamed_regime_fails(runs):
    # a visible rename passes the name rules: the plan still misses the seed
    for d in runs.glob("tiny__*__s1*"):
        edit_meta(d, lambda m: m.update(regime="tiny2"))
    c = checks(runs)[0]["plan_complete"]
    assert c.passed is False and "now says regime" in c.found


def test_moving_a_seed_to_an_invisibly_renamed_regime_is_refused(runs):
    from evalkit.errors import InputError

    for d in runs.glob("tiny__*__s1*"):
        edit_meta(d, lambda m: m.update(regime="tiny\u200b"))
    with pytest.raises(InputError) as err:
        checks(runs)
    assert "regime" in str(err.value)


def test_worst_case_schedule_as_a_draw_fails(runs):
    from evalkit.stats import RequestIndex, overlap_cost, sample_schedules

    d = runs / "tiny__mr-wa__s0__d2"
    req = pd.read_parquet(d / "requests.parquet")
    merges = pd.read_parquet(d / "merges.parquet")
    k = len(merges)
    cand = sample_schedules(k, (req.arrival_s.min(), req.arrival_s.max()), 8.0, 40.0, 100.0,
                            2000, 1, train_start=0.0, run_end=240.0)
    index = RequestIndex(req.arrival_s.to_numpy(), req.end_s.to_numpy())
    worst = cand[int(np.argmax(overlap_cost(cand, 8.0, index=index).phi))]
    merges["start_s"] = worst
    merges["end_s"] = worst + 8.0
    merges.to_parquet(d / "merges.parquet", index=False)
    c = checks(runs)[0]["draws_as_planned"]
    assert c.passed is False and "tiny__mr-wa__s0__d2 merge" in c.found


def test_swapped_draw_numbers_fail(runs):
    a, b = runs / "tiny__mr-wa__s1__d0", runs / "tiny__mr-wa__s1__d1"
    for table in ("merges", "requests", "steps"):
        pa, pb = a / f"{table}.parquet", b / f"{table}.parquet"
        tmp = a / "swap.parquet"
        pa.rename(tmp)
        pb.rename(pa)
        tmp.rename(pb)
    c = checks(runs)[0]["draws_as_planned"]
    assert c.passed is False and "tiny__mr-wa__s1__d0" in c.found


def test_an_unplanned_draw_fails(runs):
    src, dst = runs / "tiny__mr-wa__s0__d5", runs / "tiny__mr-wa__s0__d6"
    shutil.copytree(src, dst)
    edit_meta(dst, lambda m: m.update(run_id=dst.name, draw=6))
    c = checks(runs)[0]["plan_complete"]
    assert c.passed is False and "tiny__mr-wa__s0__d6 (matched_random) is not a planned run" \
        in c.found


def test_rules_changed_after_the_plan_fail(runs):
    c = checks(runs, alpha=0.1)[0]["plan_rules"]
    assert c.passed is False and "alpha 0.1, planned 0.05" in c.found
    text = (Path(__file__).resolve().parents[3] / "protocols" / "diloco-slo.toml").read_text()
    edited = parse_protocol(text.replace("min_seeds = 5", "min_seeds = 2"), source="p.toml",
                            file="p.toml")
    assert edited.name == load_protocol().name and edited.version == load_protocol().version
    c = checks(runs, protocol=edited)[0]["plan_rules"]
    assert c.passed is False and f"the plan froze diloco-slo v{edited.version}" in c.found


def test_runs_from_before_the_plan_or_another_plan_fail(runs):
    edit_meta(runs / "tiny__wa__s0", lambda m: m.update(created_at="2020-01-01T00:00:00+00:00"))
    edit_meta(runs / "tiny__mr-wa__s1__d3", lambda m: m.update(plan_sha256="0" * 64))
    c = checks(runs)[0]["plan_rules"]
    assert c.passed is False and "before the plan" in c.found and "000000000000" in c.found


@pytest.mark.parametrize("early_s, ok", [(299.0, True), (300.0, True), (301.0, False)])
def test_clock_skew_threshold(runs, early_s, ok):
    """A run stamped up to CLOCK_SKEW_S (300 s) before the plan's time passes (another
    machine's clock), one second more fails."""
    import datetime as dt

    frozen = dt.datetime.fromisoformat(read_plan(runs)["created_at"])
    stamp = (frozen - dt.timedelta(seconds=early_s)).isoformat()
    edit_meta(runs / "tiny__mr-wa__s0__d1", lambda m: m.update(created_at=stamp))
    assert checks(runs)[0]["plan_rules"].passed is ok


def test_a_removed_plan_is_not_a_campaign_without_one(runs):
    (runs / PLAN_FILE).unlink()
    got, claim = checks(runs)
    assert got["plan_complete"].passed is False and "no plan.json" in got["plan_complete"].found
    assert got["pre_registered"].passed is False
    assert claim.to_dict()["pre_registered"] is False


@pytest.mark.parametrize("where, shift, ok", [("late", -0.01, True), ("late", 0.01, False),
                                              ("early", -0.01, True), ("early", 0.01, False)])
def test_draw_lag_thresholds(runs, where, shift, ok):
    """A draw's logged merge from tolerance_s (0.05 s) before its planned start to
    tolerance_s + 1.5 of the seed's smallest inner step + start_lag_s (0.25 s) after it."""
    from evalkit.audit.checks.like_for_like import training_facts

    steps = []
    for d in runs.glob("tiny__*__s0*"):
        st = pd.read_parquet(d / "steps.parquet")
        steps.append(training_facts({"start_s": st.start_s, "end_s": st.end_s},
                                    {"start_s": [], "end_s": []}, (0.0, 240.0))["step_median_s"])
    move = 0.05 + 1.5 * min(steps) + 0.25 + shift if where == "late" else -(0.05 + shift)
    d = runs / "tiny__mr-wa__s0__d4"
    m = pd.read_parquet(d / "merges.parquet")
    m.loc[1, "start_s"] += move
    m.loc[1, "end_s"] += move
    m.to_parquet(d / "merges.parquet", index=False)
    c = checks(runs)[0]["draws_as_planned"]
    assert c.passed is ok, c.found
    if not ok:
        assert "tiny__mr-wa__s0__d4 merge 1" in c.found and "allowed" in c.found


def test_recorded_planned_starts_must_be_the_seeds(runs):
    # merges and run.json's planned starts rewritten together: the seed still says otherwise
    d = runs / "tiny__mr-wa__s1__d2"
    m = pd.read_parquet(d / "merges.parquet")
    m["start_s"] += 0.01
    m["end_s"] += 0.01
    m.to_parquet(d / "merges.parquet", index=False)
    edit_meta(d, lambda meta: meta["settings"]["effective"]["policy"].update(
        planned_starts=m.start_s.tolist()))
    c = checks(runs)[0]["draws_as_planned"]
    assert c.passed is False and "recorded planned starts" in c.found


def test_plan_survives_the_cli_audit_and_the_headline_says_so(runs, tmp_path):
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    audit = json.loads((tmp_path / "rep" / "audit.json").read_text())
    assert audit["claims"][0]["pre_registered"] is True
    from evalkit.runlog.plan import plan_sha256

    assert audit["pre_registration"]["plan_sha256"] == plan_sha256(read_plan(runs))
    (runs / PLAN_FILE).unlink()
    for d in runs.iterdir():
        edit_meta(d, lambda m: m.pop("plan_sha256", None))
    from evalkit.report.headline import headline

    res = audit_campaign(runs)
    doc = res.to_dict()
    assert "not pre-registered" in headline(doc["claims"][0], doc).sentence()
    assert doc["pre_registration"] == {
        "pre_registered": False, "plan_sha256": None, "text": "not pre-registered",
        "registration": {"kind": "self-registered", "challenge_id": None,
                         "text": "self-registered (no plan)"}}
    assert read_plan(runs) is None


def test_sequential_design_requires_every_seed_up_to_the_last_run(runs):
    """A sequential plan may stop early: later seeds are not run yet, but a seed before the
    last one that ran is a missing result."""
    plan_path = runs / PLAN_FILE
    plan = json.loads(plan_path.read_text())
    plan["design"] = {"kind": "sequential", "alpha": 0.05, "max_seeds": 2, "batch": 1}
    plan_path.write_text(json.dumps(plan))
    from evalkit.runlog.plan import plan_sha256

    sha = plan_sha256(plan)
    for d in runs.iterdir():
        if d.is_dir():
            edit_meta(d, lambda m: m.update(plan_sha256=sha))
    shutil.copytree(runs, runs.parent / "gap")
    for d in runs.glob("tiny__*__s1*"):          # stopped after seed 0
        shutil.rmtree(d)
    c = checks(runs)[0]["plan_complete"]
    assert c.passed is True and "seeds 1 not run yet (sequential design)" in c.found
    gap = runs.parent / "gap"
    for d in gap.glob("tiny__*__s0*"):           # seed 0 dropped, seed 1 kept: a gap
        shutil.rmtree(d)
    c = checks(gap)[0]["plan_complete"]
    assert c.passed is False and "tiny__wa__s0 missing" in c.found


def test_a_planned_merge_may_start_late_by_one_and_a_half_of_the_seeds_smallest_step(
        monkeypatch):
    steps = {"p": 2.0, "d": 0.5, "n": float("nan")}
    monkeypatch.setattr(plan_checks, "seed_runs", lambda pair: [(r, "x") for r in steps])
    monkeypatch.setattr(plan_checks, "run_facts", lambda ctx, r: {"step_median_s": steps[r]})
    spec = {"tolerance_s": 0.05, "start_lag_s": 0.2}
    assert plan_checks.merge_lag_bounds(None, None, spec) == pytest.approx((-0.05, 1.0))
    steps.update(p=float("nan"), d=float("nan"))
    assert plan_checks.merge_lag_bounds(None, None, spec) == pytest.approx((-0.05, 0.25))


def _restamp(runs, plan: dict) -> None:
    """Write ``plan`` as the runs directory's plan and stamp its hash into every run."""
    from evalkit.runlog.plan import plan_sha256

    (runs / PLAN_FILE).write_text(json.dumps(plan))
    sha = plan_sha256(plan)
    for d in runs.iterdir():
        if d.is_dir():
            edit_meta(d, lambda m: m.update(plan_sha256=sha))


def _reworded_protocol():
    """The bundled protocol with one description reworded: another file, the same rules."""
    text = (Path(__file__).resolve().parents[3] / "evalkit" / "audit" / "protocols" /
            "diloco-slo.toml").read_text()
    reworded = text.replace('description = "the paired test can reach alpha with this many '
                            'seeds"', 'description = "enough seeds for the paired test"')
    assert reworded != text
    edited = parse_protocol(reworded, source="p.toml", file="p.toml")
    bundled = load_protocol()
    assert edited.sha256 != bundled.sha256 and edited.content_sha256 == bundled.content_sha256
    return edited


def test_a_new_plan_records_and_compares_the_protocols_content_sha256(runs):
    content = load_protocol().content_sha256
    assert read_plan(runs)["protocol"]["content_sha256"] == content
    c = checks(runs)[0]["plan_rules"]
    assert c.passed is True
    assert f"content sha256 {content[:12]} as planned (content compared)" in c.found
    assert load_protocol().sha256[:12] not in c.found
    # a reworded file with the same rules is the planned protocol
    c = checks(runs, protocol=_reworded_protocol())[0]["plan_rules"]
    assert c.passed is True, c.found
    # vouching for what the runs cannot show is another rule than the planned one
    c = checks(runs, protocol=load_protocol().with_accept_vouched(True))[0]["plan_rules"]
    assert c.passed is False and "--accept-vouched changes it" in c.found
    # another content hash in the plan is another protocol, even with the same file hash
    plan = read_plan(runs)
    plan["protocol"]["content_sha256"] = "0" * 64
    _restamp(runs, plan)
    c = checks(runs)[0]["plan_rules"]
    assert c.passed is False
    assert f"has content sha256 {content[:12]}" in c.found and "000000000000" in c.found


def test_an_old_plan_without_a_content_hash_still_passes_by_its_file_sha256(runs):
    plan = read_plan(runs)
    del plan["protocol"]["content_sha256"]           # as frozen before it was recorded
    _restamp(runs, plan)
    content = load_protocol().content_sha256
    c = checks(runs)[0]["plan_rules"]
    assert c.passed is True, c.found
    assert (f"content sha256 {content[:12]} as planned (file sha256 compared: the plan records "
            "no content sha256)") in c.found
    # file to file: a reworded protocol file is not the file this plan froze
    c = checks(runs, protocol=_reworded_protocol())[0]["plan_rules"]
    assert c.passed is False and \
        f"is not the file the plan froze diloco-slo v{load_protocol().version}" in c.found


def test_draws_off_their_seeds_are_listed_six_and_counted(runs):
    from tests.support.one_check import audit_check

    draws = sorted(runs.glob("tiny__mr-wa__*"))
    for d in draws:
        merges = pd.read_parquet(d / "merges.parquet")
        merges[["start_s", "end_s"]] += 5.0
        merges.to_parquet(d / "merges.parquet", index=False)
    c = audit_check(runs, "wa", "draws_as_planned", regime="tiny")
    assert c.passed is False
    listed = c.found.removeprefix("draws not as planned: ")
    assert listed.endswith(f" (+{len(draws) - 6} more)") and listed.count("; ") == 5
