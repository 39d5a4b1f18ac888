"""Benchmark of the audit on an object-store run store against the same runs on local disk.

    python tools/bench/bench_store.py [--seeds 10] [--draws 4] [--repeat 3]

A campaign on the simulator (``seeds`` x (no-sync + wa + ``draws`` matched-random draws)) is
swept once into a local runs directory; its plan and runs are then published, unchanged,
into an S3 run store on this machine (moto's server, a separate process on 127.0.0.1: a real
HTTP endpoint, so the figures include the HTTP requests, not a network).  The audit is timed
on both, best of ``repeat``, interleaved:

- local: ``audit_campaign(RUNS)``, what ``evalkit audit RUNS`` computes;
- store: ``local_view(URL)`` (listing, manifests, every file downloaded and checked against
  its sha256, into a private temporary folder) and ``audit_campaign`` of that copy, what
  ``evalkit audit s3://...`` computes; the download is also reported alone.

The ratio store / local is the cost of reading through the object store on the same machine
and the same runs.  The two audit documents must be equal (printed).  Needs ``moto[server]``
(``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAMPAIGN = """
regime = "storebench"
seeds = {seeds}
matched_random_draws = {draws}
horizon_s = 240.0
inner_step_s = 0.5
h_min = 80
h_max = 200
[slo]
e2e_s = 8.0
[trace]
generator = "square_wave"
period_s = 60.0
burst_s = 20.0
quiet_rate = 2.0
busy_rate = 10.0
prompt_tokens = "lognormal:256,0.5"
output_tokens = "lognormal:64,0.5"
[[policies]]
name = "wa"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def s3_endpoint():
    """moto's S3 server in its own process; the AWS variables for this one set meanwhile."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                      AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if time.monotonic() > deadline:
                raise SystemExit("moto's server did not start (pip install 'moto[server]')")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many, interleaved")
    args = ap.parse_args()

    import pyarrow.fs as pafs

    from evalkit.audit.protocol import load_protocol
    from evalkit.audit.result import audit_campaign
    from evalkit.replay.sweep import run_campaign
    from evalkit.runlog.io import iter_run_dirs
    from evalkit.runlog.store_url import local_view, open_store

    with tempfile.TemporaryDirectory() as tmp, s3_endpoint():
        camp = Path(tmp) / "storebench.toml"
        camp.write_text(CAMPAIGN.format(seeds=args.seeds, draws=args.draws))
        runs = Path(tmp) / "runs"
        t0 = time.perf_counter()
        assert run_campaign(camp, runs, progress=False, protocol=load_protocol(None)).ok
        swept = time.perf_counter() - t0
        endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1]
        pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1",
                          allow_bucket_creation=True).create_dir("bench")
        url = "s3://bench/storebench/runs"
        store = open_store(url)
        dirs = iter_run_dirs(runs)
        t0 = time.perf_counter()
        store.put_bytes("plan.json", (runs / "plan.json").read_bytes())
        for d in dirs:
            store.publish_run(d)
        published = time.perf_counter() - t0
        n_bytes = sum(p.stat().st_size for d in dirs for p in d.iterdir())

        def local():
            return audit_campaign(runs, seed=0).to_dict()

        def remote():
            with local_view(url) as (copy, _):
                return audit_campaign(copy, seed=0).to_dict()

        def download():
            with local_view(url):
                return None

        t_local = t_remote = t_down = float("inf")
        for _ in range(args.repeat):
            t, doc_local = best(local, 1)
            t_local = min(t_local, t)
            t, doc_remote = best(remote, 1)
            t_remote = min(t_remote, t)
            t_down = min(t_down, best(download, 1)[0])
        same = json.dumps(doc_local, sort_keys=True) == json.dumps(doc_remote, sort_keys=True)
        n = len(dirs)
        print(f"campaign: {n} runs ({args.seeds} seeds x (no-sync + wa + {args.draws} draws)), "
              f"{n_bytes / 1e6:.1f} MB; swept locally in {swept:.1f} s, published to {url} "
              f"in {published:.1f} s")
        print(f"audit, local runs directory:   {t_local:6.2f} s  ({n / t_local:6.1f} runs/s)")
        print(f"audit, S3 run store (moto):    {t_remote:6.2f} s  ({n / t_remote:6.1f} runs/s)"
              f"  of which download + checks {t_down:.2f} s "
              f"({n_bytes / 1e6 / t_down:.1f} MB/s)")
        print(f"store / local = {t_remote / t_local:.2f}x the local audit's time "
              f"(throughput ratio {t_local / t_remote:.2f}); best of {args.repeat}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"audit documents equal: {same}")


if __name__ == "__main__":
    main()
