"""One short policy run of the GPU campaign's settings (checks the CUDA path end to end)."""
import json
import sys
import time

import numpy as np

from evalkit.replay.campaign import load_campaign
from evalkit.policies import get_policy
from evalkit.replay.backends.torch import replay
from evalkit.replay.traces.model import Trace

camp = load_campaign(sys.argv[1])
out_dir = sys.argv[2]
spec = camp.spec("smoke", 0, role="policy")
rng = np.random.default_rng(0)
n = int(4 * (spec.horizon_s - 4))
trace = Trace.from_arrays(np.sort(rng.uniform(1, spec.horizon_s - 3, n)),
                          rng.integers(64, 512, n), rng.integers(16, 96, n), name="smoke")
t = time.time()
out = replay(spec, trace, get_policy("fixed_h", H=20),
             progress=lambda m: print(f"[{time.time() - t:6.1f}s] {m}", flush=True))
r = out.requests
summary = {"complete": out.complete, "error": out.error, "wall_s": time.time() - t,
           "merges": out.merges[["start_s", "end_s", "bytes"]].to_dict("records"),
           "inner_step_s": out.inner_step_s, "ok": int(r["ok"].sum()), "n": len(r),
           "p95_e2e_s": float(np.nanquantile(r["end_s"] - r["arrival_s"], 0.95)),
           "notes": out.notes,
           **{k: out.effective.get(k) for k in (
               "send_lag_p99_s", "capacity_tokens_per_s", "offered_tokens_per_s",
               "warmup_inner_step_s", "trainer_n_params", "dist_backend", "scrapes_ok")}}
print(json.dumps(summary, indent=1, default=str))
json.dump(summary, open(f"{out_dir}/smoke.json", "w"), indent=1, default=str)
