"""Run a campaign in this process (one warm rig for every run) under a wall-clock deadline.

    python examples/gpu/capped_sweep.py CAMPAIGN.toml RUNS_DIR DEADLINE_EPOCH_S

A job is only started when the time left before the deadline covers one more run (the
longest warm run seen so far, or horizon + 10 s before any); jobs not started are reported
as "blocked: time cap", so no half-finished run is left and the audit sees only complete
runs.  Uses ``run_campaign`` with a custom executor (any object with ``submit``/``shutdown``).
"""
import concurrent.futures as cf
import sys
import time

from evalkit.audit.protocol import load_protocol
from evalkit.replay.backends.torch.rig import close_rig
from evalkit.replay.campaign import load_campaign
from evalkit.replay.job import JobOutcome, execute_job
from evalkit.replay.sweep import run_campaign


class DeadlineExecutor:
    # one job in flight: the scheduler then always takes the lowest job of the plan whose
    # dependencies are done, so each seed's no-sync run, policy runs and draws run back to
    # back (seed by seed) and a time cap leaves whole seeds, not a policy without its draws
    max_in_flight = 1

    def __init__(self, deadline_epoch_s: float, first_guess_s: float):
        self.deadline = deadline_epoch_s
        self.guess = first_guess_s
        self.durations: list[float] = []

    def submit(self, fn, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        need = max(self.durations[1:] or [self.guess])   # the first run also starts the rig
        left = self.deadline - time.time()
        if fn is execute_job and left < need:
            fut.set_result(JobOutcome(args[1].run_id, "blocked",
                                      f"time cap: {left:.0f} s left, a run needs ~{need:.0f} s"))
            return fut
        t = time.time()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:        # noqa: BLE001 - surfaced by the scheduler
            fut.set_exception(exc)
        self.durations.append(time.time() - t)
        print(f"[capped_sweep] {args[1].run_id}: {self.durations[-1]:.1f} s, "
              f"{self.deadline - time.time():.0f} s left", flush=True)
        return fut

    def shutdown(self) -> None:
        close_rig()


def main() -> int:
    camp = load_campaign(sys.argv[1])
    ex = DeadlineExecutor(float(sys.argv[3]), camp.horizon_s + 10.0)
    try:
        summary = run_campaign(camp, sys.argv[2], executor=ex, progress=False,
                               protocol=load_protocol(None))
    finally:
        close_rig()
    print(summary.format(), flush=True)
    return 0 if summary.count("ran") + summary.count("skipped") > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
