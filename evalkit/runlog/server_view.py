"""The serving engine's own aggregate view of one run, as run.json records it.

An engine that returns no per-request ``server_timing`` (vLLM) still counts what it served in
its Prometheus histograms.  The vLLM backend scrapes them before and after the run and writes
the deltas under ``settings.effective[SERVER_VIEW_KEY]``; real_sidecar holds them against the
client's requests.
"""

from __future__ import annotations

import math

__all__ = ["SERVER_VIEW_KEY", "SERVER_VIEW_NUMBERS", "server_view_problem"]

SERVER_VIEW_KEY = "server_view"
# the numbers a recorded view carries (``available: true``), each a non-negative number:
#   requests       delta of the e2e latency histogram's _count over the run
#   e2e_sum_s      delta of its _sum (seconds)
#   rig_requests   requests the rig itself sent during the run (capacity probe and its warm-up)
#   rig_latency_bound_s  an upper bound of the client's latency summed over those requests
SERVER_VIEW_NUMBERS = ("requests", "e2e_sum_s", "rig_requests", "rig_latency_bound_s")


def server_view_problem(view) -> str | None:
    """Why ``view`` is not a usable recorded view (None: it is); ``available: false`` views
    carry a ``reason`` and are reported by the reader as not recorded, not as a problem."""
    if not isinstance(view, dict):
        return f"{SERVER_VIEW_KEY} is {type(view).__name__}, not an object"
    if view.get("available") is not True:
        return None if view.get("available") is False else \
            f"{SERVER_VIEW_KEY}.available must be true or false"
    for key in SERVER_VIEW_NUMBERS:
        value = view.get(key)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < 0):
            return f"{SERVER_VIEW_KEY}.{key} is {value!r}, not a non-negative number"
    return None
