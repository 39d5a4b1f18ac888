"""Re-runs in their slot (evalkit/audit/checks/drift.py: order_faults): a run that failed and
was re-done by a later sweep records its failed attempts (run_order.attempts) and sits at the
slot where its first attempt started; the runs that waited for it (its draws) are left out of
the order's time checks but may not start before it was written.  A run re-done without that
record, an attempt that records no failure or another slot, or a kept attempt that is not the
one recorded, are faults."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from types import SimpleNamespace

import pytest

from evalkit.audit.checks.drift import order_faults
from evalkit.audit.runset import load_runset
from evalkit.runlog.execution_order import ATTEMPTS_DIR
from evalkit.runlog.plan import read_plan

from tests.conftest import REPO
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import tiny_campaign

REAL = REPO / "examples" / "cpu_real" / "runs"


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds")


def _seconds(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


@pytest.fixture(scope="module")
def real():
    metas = {d.name: json.loads((d / "run.json").read_text())
             for d in sorted(REAL.iterdir()) if (d / "run.json").is_file()}
    return read_plan(REAL), metas


def _ctx(plan, metas, runs_dir=None):
    runset = SimpleNamespace(has_logs=True, run_ids=list(metas), meta=metas.__getitem__,
                             _cache={"plan": plan}, runs_dir=runs_dir)
    return SimpleNamespace(runset=runset)


def _policy_with_draws(metas) -> tuple[str, list[str]]:
    """An early policy run (so runs after it in the order exist) and the draws taking its K."""
    policies = sorted((m["run_order"]["position"], rid) for rid, m in metas.items()
                      if m["role"] == "policy")
    for _, rid in policies:
        draws = [d for d, m in metas.items() if m.get("reference_run_id") == rid]
        if draws:
            return rid, draws
    raise AssertionError("no policy run with draws")


def _rerun(metas, *, record=True, error="missed 14 of 451 ticks (3.1% > 2%)"):
    """The policy run failed at its slot and was re-run, with its draws, after the campaign
    ended; returns the new documents, the policy run and its draws."""
    out = copy.deepcopy(metas)
    rid, draws = _policy_with_draws(metas)
    order = out[rid]["run_order"]
    first = _seconds(order["started_at"])
    t = max(_seconds(m["created_at"]) for m in metas.values()) + 600
    if record:
        order["attempts"] = [{"position": order["position"], "started_at": order["started_at"],
                              "written_at": _stamp(first + 30), "error": error,
                              "run_json_sha256": "0" * 64}]
    for run_id in [rid] + draws:
        span = _seconds(metas[run_id]["created_at"]) - _seconds(
            metas[run_id]["run_order"]["started_at"])
        out[run_id]["run_order"]["started_at"] = _stamp(t)
        out[run_id]["created_at"] = _stamp(t + span)
        t += span + 5
    return out, rid, draws


def test_a_failed_run_re_run_in_its_slot_with_its_draws_after_it_passes(real):
    plan, metas = real
    reran, _, _ = _rerun(metas)
    assert order_faults(_ctx(plan, reran)) == []
    # without a plan the order is checked on the recorded order and the recorded references
    assert order_faults(_ctx(None, reran)) == []


def test_a_re_run_without_its_attempt_recorded_is_out_of_order(real):
    plan, metas = real
    reran, _, _ = _rerun(metas, record=False)
    for ctx in (_ctx(plan, reran), _ctx(None, reran)):
        faults = order_faults(ctx)
        assert any("before a run ahead of it" in f for f in faults), faults


@pytest.mark.parametrize("edit, words", [
    (lambda a: a.update(error=""), "records no error"),
    (lambda a: a.update(position=a["position"] + 1), "a re-run takes its attempt's slot"),
    (lambda a: a.update(started_at=None), "records no start time"),
    # own attack: a written attempt whose sha256 is withheld, so no kept copy is asked for
    (lambda a: a.update(run_json_sha256=None), "a write time without its run.json's sha256"),
    (lambda a: a.update(written_at=None), "a run.json sha256 without a write time"),
])
def test_an_attempt_that_is_not_a_failure_at_the_slot_is_named(real, edit, words):
    plan, metas = real
    reran, rid, _ = _rerun(metas)
    edit(reran[rid]["run_order"]["attempts"][0])
    faults = order_faults(_ctx(plan, reran))
    assert any(words in f and rid in f for f in faults), faults


def test_a_re_run_that_started_before_its_attempt_ended_is_named(real):
    plan, metas = real
    reran, rid, _ = _rerun(metas)
    attempt = reran[rid]["run_order"]["attempts"][0]
    attempt["written_at"] = _stamp(_seconds(reran[rid]["run_order"]["started_at"]) + 3600)
    faults = order_faults(_ctx(plan, reran))
    assert any("before its failed attempt was written" in f for f in faults), faults


def test_a_waiting_draw_may_not_start_before_the_re_run_it_reads_was_written(real):
    plan, metas = real
    reran, rid, draws = _rerun(metas)
    early = _seconds(reran[rid]["run_order"]["started_at"]) - 300
    reran[draws[0]]["run_order"]["started_at"] = _stamp(early)
    faults = order_faults(_ctx(plan, reran))
    assert any(draws[0] in f and f"before {rid}" in f for f in faults), faults


def test_a_run_that_reads_no_re_run_is_not_excused(real):
    """Only the runs that depend on a re-run wait for it: another run moved to the end is
    still out of order."""
    plan, metas = real
    reran, rid, draws = _rerun(metas)
    other = next(r for r, m in sorted(metas.items(), key=lambda x: x[1]["run_order"]["position"])
                 if r not in [rid, *draws] and m["role"] == "no_sync")
    end = max(_seconds(m["created_at"]) for m in reran.values()) + 60
    reran[other]["run_order"]["started_at"] = _stamp(end)
    reran[other]["created_at"] = _stamp(end + 40)
    faults = order_faults(_ctx(plan, reran))
    assert any("before a run ahead of it" in f for f in faults), faults
    # a dependency the run only claims (no plan says so) excuses it without a plan, but the
    # plan's dependencies decide when there is one
    reran[other]["reference_run_id"] = rid
    assert any("before a run ahead of it" in f for f in order_faults(_ctx(plan, reran)))


# -- a real sweep: the re-run records its attempt and keeps the failed run.json -----------

@pytest.fixture(scope="module")
def swept_twice(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reruns")
    kept = {}
    runs, _ = _sweep_with(tmp, RuntimeError("engine died"), between=lambda runs: kept.update(
        failed=(runs / "tiny__wa__s0" / "run.json").read_bytes()))
    return runs, kept["failed"]


def test_the_sweep_records_the_failed_attempt_and_keeps_its_run_json(swept_twice):
    runs, failed = swept_twice
    meta = json.loads((runs / "tiny__wa__s0" / "run.json").read_text())
    (attempt,) = meta["run_order"]["attempts"]
    assert attempt["error"].startswith("RuntimeError: engine died")
    assert attempt["position"] == meta["run_order"]["position"]
    assert attempt["run_json_sha256"] == hashlib.sha256(failed).hexdigest()
    kept = runs / ATTEMPTS_DIR / "tiny__wa__s0.1.run.json"
    assert kept.read_bytes() == failed
    assert "attempts" not in json.loads((runs / "tiny__wa__s1" / "run.json").read_text())[
        "run_order"]
    assert order_faults(SimpleNamespace(runset=load_runset(runs))) == []


def test_a_kept_attempt_that_is_not_the_recorded_one_is_named(swept_twice, tmp_path):
    import shutil
    runs, _ = swept_twice
    copy_dir = tmp_path / "runs"
    shutil.copytree(runs, copy_dir)
    kept = copy_dir / ATTEMPTS_DIR / "tiny__wa__s0.1.run.json"
    doc = json.loads(kept.read_text())
    doc["error"] = "host busy"
    kept.write_text(json.dumps(doc))
    faults = order_faults(SimpleNamespace(runset=load_runset(copy_dir)))
    assert any("kept run.json is not the one the re-run recorded" in f for f in faults), faults
    doc["complete"] = True
    kept.write_text(json.dumps(doc))
    recorded = json.loads((copy_dir / "tiny__wa__s0" / "run.json").read_text())
    recorded["run_order"]["attempts"][0]["run_json_sha256"] = hashlib.sha256(
        kept.read_bytes()).hexdigest()
    (copy_dir / "tiny__wa__s0" / "run.json").write_text(json.dumps(recorded))
    faults = order_faults(SimpleNamespace(runset=load_runset(copy_dir)))
    assert any("kept run.json is of a complete run" in f for f in faults), faults


def test_an_attempt_whose_run_json_is_not_kept_is_only_the_re_runs_word(swept_twice,
                                                                        tmp_path):
    # own attack: a complete run re-done until it won, its earlier (complete) run.json
    # deleted and the attempt written into the winner's record as a failure
    import shutil
    runs, _ = swept_twice
    copy_dir = tmp_path / "runs"
    shutil.copytree(runs, copy_dir)
    (copy_dir / ATTEMPTS_DIR / "tiny__wa__s0.1.run.json").unlink()
    faults = order_faults(SimpleNamespace(runset=load_runset(copy_dir)))
    assert any("tiny__wa__s0 attempt 1: its run.json" in f and "is not kept" in f
               for f in faults), faults
    # a run that never failed, given a made-up attempt with a made-up sha256
    path = copy_dir / "tiny__wa__s1" / "run.json"
    meta = json.loads(path.read_text())
    order = meta["run_order"]
    order["attempts"] = [{"position": order["position"], "started_at": order["started_at"],
                          "written_at": order["started_at"], "error": "engine died",
                          "run_json_sha256": "0" * 64}]
    path.write_text(json.dumps(meta))
    faults = order_faults(SimpleNamespace(runset=load_runset(copy_dir)))
    assert any(f.startswith("tiny__wa__s1 attempt 1: its run.json") for f in faults), faults


def _sweep_with(tmp, failure, between=None):
    """Sweep a tiny campaign with ``tiny__wa__s0`` failing by ``failure`` (an exception
    instance), then (after ``between(runs)``) again without; returns the runs folder and
    what stopped the first sweep (None when it ended)."""
    from evalkit.replay.backends import sim
    from evalkit.replay.sweep import run_campaign

    camp = tmp / "c.toml"
    camp.write_text(tiny_campaign(seeds=2, draws=1))
    runs = tmp / "runs"
    real_replay = sim.replay

    def failing(spec, trace, policy, progress=None):
        if spec.run_id == "tiny__wa__s0":
            raise failure
        return real_replay(spec, trace, policy, progress=progress)

    mp = pytest.MonkeyPatch()
    mp.setattr(sim, "replay", failing)
    stopped = None
    try:
        run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    except BaseException as exc:            # noqa: BLE001 - the sweep was stopped
        stopped = exc
    finally:
        mp.undo()
    if between is not None:
        between(runs)
    assert run_campaign(camp, runs, progress=False).ok
    return runs, stopped


def test_a_sweep_killed_mid_run_leaves_a_marker_and_the_re_run_records_that_attempt(tmp_path):
    runs, stopped = _sweep_with(tmp_path, KeyboardInterrupt())
    assert isinstance(stopped, KeyboardInterrupt)
    meta = json.loads((runs / "tiny__wa__s0" / "run.json").read_text())
    (attempt,) = meta["run_order"]["attempts"]
    assert attempt["error"].startswith("interrupted")
    assert attempt["written_at"] is None and attempt["started_at"]
    assert attempt["position"] == meta["run_order"]["position"]
    assert not (runs / ATTEMPTS_DIR).exists()       # the marker is cleared, nothing kept
    assert order_faults(SimpleNamespace(runset=load_runset(runs))) == []


def test_a_run_refused_before_writing_records_why(tmp_path):
    from evalkit.errors import InputError
    runs, _ = _sweep_with(tmp_path, InputError("the trace offers more than the engine sustained",
                                               column="backend_config.capacity_check"))
    (attempt,) = json.loads((runs / "tiny__wa__s0" / "run.json").read_text())[
        "run_order"]["attempts"]
    assert attempt["error"].startswith("the trace offers more")


def test_runs_that_complete_leave_no_marker(swept_twice):
    runs, _ = swept_twice
    assert sorted(p.name for p in (runs / ATTEMPTS_DIR).iterdir()) == [
        "tiny__wa__s0.1.run.json"]


def test_a_clean_sweep_leaves_no_attempts_folder(tmp_path):
    from evalkit.replay.sweep import run_campaign
    camp = tmp_path / "c.toml"
    camp.write_text(tiny_campaign(seeds=1, draws=1))
    assert run_campaign(camp, tmp_path / "runs", progress=False, protocol=BUNDLED).ok
    assert not (tmp_path / "runs" / ATTEMPTS_DIR).exists()


def test_a_kept_attempt_too_large_to_read_is_named_not_read_whole(swept_twice, tmp_path):
    import shutil

    from evalkit.limits import MAX_RUN_JSON_BYTES
    runs, _ = swept_twice
    copy_dir = tmp_path / "runs"
    shutil.copytree(runs, copy_dir)
    kept = copy_dir / ATTEMPTS_DIR / "tiny__wa__s0.1.run.json"
    kept.write_bytes(b" " * (MAX_RUN_JSON_BYTES + 1))
    faults = order_faults(SimpleNamespace(runset=load_runset(copy_dir)))
    assert any("the kept run.json cannot be read" in f for f in faults), faults
