"""Campaigns across machines: shards, --check, the scheduler's ordering, Ray, bad input."""

from __future__ import annotations

import concurrent.futures as cf
import json
import socket
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.campaign import (Shard, load_campaign, parse_shard,
                                     plan_campaign, shard_jobs)
from evalkit.replay.job import JobOutcome, execute_job
from evalkit.replay.sweep import check_campaign, run_campaign
from evalkit.runlog.execution_order import dependency_groups
from tests.support.protocols import BUNDLED
from tests.support.tiny_campaign import TINY_SQUARE_WAVE

TINY = TINY_SQUARE_WAVE + """[[policies]]
name = "fixed_h"
params = { H = 100 }
"""


def _write(tmp_path, text=TINY, name="c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _tables(run_dir: Path):
    return (pd.read_parquet(run_dir / "requests.parquet"),
            pd.read_parquet(run_dir / "merges.parquet"),
            json.loads((run_dir / "run.json").read_text()))


# ----------------------------------------------------------------------------- shards

@pytest.mark.parametrize("text, want", [("0/1", Shard(0, 1)), ("3/8", Shard(3, 8)),
                                        (" 7 / 8 ", Shard(7, 8))])
def test_parse_shard_accepts(text, want):
    assert parse_shard(text) == want


@pytest.mark.parametrize("text, match", [("8/8", "out of range"), ("-1/4", "out of range"),
                                         ("0/0", ">= 1"), ("1/-2", ">= 1"),
                                         ("a/b", "malformed"), ("3", "malformed"),
                                         ("1/2/3", "malformed")])
def test_parse_shard_rejects(text, match):
    with pytest.raises(InputError, match=match) as info:
        parse_shard(text)
    assert info.value.column == "--shard" and "0 <= I < N" in info.value.fix


def test_shard_out_of_range_exits_2_before_running(tmp_path):
    camp = _write(tmp_path)
    for spec in ("4/4", "x/4", "0/0"):
        res = CliRunner().invoke(cli, ["sweep", str(camp), "--out", str(tmp_path / "runs"),
                                       "--shard", spec])
        assert res.exit_code == 2 and "--shard" in res.output, res.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("n", [1, 2, 3, 5, 40])
def test_shards_partition_the_plan_and_keep_draws_with_references(tmp_path, n):
    camp = load_campaign(_write(tmp_path, TINY.replace("seeds = 2", "seeds = 5")))
    jobs = plan_campaign(camp)
    parts = [shard_jobs(jobs, Shard(i, n)) for i in range(n)]
    ids = [j.run_id for p in parts for j in p]
    assert sorted(ids) == sorted(j.run_id for j in jobs)            # disjoint and complete
    where = {j.run_id: i for i, p in enumerate(parts) for j in p}
    for j in jobs:                                                  # dependencies never cross
        for d in j.depends_on:
            assert where[d] == where[j.run_id]
    for p in parts:                                                 # plan order kept
        pos = [jobs.index(j) for j in p]
        assert pos == sorted(pos)
    # deterministic: recomputed from a freshly loaded campaign
    again = plan_campaign(load_campaign(camp.path))
    assert [[j.run_id for j in p] for p in parts] == \
        [[j.run_id for j in shard_jobs(again, Shard(i, n))] for i in range(n)]
    # balanced: greedy largest-first keeps the spread within one group's size
    biggest = max(len(g) for g in dependency_groups(jobs))
    loads = [len(p) for p in parts]
    assert max(loads) - min(loads) <= biggest


def test_dependency_groups_by_brute_force(tmp_path):
    camp = load_campaign(_write(tmp_path))
    jobs = plan_campaign(camp)
    # brute force: transitive closure of the undirected dependency relation
    adj = {j.run_id: set(j.depends_on) for j in jobs}
    for j in jobs:
        for d in j.depends_on:
            adj[d].add(j.run_id)
    comps, seen = [], set()
    for j in jobs:
        if j.run_id in seen:
            continue
        stack, comp = [j.run_id], set()
        while stack:
            r = stack.pop()
            if r not in comp:
                comp.add(r)
                stack.extend(adj[r] - comp)
        seen |= comp
        comps.append(comp)
    got = [{j.run_id for j in g} for g in dependency_groups(jobs)]
    assert sorted(map(sorted, got)) == sorted(map(sorted, comps))
    s0 = next(g for g in got if "tiny__no_sync__s0" in g)
    assert {"tiny__wa__s0", "tiny__calibrated_offline__s0", "tiny__mr-wa__s0__d1"} <= s0
    assert "tiny__fixed_h__s0" not in s0


def test_shards_then_check_then_resume(tmp_path):
    camp = _write(tmp_path)
    runs = tmp_path / "runs"
    r = CliRunner()
    res = r.invoke(cli, ["sweep", str(camp), "--out", str(runs), "--check"])
    assert res.exit_code == 2 and res.output.count("missing") == 20, res.output
    for i in (0, 2):
        res = r.invoke(cli, ["sweep", str(camp), "--out", str(runs), "--shard", f"{i}/3"])
        assert res.exit_code == 0, res.output
    mid = check_campaign(camp, runs)
    todo = {s.run_id for s in mid.missing}
    assert todo == {j.run_id for j in shard_jobs(plan_campaign(load_campaign(camp)),
                                                   Shard(1, 3))}
    res = r.invoke(cli, ["sweep", str(camp), "--out", str(runs), "--check", "--shard", "0/3"])
    assert res.exit_code == 0 and "shard 0/3" in res.output
    res = r.invoke(cli, ["sweep", str(camp), "--out", str(runs), "--check"])
    assert res.exit_code == 2 and all(t in res.output for t in todo)
    # an incomplete run and a damaged one are listed, not counted complete
    meta_p = runs / "tiny__fixed_h__s0" / "run.json"
    meta = json.loads(meta_p.read_text())
    meta["complete"], meta["error"] = False, "engine died"
    meta_p.write_text(json.dumps(meta))
    states = {s.run_id: s for s in check_campaign(camp, runs).states}
    assert states["tiny__fixed_h__s0"].state == "incomplete"
    assert "engine died" in states["tiny__fixed_h__s0"].detail
    # the unsharded sweep fills the gaps only
    s = run_campaign(camp, runs, progress=False, n_jobs=2, protocol=BUNDLED)
    ran = {o.run_id for o in s.outcomes if o.status == "ran"}
    assert s.ok and ran == todo | {"tiny__fixed_h__s0"}
    res = r.invoke(cli, ["sweep", str(camp), "--out", str(runs), "--check"])
    assert res.exit_code == 0 and "20 of 20 runs complete" in res.output
    # other campaign settings make every run stale
    changed = _write(tmp_path, TINY.replace("e2e_s = 8.0", "e2e_s = 9.0"), "d.toml")
    assert {s.state for s in check_campaign(changed, runs).states} == {"stale"}
    # each matched-random draw used its own shard's reference K
    for d in ("tiny__mr-calibrated_offline__s1__d0", "tiny__mr-fixed_h__s0__d1"):
        meta = json.loads((runs / d / "run.json").read_text())
        ref = json.loads((runs / meta["reference_run_id"] / "run.json").read_text())
        assert meta["reference_k"] == ref["k_observed"]


def test_check_bad_campaign_exits_2(tmp_path):
    camp = _write(tmp_path, TINY.replace("seeds = 2", "seeds = -1"))
    res = CliRunner().invoke(cli, ["sweep", str(camp), "--out", str(tmp_path), "--check"])
    assert res.exit_code == 2 and "seeds" in res.output


# ----------------------------------------------------------------------------- scheduling

class FakeExecutor:
    """Threads that pretend to run jobs; records submissions and concurrency."""

    def __init__(self, fail=(), max_in_flight=None):
        self.pool = cf.ThreadPoolExecutor(4)
        self.fail, self.max_in_flight = set(fail), max_in_flight
        self.submitted: list[str] = []
        self.active = self.peak = 0
        self.lock = threading.Lock()

    def _job(self, job):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(0.002)
        with self.lock:
            self.active -= 1
        status = "failed" if job.run_id in self.fail else "ran"
        return JobOutcome(job.run_id, status, "engine died\ntraceback" if status == "failed"
                          else "")

    def submit(self, fn, camp, job, runs_dir):
        assert fn is execute_job
        self.submitted.append(job.run_id)
        return self.pool.submit(self._job, job)

    def shutdown(self):
        self.pool.shutdown()


def test_failed_reference_skips_its_draws_without_submitting(tmp_path):
    camp = load_campaign(_write(tmp_path))
    ex = FakeExecutor(fail={"tiny__wa__s0"})
    s = run_campaign(camp, tmp_path / "runs", executor=ex, progress=False, protocol=BUNDLED)
    st = {o.run_id: o for o in s.outcomes}
    blocked = {r for r, o in st.items() if o.status == "blocked"}
    assert blocked == {"tiny__mr-wa__s0__d0", "tiny__mr-wa__s0__d1",
                       "tiny__calibrated_offline__s0", "tiny__mr-calibrated_offline__s0__d0",
                       "tiny__mr-calibrated_offline__s0__d1"}
    assert not blocked & set(ex.submitted) and len(ex.submitted) == 20 - 5
    msg = st["tiny__mr-wa__s0__d0"].message
    assert "reference run tiny__wa__s0 failed: engine died" in msg and "draws are skipped" in msg
    assert "tiny__calibrated_offline__s0 blocked" in st["tiny__mr-calibrated_offline__s0__d1"
                                                         ].message
    assert not s.ok and "blocked: tiny__mr-wa__s0__d0" in s.format()


def test_scheduler_orders_dependencies_and_caps_in_flight(tmp_path):
    camp = load_campaign(_write(tmp_path))
    ex = FakeExecutor(max_in_flight=2)
    s = run_campaign(camp, tmp_path / "runs", executor=ex, progress=False, protocol=BUNDLED)
    assert s.ok and s.count("ran") == 20 and ex.peak <= 2
    pos = {r: i for i, r in enumerate(ex.submitted)}
    for j in plan_campaign(camp):
        for d in j.depends_on:
            assert pos[d] < pos[j.run_id]


# ----------------------------------------------------------------------------- traces

@pytest.mark.parametrize("spelling", ["square-wave", "square", "square_wave"])
def test_generator_spellings_match_generate(tmp_path, spelling):
    from evalkit.replay.job import build_trace
    from evalkit.replay.traces import generate

    camp = load_campaign(_write(tmp_path, TINY.replace('"square_wave"', f'"{spelling}"')))
    ref = load_campaign(_write(tmp_path, TINY, "ref.toml"))
    assert camp.trace["generator"] == "square_wave"
    assert camp.fingerprint() == ref.fingerprint()
    direct = generate(spelling, seed=1, period_s=40.0, burst_s=10.0, quiet_rate=1.0,
                      busy_rate=4.0, duration_s=160.0)
    assert build_trace(camp, 1).arrival_s.tolist() == direct.arrival_s.tolist()


@pytest.mark.parametrize("spelling, params", [
    ("gamma_arrivals", 'rate = 2.0\nburstiness = 0.5'), ("mmpp_bursts", 'quiet_rate = 1.0\n'
                                                'busy_rate = 5.0\nmean_quiet_s = 30.0\n'
                                                'mean_burst_s = 10.0')])
def test_generator_aliases_accepted(tmp_path, spelling, params):
    text = TINY.replace('''generator = "square_wave"
period_s = 40.0
burst_s = 10.0
quiet_rate = 1.0
busy_rate = 4.0''', f'generator = "{spelling}"\n{params}')
    camp = load_campaign(_write(tmp_path, text))
    assert camp.trace["generator"] in ("gamma", "mmpp")
    with pytest.raises(InputError, match="unknown trace generator"):
        load_campaign(_write(tmp_path, TINY.replace('"square_wave"', '"squarewave"'), "b.toml"))


def test_named_file_trace_does_not_mutate_the_cached_trace(tmp_path):
    from evalkit.replay import job
    from evalkit.replay.traces import generate

    generate("poisson", seed=0, rate=1.0, duration_s=150.0, name="orig").write(
        tmp_path / "t.parquet")
    text = TINY.split("[trace]")[0] + '[trace]\npath = "t.parquet"\nname = "renamed"\n' + \
        "[[policies]]" + TINY.split("[[policies]]", 1)[1]
    camp = load_campaign(_write(tmp_path, text))
    tr = job.build_trace(camp, 0)
    assert tr.name == "renamed"
    cached = job._load_file_trace(str((tmp_path / "t.parquet").resolve()), "parquet", False)
    assert cached.name == "orig" and cached is not tr
    assert job.build_trace(camp, 1) is not cached


def test_trace_cache_returns_the_same_content(tmp_path):
    from evalkit.replay import job

    camp = load_campaign(_write(tmp_path))
    a = job.build_trace(camp, 0)
    assert job.build_trace(camp, 0) is a
    assert job._build_trace(camp, 0).sha256 == a.sha256 != job.build_trace(camp, 1).sha256


# ----------------------------------------------------------------------------- Ray: bad input

def test_ray_missing_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)          # `import ray` raises ImportError
    res = CliRunner().invoke(cli, ["sweep", str(_write(tmp_path)), "--out",
                                   str(tmp_path / "runs"), "--executor", "ray"])
    assert res.exit_code == 2, res.output
    assert "pip install 'evalkit[ray]'" in res.output and "Ray" in res.output
    assert not (tmp_path / "runs").exists()


def test_ray_options_need_the_ray_executor(tmp_path):
    for opt in (["--address", "auto"], ["--gpus-per-task", "1"], ["--cpus-per-task", "2"]):
        res = CliRunner().invoke(cli, ["sweep", str(_write(tmp_path)), "--out",
                                       str(tmp_path / "runs")] + opt)
        assert res.exit_code == 2 and "--executor ray" in res.output, res.output


def test_unreachable_ray_address_exits_2(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as s:                 # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = CliRunner().invoke(cli, ["sweep", str(_write(tmp_path)), "--out",
                                   str(tmp_path / "runs"), "--executor", "ray",
                                   "--address", f"127.0.0.1:{port}"])
    assert res.exit_code == 2, res.output
    assert "cannot reach the Ray cluster" in res.output and "ray start --head" in res.output
    res = CliRunner().invoke(cli, ["sweep", str(_write(tmp_path)), "--out",
                                   str(tmp_path / "runs"), "--executor", "ray",
                                   "--address", "host:port"])
    assert res.exit_code == 2 and "malformed Ray address" in res.output


# ----------------------------------------------------------------------------- Ray: local cluster

@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_ray_executor_matches_local_and_resumes(tmp_path, ray_local):
    camp = _write(tmp_path)
    local = run_campaign(camp, tmp_path / "local", progress=False, n_jobs=1, protocol=BUNDLED)
    assert local.ok
    ray_runs = tmp_path / "ray"
    s = run_campaign(camp, ray_runs, progress=False, executor_kind="ray", cpus_per_task=1,
                     protocol=BUNDLED)
    assert s.ok and s.count("ran") == 20, s.format()
    assert ray_local.is_initialized()                     # not shut down: the test owns it
    for rid in ("tiny__no_sync__s1", "tiny__calibrated_offline__s0", "tiny__mr-wa__s1__d1"):
        a_req, a_mer, a_meta = _tables(tmp_path / "local" / rid)
        b_req, b_mer, b_meta = _tables(ray_runs / rid)
        pd.testing.assert_frame_equal(a_req, b_req)
        pd.testing.assert_frame_equal(a_mer, b_mer)
        assert a_meta["k_observed"] == b_meta["k_observed"]
    assert not [p for p in ray_runs.iterdir() if p.name.startswith(".")]   # atomic writes
    (ray_runs / "tiny__mr-wa__s0__d0" / "run.json").unlink()
    again = run_campaign(camp, ray_runs, progress=False, executor_kind="ray", n_jobs=2,
                         protocol=BUNDLED)
    assert again.count("skipped") == 19 and [o.run_id for o in again.outcomes
                                             if o.status == "ran"] == ["tiny__mr-wa__s0__d0"]
    with pytest.raises(InputError, match="GPUs"):
        run_campaign(camp, ray_runs, progress=False, executor_kind="ray", gpus_per_task=1,
                     protocol=BUNDLED)
