"""One job-input builder for `evalkit replay` and `evalkit sweep` (evalkit/replay/job.py).

An oracle's request intervals come from the recorded no-sync run in both; a reference
run's K and the matched-random wiring are worked out by the same function.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.campaign import load_campaign, plan_campaign
from evalkit.replay.job import MissingInput, build_trace, job_spec, resolve_inputs
from evalkit.replay.sweep import run_campaign
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import tiny_campaign

# the tiny campaign (wa, and calibrated_offline taking wa's K): one seed, one draw
CAMPAIGN = tiny_campaign(seeds=1, draws=1, calibrated_offline=True)

# run.json keys that say how a run was started (a sweep's campaign, plan and slot), not what
# it replayed
SWEEP_ONLY = {"campaign_fingerprint", "campaign", "plan_sha256"}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("job")
    path = tmp / "c.toml"
    path.write_text(CAMPAIGN)
    runs = tmp / "runs"
    summary = run_campaign(path, runs, progress=False, protocol=BUNDLED)
    assert summary.ok, summary.format()
    trace_file = tmp / "trace.parquet"
    camp = load_campaign(path)
    build_trace(camp, 0).write(trace_file)
    return tmp, camp, runs, trace_file


def _cli_replay(trace_file, out, policy, *extra):
    return CliRunner().invoke(cli, [
        "replay", "--trace", str(trace_file), "--policy", policy, "--seed", "0",
        "--out", str(out), "--regime", "tiny", "--horizon-s", "240", "--merge-duration-s", "8",
        "--inner-step-s", "0.5", "--h-min", "80", "--h-max", "200", "--slo-e2e-s", "8",
        *extra])


def _comparable(meta: dict) -> dict:
    meta = json.loads(json.dumps(meta))
    for key in ("created_at", "run_order", "plan_sha256"):   # the clock; a sweep's slot
        meta.pop(key, None)
    req = meta["settings"]["requested"]
    for key in SWEEP_ONLY:
        req.pop(key, None)
    return meta


def test_sweep_and_replay_give_the_oracle_the_same_intervals(swept):
    tmp, camp, runs, _ = swept
    job = next(j for j in plan_campaign(camp) if j.policy and j.kind == "policy"
               and j.policy.name == "calibrated_offline")
    spec, *_ = job_spec(camp, job)
    trace = build_trace(camp, 0)
    from_sweep, extra_s = resolve_inputs(spec, runs, k_from=job.k_from_run,
                                         intervals_from=job.intervals_from_run, trace=trace)
    from_cli, extra_c = resolve_inputs(spec, tmp, k_from=f"runs/{job.k_from_run}",
                                       intervals_from=runs / job.intervals_from_run,
                                       trace=trace)
    pd.testing.assert_frame_equal(from_sweep.future_requests, from_cli.future_requests)
    ns = pq.read_table(runs / job.intervals_from_run / "requests.parquet").to_pandas()
    assert from_sweep.future_requests["arrival_s"].tolist() == ns["arrival_s"].tolist()
    assert extra_s == extra_c == {"oracle_intervals_from": job.intervals_from_run}
    wa = json.loads((runs / job.k_from_run / "run.json").read_text())
    assert from_sweep.reference_k == from_cli.reference_k == wa["k_observed"]


def test_cli_replay_of_the_oracle_writes_the_run_the_sweep_wrote(swept):
    tmp, camp, runs, trace_file = swept
    out = tmp / "cli"
    res = _cli_replay(trace_file, out, "calibrated_offline", "--param", "k_from=wa",
                      "--run-id", "tiny__calibrated_offline__s0",
                      "--reference", str(runs / "tiny__wa__s0"),
                      "--no-sync-run", str(runs / "tiny__no_sync__s0"))
    assert res.exit_code == 0, res.output
    a, b = runs / "tiny__calibrated_offline__s0", out / "tiny__calibrated_offline__s0"
    for table in ("requests", "merges", "decisions", "steps", "signals"):
        if (a / f"{table}.parquet").exists():
            assert pq.read_table(a / f"{table}.parquet").equals(
                pq.read_table(b / f"{table}.parquet")), table
    ma = _comparable(json.loads((a / "run.json").read_text()))
    mb = _comparable(json.loads((b / "run.json").read_text()))
    assert ma["settings"]["requested"]["oracle_intervals_from"] == "tiny__no_sync__s0"
    assert ma == mb


def test_cli_matched_random_is_wired_to_its_reference_as_in_the_sweep(swept):
    tmp, camp, runs, trace_file = swept
    out = tmp / "cli-mr"
    res = _cli_replay(trace_file, out, "matched_random", "--run-id", "tiny__mr-wa__s0__d0",
                      "--reference", str(runs / "tiny__wa__s0"))
    assert res.exit_code == 0, res.output
    mb = json.loads((out / "tiny__mr-wa__s0__d0" / "run.json").read_text())
    ma = json.loads((runs / "tiny__mr-wa__s0__d0" / "run.json").read_text())
    for key in ("matched_to", "draw", "reference_run_id", "reference_k", "role"):
        assert mb[key] == ma[key], key


def test_an_oracle_replay_without_the_no_sync_run_exits_2_naming_the_option(swept):
    tmp, _, runs, trace_file = swept
    res = _cli_replay(trace_file, tmp / "none", "calibrated_offline", "--param", "k=2")
    assert res.exit_code == 2, res.output
    assert "--no-sync-run" in res.output and "oracle" in res.output
    assert not (tmp / "none").exists()
    res = _cli_replay(trace_file, tmp / "none", "wa", "--no-sync-run",
                      str(runs / "tiny__no_sync__s0"))
    assert res.exit_code == 2 and "not one" in res.output, res.output


def test_an_oracle_refuses_a_no_sync_run_of_another_seed_or_role(swept):
    tmp, camp, runs, _ = swept
    job = next(j for j in plan_campaign(camp) if j.kind == "policy"
               and j.policy.name == "calibrated_offline")
    spec, *_ = job_spec(camp, job)
    trace = build_trace(camp, 0)
    with pytest.raises(InputError, match="seed 0, this replay seed 1"):
        resolve_inputs(spec.__class__(**{**spec.__dict__, "seed": 1}), runs,
                       intervals_from=job.intervals_from_run)
    with pytest.raises(InputError, match="its role is 'policy'"):
        resolve_inputs(spec, runs, intervals_from="tiny__wa__s0", trace=trace)
    with pytest.raises(InputError, match="replayed trace"):
        resolve_inputs(spec, runs, intervals_from=job.intervals_from_run,
                       trace=build_trace(camp, 1))
    with pytest.raises(MissingInput, match="no-sync run nowhere is missing or failed"):
        resolve_inputs(spec, runs, intervals_from="nowhere")
    with pytest.raises(MissingInput, match="reference run nowhere is missing"):
        resolve_inputs(spec, runs, k_from="nowhere")
