"""The paced trainer's clock, the contending merge's padding and the host-load gate.

Pure functions and small classes, kept out of the learner's process loop so they can be
tested without ``torch.distributed``.

Pacing (``step_period_s``): inner step k starts at its tick ``t0 + j_k * step_period_s``,
sleeping until it.  Ticks are fixed-rate: ``j_{k+1} = j_k + 1``, so a step that overran
its period lets the following steps start at once until they are back on the clock; after
a merge the next step waits for the first tick at or after the merge's end.  A step that
starts more than ``clock_slack_s`` after its tick is a *missed tick*; a run whose missed
share exceeds ``max_missed_share`` is a failed run (its step schedule drifted with the
host, so its load no longer matches its seed's other runs).
"""

from __future__ import annotations

import math
import time

__all__ = ["StepClock", "missed_tick_error", "contend_until", "wait_for_quiet_host",
           "host_busy_error"]


class StepClock:
    """Ticks of one run, and how late the steps started against them."""

    def __init__(self, t0: float, period_s: float, slack_s: float):
        self.t0, self.period_s, self.slack_s = float(t0), float(period_s), float(slack_s)
        self.next_index = 0
        self.ticks = 0
        self.missed = 0
        self.worst_late_s = 0.0

    def next_tick(self) -> float:
        """The time the next inner step may start (on the caller's monotonic clock)."""
        return self.t0 + self.next_index * self.period_s

    def step_started(self, now: float) -> float:
        """Record that the next step started at ``now``; returns its lateness (>= 0)."""
        late = max(0.0, float(now) - self.next_tick())
        self.ticks += 1
        if late > self.slack_s:
            self.missed += 1
        self.worst_late_s = max(self.worst_late_s, late)
        self.next_index += 1
        return late

    def merge_ended(self, end: float) -> None:
        """The next step waits for the first tick at or after ``end``."""
        # a merge ending a rounding error past a tick still counts as on it
        first = math.ceil((float(end) - self.t0) / self.period_s - 1e-9)
        self.next_index = max(self.next_index, first)

    def record(self) -> dict:
        return {"step_period_s": self.period_s, "clock_slack_s": self.slack_s,
                "ticks": self.ticks, "missed_ticks": self.missed,
                "missed_share": self.missed / self.ticks if self.ticks else 0.0,
                "worst_late_s": self.worst_late_s}


def missed_tick_error(ticks: int, missed: int, max_share: float) -> str | None:
    """The failed-run reason when more than ``max_share`` of the ticks were missed."""
    if ticks <= 0 or missed / ticks <= max_share:
        return None
    return (f"paced trainer missed {missed} of {ticks} ticks ({missed / ticks:.1%} > "
            f"max_missed_share {max_share:.1%}): its inner steps did not keep to "
            "step_period_s (host busy, or step_period_s below the slowest step)")


def contend_until(torch, buffers, deadline: float, threads: int, *, lr: float = 0.7,
                  momentum: float = 0.9, now=time.monotonic,
                  chunk_elems: int = 2**20, sync=None) -> int:
    """Repeat an outer-optimizer update (Nesterov SGD) over ``buffers`` on ``threads`` torch
    threads until ``now() >= deadline``; returns the number of chunks updated.

    ``buffers`` = (params, momentum, grad), equal-sized 1-d float tensors.  Each pass
    streams them through memory several times, the traffic of a real outer step over that
    many bytes; the deadline is checked before every chunk of ``chunk_elems`` elements, so
    the padding ends at most one chunk past it.  The thread count is restored afterwards,
    whatever happens.  Buffers on an accelerator are updated there (device memory traffic
    beside the sidecar's kernels); ``sync`` (e.g. ``torch.cuda.synchronize``) then waits for
    each chunk, so the deadline holds for work the device has queued.
    """
    params, mom, grad = buffers
    n = params.numel()
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    chunks = 0
    try:
        with torch.no_grad():
            while True:
                for lo in range(0, n, chunk_elems):
                    if now() >= deadline:
                        return chunks
                    x, m, g = (b[lo:lo + chunk_elems] for b in (params, mom, grad))
                    m.mul_(momentum).add_(g)
                    x.add_(g, alpha=-lr).add_(m, alpha=-lr * momentum)
                    g.copy_(x).mul_(1e-3)       # the next pass's "pseudo-gradient"
                    if sync is not None:
                        sync()
                    chunks += 1
    finally:
        torch.set_num_threads(before)


def wait_for_quiet_host(max_load: float, wait_s: float, *, read_load, sleep=time.sleep,
                        now=time.monotonic, poll_s: float = 1.0) -> tuple[bool, float, float]:
    """Wait up to ``wait_s`` for the 1-minute load average to be at most ``max_load``.

    Returns ``(quiet, last load, seconds waited)``."""
    start = now()
    while True:
        load = float(read_load())
        waited = now() - start
        if load <= max_load:
            return True, load, waited
        if waited >= wait_s:
            return False, load, waited
        sleep(min(poll_s, max(0.0, wait_s - waited)))


def host_busy_error(load: float, max_load: float, waited_s: float) -> str:
    return (f"host busy (load {load:.2f} > {max_load:g}) at the run's start after waiting "
            f"{waited_s:.0f} s; the run was not started (re-run it on a quieter host)")
