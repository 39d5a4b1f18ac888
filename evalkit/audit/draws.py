"""Matched-random draws that duplicate one another count once.

Two draws of a seed are one draw when they placed the same schedule (merge starts to the
microsecond) or served the same request log (every request's timings to the microsecond):
a copied draw is not another random placement, and counting it would shrink the test's
smallest attainable p without new evidence.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from evalkit.runlog.design import FINGERPRINT_RESOLUTION_S

__all__ = ["distinct_draws"]


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a, dtype=float)
        ticks = np.where(np.isfinite(a), np.round(a / FINGERPRINT_RESOLUTION_S), -1)
        h.update(str(a.size).encode())
        h.update(ticks.astype(np.int64).tobytes())
    return h.hexdigest()


def draw_keys(runset, run_id: str) -> tuple[str, str]:
    """(schedule digest, request-log digest) of one run."""
    m = runset.columns(run_id, "merges", ("start_s",))
    r = runset.columns(run_id, "requests", ("arrival_s", "first_token_s", "end_s"))
    return (_digest(np.sort(m["start_s"])),
            _digest(r["arrival_s"], r["first_token_s"], r["end_s"]))


def distinct_draws(runset, draws: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The draws (rows of one seed, in order) without duplicates, and (dropped, same as)."""
    if not runset.has_logs or len(draws) < 2:
        return draws, []
    seen: dict[str, str] = {}
    keep, dropped = [], []
    for run_id in draws.run_id.tolist():
        keys = draw_keys(runset, run_id)
        twin = next((seen[k] for k in keys if k in seen), None)
        if twin is not None:
            dropped.append((run_id, twin))
            keep.append(False)
            continue
        for k in keys:
            seen[k] = run_id
        keep.append(True)
    return draws[np.array(keep)], dropped
