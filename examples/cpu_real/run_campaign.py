"""Run campaign.toml seed by seed on one warm rig (what `evalkit sweep` does, in seed order).

    python examples/cpu_real/run_campaign.py [CAMPAIGN.toml] [RUNS_DIR]

`evalkit sweep` with one local job submits every job whose dependencies are met before it
looks at what finished, so all seeds' no-sync and policy runs come first and every
matched-random draw runs 10-20 minutes after its policy run.  On a machine whose load
drifts (a shared 2-core box) that confounds "policy vs draws" with "early vs late".  Here
the scheduler keeps one job in flight, so it always picks the lowest job of the plan
whose dependencies are done: each seed's no-sync run, policy runs and draws run back to
back (about two minutes per seed).  Same run ids, settings and run logs as the sweep;
resumable in the same way.
"""

import sys
from pathlib import Path

from evalkit.replay.campaign import load_campaign
from evalkit.replay.executors import SerialExecutor
from evalkit.replay.sweep import run_campaign

HERE = Path(__file__).resolve().parent


class OneAtATime(SerialExecutor):
    max_in_flight = 1


def main() -> int:
    camp = load_campaign(sys.argv[1] if len(sys.argv) > 1 else HERE / "campaign.toml")
    runs = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "runs"
    try:
        summary = run_campaign(camp, runs, executor=OneAtATime(), progress=True)
    finally:
        from evalkit.replay.backends.torch import close_rig
        close_rig()
    print(summary.format(), flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
