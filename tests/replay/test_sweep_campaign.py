"""Campaign parsing, planning, resumability and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.campaign import load_campaign, plan_campaign
from evalkit.replay.sweep import run_campaign
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import tiny_campaign

SMALL = tiny_campaign(seeds=2, draws=2, calibrated_offline=True)


def _write(tmp_path, text, name="c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_plan_orders_references_before_draws(tmp_path):
    camp = load_campaign(_write(tmp_path, SMALL))
    jobs = plan_campaign(camp)
    ids = [j.run_id for j in jobs]
    assert len(ids) == 2 * (1 + 2 + 2 * 2) == len(set(ids))
    pos = {r: i for i, r in enumerate(ids)}
    for j in jobs:
        for d in j.depends_on:
            assert pos[d] < pos[j.run_id]
    assert "tiny__mr-wa__s1__d1" in pos and "tiny__no_sync__s0" in pos


def test_sweep_runs_resumes_and_redoes_incomplete(tmp_path):
    camp = _write(tmp_path, SMALL)
    runs = tmp_path / "runs"
    s1 = run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    assert s1.ok and s1.count("ran") == 14
    for d in ("tiny__mr-calibrated_offline__s0__d0", "tiny__mr-wa__s1__d1"):
        meta = json.loads((runs / d / "run.json").read_text())
        ref = json.loads((runs / meta["reference_run_id"] / "run.json").read_text())
        assert meta["reference_k"] == ref["k_observed"] == meta["k_observed"]
        assert meta["role"] == "matched_random" and meta["matched_to"] in ("wa",
                                                                         "calibrated_offline")
    s2 = run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    assert s2.count("skipped") == 14 and s2.count("ran") == 0
    shutil.rmtree(runs / "tiny__wa__s0")
    meta_p = runs / "tiny__no_sync__s1" / "run.json"
    meta = json.loads(meta_p.read_text())
    meta["complete"] = False
    meta_p.write_text(json.dumps(meta))
    s3 = run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    ran = {o.run_id for o in s3.outcomes if o.status == "ran"}
    assert ran == {"tiny__wa__s0", "tiny__no_sync__s1"}


def test_a_fresh_plan_needs_the_protocol_given_and_a_resumed_sweep_follows_the_one_there(
        tmp_path):
    """The replay loads no protocol: a runs directory without a plan and no protocol passed is
    refused before anything is written; resuming needs none, and still refuses a campaign the
    plan there was not frozen for."""
    camp = _write(tmp_path, tiny_campaign(seeds=1, draws=1))
    runs = tmp_path / "runs"
    with pytest.raises(InputError) as err:
        run_campaign(camp, runs, progress=False)
    assert err.value.column == "protocol" and err.value.file.endswith("plan.json")
    assert "load_protocol" in err.value.fix and "evalkit plan freeze" in err.value.fix
    assert not runs.exists()
    jobs = plan_campaign(load_campaign(camp))[:1]
    assert run_campaign(camp, runs, progress=False, jobs=jobs, protocol=BUNDLED).ok
    again = run_campaign(camp, runs, progress=False, jobs=jobs)
    assert again.count("skipped") == 1 and again.ok
    other = _write(tmp_path, tiny_campaign(seeds=2, draws=1), name="other.toml")
    with pytest.raises(InputError, match="frozen for another campaign"):
        run_campaign(other, runs, progress=False, jobs=jobs)


def test_failed_reference_blocks_its_draws(tmp_path, monkeypatch):
    from evalkit.replay.backends import sim

    real = sim.replay

    def flaky(spec, trace, policy, progress=None):
        if spec.run_id == "tiny__wa__s0":
            raise RuntimeError("engine died")
        return real(spec, trace, policy, progress=progress)

    monkeypatch.setattr(sim, "replay", flaky)
    s = run_campaign(_write(tmp_path, SMALL), tmp_path / "runs", progress=False, protocol=BUNDLED)
    st = {o.run_id: o.status for o in s.outcomes}
    assert st["tiny__wa__s0"] == "failed"
    assert st["tiny__mr-wa__s0__d0"] == "blocked"
    assert st["tiny__calibrated_offline__s0"] == "blocked"     # its K comes from wa
    assert st["tiny__wa__s1"] == "ran" and not s.ok
    meta = json.loads((tmp_path / "runs" / "tiny__wa__s0" / "run.json").read_text())
    assert meta["complete"] is False
    assert not (tmp_path / "runs" / "tiny__mr-wa__s0__d0").exists()


@pytest.mark.parametrize("mutate, match", [
    (lambda t: t.replace('regime = "tiny"', 'regime = "tiny"\nbogus = 1'), "bogus.*line 3"),
    (lambda t: t.replace("seeds = 2", "seeds = [1, 1]"), "seeds"),
    (lambda t: t.replace('name = "wa"', 'name = "wax"'), "unknown policy"),
    (lambda t: t.replace('k_from = "wa"', 'k_from = "nope"'), "k_from"),
    (lambda t: t.replace("h_min = 80", "h_min = 900"), "h_min"),
    (lambda t: t.replace("horizon_s = 240.0", "horizon_s = 30.0"), "infeasible corridor"),
    (lambda t: t.replace("e2e_s = 8.0", "e2e_s = "), "malformed TOML"),
    (lambda t: t.replace("[[policies]]\nname = \"wa\"", "[[policies]]\nname = \"wa\"\n"
                         "params = { H = 3 }"), "valid parameters"),
])
def test_bad_campaigns_exit_2_without_runs(tmp_path, mutate, match):
    camp = _write(tmp_path, mutate(SMALL))
    with pytest.raises(InputError, match=match):
        load_campaign(camp)
    res = CliRunner().invoke(cli, ["sweep", str(camp), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_trace_beyond_horizon_or_bad_trace_file_is_rejected_before_running(tmp_path):
    import pandas as pd

    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"arrival_s": [0.0, 5.0, 3.0], "prompt_tokens": [1, 2, 3],
                  "output_tokens": [1, 2, 3]}).to_parquet(bad)
    text = SMALL.replace("""generator = "square_wave"
period_s = 60.0
burst_s = 20.0
quiet_rate = 2.0
busy_rate = 10.0
prompt_tokens = "lognormal:256,0.5"
output_tokens = "lognormal:64,0.5"
""", f'path = "{bad.name}"\n')
    res = CliRunner().invoke(cli, ["sweep", str(_write(tmp_path, text)), "--out",
                                   str(tmp_path / "runs")])
    assert res.exit_code == 2 and "backwards" in res.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    long = SMALL.replace('generator = "square_wave"', 'generator = "square_wave"\nduration_s = 500.0')
    res = CliRunner().invoke(cli, ["sweep", str(_write(tmp_path, long, "l.toml")), "--out",
                                   str(tmp_path / "runs2")])
    assert res.exit_code == 2 and "beyond the horizon" in res.output
    assert not (tmp_path / "runs2").exists() or not any((tmp_path / "runs2").iterdir())


def test_example_campaigns_load(repo_root):
    for name in ("bursty", "nonperiodic"):
        camp = load_campaign(repo_root / "examples" / f"{name}.toml")
        assert len(camp.seeds) >= 10 and camp.merge_duration_s == 8.0
        assert {p.name for p in camp.policies} >= {"fixed_h", "pressure_gate", "wa",
                                                   "calibrated_offline", "calibrated_online",
                                                   "ewma"}


def test_azure_campaign_resolves_shared_trace(repo_root, azure_trace):
    from evalkit.replay.job import build_trace

    camp = load_campaign(repo_root / "examples" / "azure.toml")
    tr = build_trace(camp, 0)
    assert tr.n > 100 and tr.arrival_s[-1] <= camp.horizon_s


def test_replay_cli_single_run_and_unknown_policy(tmp_path):
    from evalkit.replay.traces import generate

    tp = tmp_path / "t.parquet"
    generate("poisson", seed=0, rate=2.0, duration_s=200.0).write(tp)
    r = CliRunner().invoke(cli, ["replay", "--trace", str(tp), "--policy", "fixed_h",
                                 "--seed", "3", "--param", "H=100", "--out",
                                 str(tmp_path / "runs"), "--h-min", "40", "--h-max", "120"])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "runs" / "adhoc__fixed_h__s3" / "run.json").read_text())
    assert meta["policy_params"] == {"H": 100} and meta["backend"] == "sim"
    r2 = CliRunner().invoke(cli, ["replay", "--trace", str(tp), "--policy", "fixd",
                                  "--seed", "3", "--out", str(tmp_path / "runs")])
    assert r2.exit_code == 2 and "fixed_h" in r2.output
    r3 = CliRunner().invoke(cli, ["replay", "--trace", str(tp), "--policy", "matched_random",
                                  "--seed", "3", "--out", str(tmp_path / "runs"),
                                  "--h-min", "40", "--h-max", "120", "--reference",
                                  str(tmp_path / "runs" / "adhoc__fixed_h__s3")])
    assert r3.exit_code == 0, r3.output
