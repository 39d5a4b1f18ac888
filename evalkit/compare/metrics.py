"""The per-run metrics a comparison can name, each with the direction that is better.

A metric is computed from one run's requests (evalkit ``requests`` columns) and the SLO:
failed requests count as violations and have infinite latency (:mod:`evalkit.runlog.metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.runlog import metrics as m

__all__ = ["METRICS", "Metric", "metric_value", "metric"]

LOWER, HIGHER = "lower", "higher"
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


@dataclass(frozen=True)
class Metric:
    name: str
    better: str          # "lower" | "higher": which direction is an improvement
    unit: str            # "share", "req/s", "s"
    needs_slo: bool
    meaning: str


def _catalog() -> dict[str, Metric]:
    out = {
        "violation_rate": Metric("violation_rate", LOWER, "share", True,
                                 "share of requests that failed or missed any configured SLO"),
        "goodput": Metric("goodput", HIGHER, "req/s", True,
                          "requests per second that completed within every configured SLO "
                          "(vLLM's goodput), over the run's span"),
    }
    for latency, meaning in (("ttft", "time to first token from the scheduled arrival"),
                             ("tpot", "time per output token after the first"),
                             ("e2e", "end-to-end latency from the scheduled arrival")):
        for tag, q in PERCENTILES.items():
            name = f"{latency}_{tag}"
            out[name] = Metric(name, LOWER, "s", False,
                               f"{int(q * 100)}th percentile of the {meaning}")
    return out


METRICS: dict[str, Metric] = _catalog()


def metric(name: str, *, option: str = "--metric") -> Metric:
    """The catalogued metric ``name``; an unknown name is an error listing the known ones."""
    if name not in METRICS:
        raise InputError(f"unknown metric {name!r}", column=option,
                         fix="use one of: " + ", ".join(METRICS))
    return METRICS[name]


def _array(requests: pd.DataFrame, column: str) -> np.ndarray:
    return requests[column].to_numpy(dtype=float, na_value=np.nan)


def metric_value(name: str, requests: pd.DataFrame, slo: dict | None, *, where: str) -> float:
    """The value of metric ``name`` for one run (``requests``: evalkit request columns).

    ``slo`` is ``{"e2e_s", "ttft_s", "tpot_s"}`` (None where unused); a metric that needs it
    and has none, or a percentile that lands among failed requests (infinite), is an error
    naming the run (``where``) and the fix.
    """
    spec = metric(name)
    if requests.empty:
        raise InputError("the run holds no requests", file=where, column="requests",
                         fix="compare runs that sent requests")
    arrival, first = _array(requests, "arrival_s"), _array(requests, "first_token_s")
    end, tokens = _array(requests, "end_s"), _array(requests, "output_tokens")
    ok = requests["ok"].to_numpy(dtype=bool, na_value=False)
    if spec.needs_slo:
        if slo is None:
            raise InputError(f"metric {name} needs an SLO and none is known for this run",
                             file=where, column="--slo-e2e",
                             fix="give the SLO: --slo-e2e S (and --slo-ttft / --slo-tpot), "
                                 "or an [slo] table in the comparison protocol")
        flags = m.slo_flags(arrival, first, end, tokens, ok, slo)
        if name == "violation_rate":
            return float(np.mean(flags.violated))
        finished = end[np.isfinite(end)]
        span = (float(finished.max()) if finished.size else float("nan")) - float(
            np.nanmin(arrival))
        if not span > 0:
            raise InputError("goodput needs a run that spans time (no request completed "
                             "after the first arrival)", file=where, column="end_s",
                             fix="compare violation_rate instead, or runs with completed "
                                 "requests")
        return float(np.count_nonzero(flags.good)) / span
    latency, tag = name.split("_")
    if latency == "ttft":
        values = m.ttft(arrival, first, ok)
    elif latency == "tpot":
        values = m.tpot(first, end, tokens, ok)
    else:
        values = m.e2e_latency(arrival, end, ok)
    value = float(m.quantile(values, PERCENTILES[tag]))
    if not np.isfinite(value):
        failed = int(np.count_nonzero(~np.isfinite(values)))
        raise InputError(f"{name} is infinite: {failed} of {values.size} requests failed or "
                         f"have no {latency} time, and the {tag} lands among them",
                         file=where, column=name,
                         fix="compare violation_rate (failures count as violations) or a "
                             "lower percentile")
    return value
