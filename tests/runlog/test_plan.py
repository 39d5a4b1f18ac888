"""Campaign plans (pre-registration): freeze, [design], sweep writes and stamps the plan."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.campaign import load_campaign, plan_campaign
from evalkit.policies.context import derived_seed
from evalkit.replay.sweep import run_campaign
from evalkit.replay.plan import freeze_plan
from evalkit.runlog.plan import PLAN_FILE, plan_sha256, read_plan, same_campaign, write_plan
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import TINY_CAMPAIGN

TINY = TINY_CAMPAIGN.format(seeds=2, draws=2)


@pytest.fixture()
def camp_file(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def test_freeze_records_every_planned_run_and_draw_seed(camp_file):
    plan = freeze_plan(camp_file, BUNDLED)
    assert plan["schema"] == "evalkit-plan/1" and plan["design"]["kind"] == "fixed"
    assert plan["alpha"] == 0.05 and plan["alternative"] == "two-sided"
    assert plan["protocol"]["name"] == "diloco-slo" and len(plan["protocol"]["sha256"]) == 64
    jobs = plan_campaign(load_campaign(camp_file))
    assert [r["run_id"] for r in plan["runs"]] == [j.run_id for j in jobs]
    draw = next(r for r in plan["runs"] if r["run_id"] == "tiny__mr-wa__s1__d1")
    assert (draw["role"], draw["seed"], draw["draw"], draw["matched_to"]) == (
        "matched_random", 1, 1, "wa")
    # independent of the sweep's code path: the documented derivation
    assert draw["rng_seed"] == derived_seed(1, "policy", "matched_random", "wa", 1)
    assert plan["corridor"] == {"min_gap_s": 40.0, "max_gap_s": 100.0, "merge_duration_s": 8.0,
                                "horizon_s": 240.0, "train_start_s": 0.0}
    again = freeze_plan(camp_file, BUNDLED)
    assert same_campaign(plan, again) == []
    assert plan_sha256(plan) == plan_sha256(json.loads(json.dumps(plan)))


@pytest.mark.parametrize("table, ok", [
    ('[design]\nkind = "sequential"\nmax_seeds = 2\nbatch = 1', True),
    ('[design]\nkind = "fixed"', True),
    ('[design]\nkind = "adaptive"', "design kind"),
    ('[design]\nkind = "sequential"\nmax_seeds = 3', "max_seeds"),       # > the 2 seeds
    ('[design]\nkind = "sequential"\nmax_seeds = 1', "max_seeds"),       # below 2
    ('[design]\nkind = "sequential"\nbatch = 0', "batch"),
    ('[design]\nkind = "fixed"\nbatch = 2', "sequential designs only"),
    ('[design]\nkind = "sequential"\nlooks = 3', "unknown key 'looks'"),
    ('[design]\nkind = "sequential"\nspending = "hwang-shih-decani"\ngamma = -2', True),
    ('[design]\nkind = "sequential"\nspending = "hwang-shih-decani"', "design.gamma"),
    ('[design]\nkind = "sequential"\ngamma = -2', "design.gamma"),
    ('[design]\nkind = "sequential"\nspending = "pocock"', "unknown spending"),
    ('[design]\nkind = "fixed"\nspending = "obrien-fleming"', "sequential designs only"),
])
def test_design_table_is_validated(tmp_path, table, ok):
    p = tmp_path / "c.toml"
    p.write_text(TINY.replace("[slo]", table + "\n[slo]"))
    if ok is True:
        plan = freeze_plan(p, BUNDLED)
        assert plan["design"]["kind"] in ("fixed", "sequential")
        if "sequential" in table:
            spending = ({"spending": "hwang-shih-decani", "gamma": -2.0} if "gamma" in table
                        else {"spending": "obrien-fleming", "gamma": None})
            assert plan["design"] == {"kind": "sequential", "alpha": 0.05, "max_seeds": 2,
                                      "batch": 1, **spending}
        else:
            assert "spending" not in plan["design"]
        return
    with pytest.raises(InputError, match=ok):
        freeze_plan(p, BUNDLED)


def test_cli_freeze_writes_once(camp_file, tmp_path):
    out = tmp_path / "plan.json"
    res = CliRunner().invoke(cli, ["plan", "freeze", str(camp_file), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["campaign"]["name"] == "tiny"
    res = CliRunner().invoke(cli, ["plan", "freeze", str(camp_file), "--out", str(out)])
    assert res.exit_code == 2 and "exists already" in res.output


def test_sweep_writes_the_plan_and_stamps_every_run(camp_file, tmp_path):
    runs = tmp_path / "runs"
    s = run_campaign(camp_file, runs, progress=False, protocol=BUNDLED)
    assert s.ok and any("plan.json written" in n for n in s.notes)
    plan = read_plan(runs)
    sha = plan_sha256(plan)
    for r in plan["runs"]:
        meta = json.loads((runs / r["run_id"] / "run.json").read_text())
        assert meta["plan_sha256"] == sha
        assert meta["rng_seeds"]["policy"] == r["rng_seed"]
        assert meta["created_at"] >= plan["created_at"]
    again = run_campaign(camp_file, runs, progress=False, protocol=BUNDLED)
    assert again.count("skipped") == len(plan["runs"])
    assert read_plan(runs) == plan                              # never rewritten
    camp_file.write_text(TINY.replace("e2e_s = 8.0", "e2e_s = 9.0"))
    res = CliRunner().invoke(cli, ["sweep", str(camp_file), "--out", str(runs)])
    assert res.exit_code == 2 and "another campaign" in res.output


def test_sweep_follows_a_plan_frozen_under_another_protocol(camp_file, tmp_path):
    from evalkit.audit.protocol import load_protocol

    runs = tmp_path / "runs"
    runs.mkdir()
    plan = freeze_plan(camp_file, BUNDLED)
    plan["protocol"]["sha256"] = "0" * 64           # as if frozen under an edited protocol
    write_plan(plan, runs / PLAN_FILE)
    assert load_protocol(None).sha256 != plan["protocol"]["sha256"]
    s = run_campaign(camp_file, runs, progress=False, jobs=plan_campaign(
        load_campaign(camp_file))[:1], protocol=BUNDLED)
    assert s.ok and any("existing plan.json" in n for n in s.notes)
    meta = json.loads((runs / plan["runs"][0]["run_id"] / "run.json").read_text())
    assert meta["plan_sha256"] == plan_sha256(plan)


def test_unreadable_plan_is_an_input_error(tmp_path):
    (tmp_path / PLAN_FILE).write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        read_plan(tmp_path)
    (tmp_path / PLAN_FILE).write_text(json.dumps({"schema": "other"}))
    with pytest.raises(InputError, match="not an evalkit plan"):
        read_plan(tmp_path)
    assert read_plan(tmp_path / "nowhere") is None


@pytest.mark.parametrize("displaced", [[".plan.json.old-1a2b3c4d"],
                                       [".plan.json.old-1a2b3c4d", ".plan.json.old-9f8e7d6c"]])
def test_an_unreadable_plan_names_the_plan_moved_aside_last(tmp_path, displaced):
    from evalkit.runlog.plan import load_plan

    (tmp_path / "plan.json").mkdir()              # a run directory took the plan's name
    for name in displaced:
        (tmp_path / name).write_text("{}")
    with pytest.raises(InputError) as err:
        load_plan(tmp_path / "plan.json")
    keep = sorted(displaced)[-1]
    assert f"moved aside as {keep}" in err.value.fix and f"mv {keep} plan.json" in err.value.fix
