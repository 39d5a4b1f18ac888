"""The paced trainer's clock, the contending merge, the host-load gate and their settings."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.backends.torch.config import DEFAULTS, resolve
from evalkit.replay.backends.torch.pacing import (StepClock, contend_until, host_busy_error,
                                                  missed_tick_error, wait_for_quiet_host)

REPO = Path(__file__).resolve().parents[4]
NEW_KEYS = ("step_period_s", "clock_slack_s", "max_missed_share", "merge_load",
            "merge_threads", "merge_bytes", "max_load_1m", "load_wait_s")


# -- the clock ------------------------------------------------------------------------------

def test_steps_start_on_fixed_ticks_and_an_overrun_is_caught_up():
    clock = StepClock(t0=100.0, period_s=0.05, slack_s=0.01)
    assert clock.next_tick() == 100.0
    assert clock.step_started(100.0) == 0.0
    assert clock.next_tick() == pytest.approx(100.05)
    # this step overran: the next one starts late against its own tick, not a fresh one
    assert clock.step_started(100.08) == pytest.approx(0.03)
    assert clock.next_tick() == pytest.approx(100.10)
    clock.step_started(100.105)                 # 5 ms late: within the slack
    assert (clock.ticks, clock.missed) == (3, 1)
    assert clock.worst_late_s == pytest.approx(0.03)


def test_after_a_merge_the_next_step_waits_for_the_first_tick_at_or_after_its_end():
    clock = StepClock(t0=0.0, period_s=0.05, slack_s=0.01)
    clock.step_started(0.0)
    clock.merge_ended(1.512)                    # between ticks 30 (1.50) and 31 (1.55)
    assert clock.next_tick() == pytest.approx(1.55)
    clock.step_started(1.55)
    clock.merge_ended(2.0)                      # exactly on tick 40
    assert clock.next_tick() == pytest.approx(2.0)
    clock.merge_ended(2.0 + 1e-12)              # a rounding error past it still is on it
    assert clock.next_tick() == pytest.approx(2.0)
    assert clock.missed == 0


def test_a_merge_ending_before_the_next_tick_does_not_move_the_clock_back():
    clock = StepClock(t0=0.0, period_s=0.1, slack_s=0.02)
    for k in range(5):
        clock.step_started(k * 0.1)
    clock.merge_ended(0.2)
    assert clock.next_tick() == pytest.approx(0.5)


def test_the_clock_record_counts_ticks_missed_ticks_and_worst_lateness():
    clock = StepClock(t0=0.0, period_s=0.1, slack_s=0.025)
    for start in (0.0, 0.1251, 0.2, 0.325, 0.5):     # 25.1 ms late misses; 25.0 ms does not
        clock.step_started(start)
    rec = clock.record()
    assert rec["ticks"] == 5 and rec["missed_ticks"] == 2
    assert rec["missed_share"] == pytest.approx(0.4)
    assert rec["worst_late_s"] == pytest.approx(0.1)
    json.dumps(rec)                             # goes into run.json as it is


def test_a_step_exactly_slack_late_keeps_its_tick():
    clock = StepClock(t0=0.0, period_s=0.5, slack_s=0.25)    # exact in binary
    clock.step_started(0.25)
    clock.step_started(0.75 + 2**-20)
    assert (clock.ticks, clock.missed) == (2, 1)


@pytest.mark.parametrize("missed, fails", [(1, False), (2, False), (3, True)])
def test_a_run_fails_only_above_the_missed_share(missed, fails):
    # 2 of 100 is exactly max_missed_share = 0.02: still a run
    err = missed_tick_error(100, missed, 0.02)
    assert (err is not None) == fails
    if fails:
        assert "missed 3 of 100 ticks" in err and "max_missed_share" in err


def test_a_run_without_ticks_is_not_failed_by_the_clock():
    assert missed_tick_error(0, 0, 0.0) is None


# -- the contending merge -------------------------------------------------------------------

def _buffers(torch, n=4096):
    return tuple(torch.rand(n) for _ in range(3))


def test_the_contending_merge_runs_until_its_deadline_and_restores_threads():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    start = time.monotonic()
    passes = contend_until(torch, _buffers(torch), start + 0.2, threads=before + 1)
    elapsed = time.monotonic() - start
    assert passes > 0
    assert 0.2 <= elapsed < 0.4
    assert torch.get_num_threads() == before


def test_the_contending_merge_uses_its_threads_and_restores_them_after_an_error():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    seen = []

    def now():
        seen.append(torch.get_num_threads())
        if len(seen) > 2:
            raise RuntimeError("interrupted")
        return 0.0

    with pytest.raises(RuntimeError):
        contend_until(torch, _buffers(torch), 1.0, threads=before + 2, now=now)
    assert seen[0] == before + 2
    assert torch.get_num_threads() == before


def test_the_contending_merge_stops_at_once_past_its_deadline():
    torch = pytest.importorskip("torch")
    assert contend_until(torch, _buffers(torch), time.monotonic() - 1.0, threads=1) == 0


def test_the_contending_merge_checks_its_deadline_between_chunks():
    torch = pytest.importorskip("torch")
    calls = iter([0.0, 0.0, 2.0])              # the deadline passes before the third chunk
    assert contend_until(torch, _buffers(torch, n=10), 1.0, threads=1, chunk_elems=4,
                         now=lambda: next(calls)) == 2


def test_the_contending_pass_is_a_nesterov_outer_update():
    torch = pytest.importorskip("torch")
    x, m, g = (torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.2]))
    ticks = iter([0.0, 2.0])
    contend_until(torch, (x, m, g), 1.0, threads=1, lr=0.7, momentum=0.9,
                  now=lambda: next(ticks))
    m_new = 0.9 * 0.5 + 0.2
    assert float(m) == pytest.approx(m_new)
    assert float(x) == pytest.approx(1.0 - 0.7 * 0.2 - 0.7 * 0.9 * m_new)


# -- the host-load gate ---------------------------------------------------------------------

class FakeHost:
    def __init__(self, loads):
        self.loads, self.t = list(loads), 0.0

    def read(self):
        return self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]

    def sleep(self, s):
        self.t += s

    def now(self):
        return self.t


def test_a_quiet_host_passes_at_once():
    host = FakeHost([0.5])
    assert wait_for_quiet_host(1.5, 30.0, read_load=host.read, sleep=host.sleep,
                               now=host.now) == (True, 0.5, 0.0)


def test_the_gate_waits_for_the_load_to_fall():
    host = FakeHost([3.0, 2.5, 1.2])
    quiet, load, waited = wait_for_quiet_host(1.5, 30.0, read_load=host.read,
                                              sleep=host.sleep, now=host.now)
    assert quiet and load == 1.2 and waited == pytest.approx(2.0)


def test_a_busy_host_is_refused_after_the_wait():
    host = FakeHost([4.0])
    quiet, load, waited = wait_for_quiet_host(1.5, 10.0, read_load=host.read,
                                              sleep=host.sleep, now=host.now)
    assert not quiet and load == 4.0 and waited == pytest.approx(10.0)
    assert host_busy_error(load, 1.5, waited).startswith("host busy (load 4.00 > 1.5)")


def test_the_backend_records_a_busy_host_as_a_failed_run(monkeypatch):
    pytest.importorskip("aiohttp")
    from evalkit.replay.backends.torch import coordinator, rig

    monkeypatch.setattr(coordinator.os, "getloadavg", lambda: (9.0, 9.0, 9.0))

    def no_rig(*a, **k):
        raise AssertionError("a refused run must not start the rig")

    monkeypatch.setattr(rig, "acquire", no_rig)
    cfg = resolve({"max_load_1m": 2.0, "load_wait_s": 0.0}, backend="torch")
    out = coordinator.run_replay(None, None, None, cfg=cfg, start_server=None)
    assert not out.complete
    assert out.error.startswith("host busy (load 9.00 > 2)")
    assert out.effective["load_gate"]["load_1m"] == 9.0


def test_a_quiet_host_goes_on_to_the_rig(monkeypatch):
    pytest.importorskip("aiohttp")
    from evalkit.replay.backends.torch import coordinator, rig

    monkeypatch.setattr(coordinator.os, "getloadavg", lambda: (0.1, 0.1, 0.1))

    class Reached(Exception):
        pass

    def reached(*a, **k):
        raise Reached

    monkeypatch.setattr(rig, "acquire", reached)
    cfg = resolve({"max_load_1m": 2.0, "load_wait_s": 0.0}, backend="torch")
    with pytest.raises(Reached):
        coordinator.run_replay(None, None, None, cfg=cfg, start_server=None)


# -- settings -------------------------------------------------------------------------------

def test_unpaced_settings_leave_every_new_feature_off():
    cfg = resolve({}, backend="torch")
    assert all(cfg[k] is None for k in NEW_KEYS if k != "merge_load")
    assert cfg["merge_load"] == "allreduce"


def test_paced_and_memory_settings_fill_their_defaults():
    cfg = resolve({"step_period_s": 0.05, "merge_load": "memory", "merge_min_s": 1.5,
                   "max_load_1m": 1.5}, backend="torch")
    assert cfg["clock_slack_s"] == pytest.approx(0.0125)
    assert cfg["max_missed_share"] == 0.02
    assert cfg["merge_threads"] == 2 and cfg["merge_bytes"] == 64 * 2**20
    assert cfg["load_wait_s"] == 60.0


BAD = {
    "step_period_s": {"step_period_s": 0.0},
    "step_period_s ": {"step_period_s": "fast"},
    "clock_slack_s": {"step_period_s": 0.05, "clock_slack_s": 0.05},
    "clock_slack_s ": {"step_period_s": 0.05, "clock_slack_s": -0.01},
    "clock_slack_s  ": {"clock_slack_s": 0.01},                 # without a period
    "max_missed_share": {"step_period_s": 0.05, "max_missed_share": 1.5},
    "max_missed_share ": {"step_period_s": 0.05, "max_missed_share": -0.1},
    "max_missed_share  ": {"max_missed_share": 0.1},            # without a period
    "merge_load": {"merge_load": "disk"},
    "merge_min_s": {"merge_load": "memory"},                    # nothing to pad to
    "merge_threads": {"merge_load": "memory", "merge_min_s": 1.0, "merge_threads": 0},
    "merge_threads ": {"merge_threads": 2},                     # allreduce padding
    "merge_bytes": {"merge_load": "memory", "merge_min_s": 1.0, "merge_bytes": 100},
    "merge_bytes ": {"merge_load": "memory", "merge_min_s": 1.0, "merge_bytes": 1.5e8},
    "max_load_1m": {"max_load_1m": 0},
    "load_wait_s": {"max_load_1m": 2.0, "load_wait_s": -1},
    "load_wait_s ": {"load_wait_s": 10.0},                      # without a gate
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_setting_is_refused_naming_its_key(case):
    with pytest.raises(InputError) as err:
        resolve(BAD[case], backend="torch")
    assert err.value.column == f"backend.config.{case.strip()}"
    if case == "merge_min_s":
        assert "would not contend" in err.value.message


CAMPAIGN = """
regime = "paced_bad"
seeds = [0]
horizon_s = 40.0
merge_duration_s = 1.5
inner_step_s = 0.05
h_min = 20
h_max = 400
min_gap_s = 4.0
max_gap_s = 12.0
matched_random_draws = 0

[slo]
e2e_s = 8.0

[trace]
generator = "poisson"
rate = 1.0
prompt_tokens = "fixed:16"
output_tokens = "fixed:8"

[backend]
name = "torch"

[backend.config]
{setting}

[[policies]]
name = "fixed_h"
params = {{ H = 40 }}
"""


@pytest.mark.parametrize("setting, key", [
    ("step_period_s = -0.05", "step_period_s"),
    ("step_period_s = 0.05\nclock_slack_s = 0.06", "clock_slack_s"),
    ("step_period_s = 0.05\nmax_missed_share = 2.0", "max_missed_share"),
    ('merge_load = "memory"', "merge_min_s"),
    ("max_load_1m = -1.0", "max_load_1m"),
])
def test_a_campaign_with_a_bad_setting_exits_2_before_any_run(tmp_path, setting, key):
    camp = tmp_path / "c.toml"
    camp.write_text(CAMPAIGN.format(setting=setting))
    res = CliRunner().invoke(cli, ["sweep", str(camp), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    assert f"backend.config.{key}" in res.output and "c.toml" in res.output
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(p.is_dir() for p in runs.iterdir())


# -- the reference documents the keys --------------------------------------------------------

def test_campaign_reference_and_schema_document_the_pacing_keys():
    text = (REPO / "evalkit" / "replay" / "CAMPAIGN.md").read_text()
    section = text.split("## `[backend.config]` of the torch backend", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))
    assert documented == set(NEW_KEYS) and set(NEW_KEYS) <= set(DEFAULTS)
    schema = json.loads((REPO / "evalkit" / "replay" / "schemas"
                         / "campaign.schema.json").read_text())
    assert set(schema["$defs"]["torch_config"]["properties"]) == set(NEW_KEYS)


def test_device_work_is_waited_for_chunk_by_chunk():
    """On an accelerator the chunks are queued work: ``sync`` waits for each before the
    deadline is read again, so the padding cannot overrun by a whole queue."""
    torch = pytest.importorskip("torch")
    events = []
    clock = iter([0.0, 0.0, 0.0, 1.0])

    def now():
        events.append("now")
        return next(clock)

    chunks = contend_until(torch, _buffers(torch), 1.0, threads=1, now=now,
                           chunk_elems=4, sync=lambda: events.append("sync"))
    assert chunks == 3
    assert events == ["now", "sync"] * 3 + ["now"]
