"""Summarize a GPU campaign: merge durations, p95 with/without merges, send lag, verdicts."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

runs_dir, audit_dir = Path(sys.argv[1]), Path(sys.argv[2])
rows, in_lat, out_lat, durs, lags = [], [], [], [], []
for run in sorted(p for p in runs_dir.iterdir() if (p / "run.json").exists()):
    meta = json.loads((run / "run.json").read_text())
    req = pd.read_parquet(run / "requests.parquet")
    mer = pd.read_parquet(run / "merges.parquet")
    lat = (req["end_s"] - req["arrival_s"]).to_numpy(dtype=float)
    a, e = req["arrival_s"].to_numpy(), req["end_s"].fillna(np.inf).to_numpy()
    hit = np.zeros(len(req), bool)
    for s, t in zip(mer["start_s"], mer["end_s"]):
        hit |= (a < t) & (e > s)
    if meta["role"] != "no_sync" and len(mer):
        in_lat += list(lat[hit]); out_lat += list(lat[~hit])
    durs += list(mer["end_s"] - mer["start_s"])
    lags += list(req["sent_s"] - req["arrival_s"])
    slo = meta["slo"]["e2e_s"]
    rows.append({"run": run.name, "complete": meta["complete"], "K": len(mer),
                 "requests": len(req), "failed": int((~req["ok"]).sum()),
                 "V": float(np.mean(~(req["ok"] & (lat <= slo)))),
                 "p95_s": float(np.nanquantile(lat, 0.95))})
q = lambda x, p: float(np.nanquantile(np.asarray(x, float), p)) if len(x) else float("nan")  # noqa: E731
print("# GPU campaign results\n")
print(pd.DataFrame(rows).to_markdown(index=False) if rows else "no runs")
print(f"\nmerge duration: n={len(durs)} mean={np.mean(durs) if durs else float('nan'):.2f} s "
      f"p50={q(durs, .5):.2f} max={max(durs) if durs else float('nan'):.2f}")
print(f"p95 latency overlapping a merge: {q(in_lat, .95):.3f} s (n={len(in_lat)}); "
      f"not overlapping: {q(out_lat, .95):.3f} s (n={len(out_lat)}); "
      f"rho_s = {q(in_lat, .95) / q(out_lat, .95):.3f}")
print(f"send lag p50={q(lags, .5) * 1e3:.1f} ms p99={q(lags, .99) * 1e3:.1f} ms "
      f"max={max(lags) * 1e3 if lags else float('nan'):.1f} ms")
print("\n## audit\n")
for f in sorted(audit_dir.glob("*.json"))[:5]:
    print(f"- {f.name}: {f.read_text()[:1500]}")
log = audit_dir.parent / "audit.log"
if log.exists():
    print("```\n" + log.read_text()[-4000:] + "\n```")
