"""Run one replay: check inputs, dispatch to a backend, build run.json, write atomically.

Backends are imported lazily by name (:data:`BACKENDS`).  A backend that raises leaves a
run written with ``complete = False`` and the error recorded; bad input
(:class:`~evalkit.errors.InputError`) is raised before anything is written.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit import limits as L
from evalkit.errors import InputError
from evalkit.policies import Policy, get_policy, policy_identity
from evalkit.policies.context import observed_span
from evalkit.replay.spec import ReplaySpec, RunOutput
from evalkit.runlog import metrics
from evalkit.runlog.io import empty_frame, write_run
from evalkit.runlog.schema import META_KEYS

BACKENDS = {
    "sim": "evalkit.replay.backends.sim",
    "torch": "evalkit.replay.backends.torch",
    "vllm": "evalkit.replay.backends.vllm",
}
_EXTRAS = {"torch": "pip install 'evalkit[torch]'", "vllm": "pip install 'evalkit[vllm]'"}


def load_backend(name: str):
    if name not in BACKENDS:
        raise InputError(f"unknown backend {name!r}", column="backend",
                         fix=f"use one of: {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(BACKENDS[name])
    except ImportError as exc:
        raise InputError(f"backend {name!r} cannot be loaded ({exc})", column="backend",
                         fix=_EXTRAS.get(name, "check the installation")) from exc


def check_spec(spec: ReplaySpec, *, source: str | None = None) -> None:
    """Corridor and horizon sanity; raises InputError (nothing has been written yet)."""
    lo, hi = spec.gaps()
    D = float(spec.merge_duration_s)
    problems = [
        (D > 0, "merge_duration_s", f"merge duration must be > 0, got {D}", "set D > 0"),
        (spec.inner_step_s > 0, "inner_step_s", "inner step time must be > 0",
         "set inner_step_s > 0"),
        (spec.horizon_s > 0, "horizon_s", "horizon must be > 0", "set horizon_s > 0"),
        (1 <= spec.h_min <= spec.h_max, "h_min",
         f"corridor needs 1 <= h_min <= h_max, got {spec.h_min}/{spec.h_max}",
         "fix h_min / h_max"),
        (lo <= hi, "min_gap_s", f"min gap {lo:g} s exceeds max gap {hi:g} s",
         "use min_gap_s <= max_gap_s"),
        (lo >= D, "min_gap_s", f"min gap {lo:g} s is shorter than the merge duration {D:g} s: "
         "merges would overlap", "raise h_min (or min_gap_s) or shorten D"),
        (lo + D <= spec.horizon_s, "horizon_s",
         f"infeasible corridor for the horizon: the first merge can start at {lo:g} s "
         f"(h_min) and needs {D:g} s, but the horizon is {spec.horizon_s:g} s",
         "lengthen the horizon or lower h_min / min_gap_s"),
    ]
    for ok, key, msg, fix in problems:
        if not ok:
            raise InputError(msg, file=source, column=key, fix=fix)
    check_sizes(spec, source=source)


def check_sizes(spec: ReplaySpec, *, source: str | None = None) -> None:
    """The inner steps and merges the spec implies are bounded (:mod:`evalkit.limits`)."""
    step_s = spec.backend_config.get("step_s") if spec.backend == "sim" else None
    step_key = "backend.config.step_s"
    if not (isinstance(step_s, (int, float)) and not isinstance(step_s, bool) and step_s > 0):
        step_s, step_key = spec.inner_step_s, "inner_step_s"
    L.check_run_sizes(horizon_s=spec.horizon_s, step_s=step_s, step_key=step_key,
                      min_gap_s=spec.gaps()[0], h_max=spec.h_max, file=source,
                      gap_key="min_gap_s" if spec.min_gap_s is not None else "h_min")


def check_trace(trace, spec: ReplaySpec, *, source: str | None = None) -> None:
    """Trace must be non-empty, sorted, non-negative and inside the horizon."""
    req = trace.requests
    source = source or getattr(trace, "name", None)
    if len(req) == 0:
        raise InputError("trace is empty", file=source, fix="use a trace with requests")
    a = req["arrival_s"].to_numpy(dtype=float)
    if not np.all(np.isfinite(a)):
        raise InputError("arrival times contain NaN/inf", file=source, column="arrival_s",
                         fix="repair the trace")
    if a[0] < 0 or np.any(np.diff(a) < 0):
        raise InputError("arrival times are negative or not sorted", file=source,
                         column="arrival_s",
                         fix="re-import the trace with sorting (evalkit trace import --sort)")
    if a[-1] > spec.horizon_s:
        raise InputError(f"last arrival {a[-1]:.1f} s is beyond the horizon "
                         f"{spec.horizon_s:g} s", file=source, column="horizon_s",
                         fix="slice the trace to the horizon or raise horizon_s")
    lo, hi = observed_span(spec, trace)
    if hi < lo:
        raise InputError(f"no room for a merge: first request at {lo:.1f} s, last request "
                         f"(or the horizon) − D = {hi:.1f} s", file=source, column="horizon_s",
                         fix="replay a longer trace window (and horizon)")


def k_observed(requests: pd.DataFrame, merges: pd.DataFrame, horizon_s: float,
               merge_duration_s: float) -> int:
    """Merges whose window lies inside the observed span (same rule as ``evalkit summarize``)."""
    if len(merges) == 0 or len(requests) == 0:
        return 0
    span = metrics.observed_span(requests["arrival_s"].to_numpy(float),
                                 requests["end_s"].to_numpy(float), horizon_s, merge_duration_s)
    return metrics.windows_observed(merges["start_s"].to_numpy(float),
                                    merges["end_s"].to_numpy(float), span)


@dataclass
class RunResult:
    run_id: str
    path: Path | None
    complete: bool
    k_observed: int | None = None
    error: str | None = None


def _empty_output(error: str) -> RunOutput:
    return RunOutput(requests=empty_frame("requests"), merges=empty_frame("merges"),
                     complete=False, error=error)


def _requested(spec: ReplaySpec) -> dict:
    out = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)
           if f.name not in ("future_requests", "seed_probe")}
    out["oracle_intervals"] = None if spec.future_requests is None else "supplied"
    return out


def build_meta(spec: ReplaySpec, trace, policy: Policy, out: RunOutput, *,
               policy_label: str, extra_requested: dict | None = None) -> dict:
    lo, hi = spec.gaps()
    requested = _requested(spec)
    requested["policy"] = {"name": policy.name, "label": policy_label,
                           "params": dict(policy.params)}
    requested.update(extra_requested or {})
    effective = dict(out.effective)
    effective["policy"] = policy.describe()
    if getattr(policy, "planned_starts", None) is not None:
        effective["policy"]["planned_starts"] = [float(x) for x in policy.planned_starts]
    meta = {
        "run_id": spec.run_id, "policy": policy_label, "role": spec.role,
        "seed": int(spec.seed), "draw": spec.draw, "matched_to": spec.matched_to,
        "regime": spec.regime, "trace": {"name": trace.name, "sha256": trace.sha256},
        "trace_realisation": trace.sha256, "backend": spec.backend, "slo": dict(spec.slo),
        "merge_duration_s": float(spec.merge_duration_s), "horizon_s": float(spec.horizon_s),
        "corridor": {"min_gap_s": lo, "max_gap_s": hi, "h_min": int(spec.h_min),
                     "h_max": int(spec.h_max)},
        "oracle": bool(policy.oracle),
        "policy_identity": policy_identity(type(policy)),
        "settings": {"requested": requested, "effective": effective},
        "rng_seeds": dict(out.rng_seeds),
        "policy_params": dict(policy.params),
        "inner_step_s": float(out.inner_step_s if out.inner_step_s is not None
                              else spec.inner_step_s),
        "notes": list(out.notes),
    }
    if requested.get("plan_sha256"):     # the campaign plan this run was written under
        meta["plan_sha256"] = str(requested["plan_sha256"])
    if spec.reference_run_id is not None:
        meta["reference_run_id"] = spec.reference_run_id
        meta["reference_k"] = spec.reference_k
    meta.update(_policy_meta(policy, meta))
    if not out.complete or out.error:
        meta["error"] = out.error or "incomplete"
    if len(out.requests):
        meta["k_observed"] = k_observed(out.requests, out.merges, spec.horizon_s,
                                         spec.merge_duration_s)
    return meta


def _policy_meta(policy: Policy, meta: dict) -> dict:
    """The run.json keys ``policy.run_meta()`` adds; none may replace one the runner wrote."""
    extra = policy.run_meta()
    if not isinstance(extra, dict):
        raise InputError(f"policy {policy.name!r}: run_meta() returned "
                         f"{type(extra).__name__}, not a dict", column="policy",
                         fix="return a dict of extra run.json keys (or {})")
    taken = sorted(set(extra) & (set(meta) | {k.name for k in META_KEYS}))
    if taken:
        raise InputError(f"policy {policy.name!r}: run_meta() would replace run.json "
                         f"key(s) {taken}", column="policy",
                         fix="give the policy's own keys names the runner does not write")
    return extra


def run_one(spec: ReplaySpec, trace, policy_or_name, runs_dir, *, policy_params=None,
            policy_label: str | None = None, progress=None,
            extra_requested: dict | None = None, extra_meta: dict | None = None) -> RunResult:
    """Replay ``trace`` under one policy on ``spec.backend`` and write the run directory.

    ``extra_meta``: top-level run.json keys to add (a sweep's ``run_order``)."""
    policy = (get_policy(policy_or_name, **(policy_params or {}))
              if isinstance(policy_or_name, str) else policy_or_name)
    label = policy_label or policy.name
    check_spec(spec)
    check_trace(trace, spec)
    backend = load_backend(spec.backend)
    try:
        out = backend.replay(spec, trace, policy, progress=progress)
        if out.complete and out.error is None:
            _check_output(out, trace)
    except InputError:
        raise
    except Exception as exc:            # a backend failure: record it, never a complete run
        msg = f"{type(exc).__name__}: {exc}"
        out = _empty_output(msg + "\n" + traceback.format_exc(limit=-12))  # innermost frames
    complete = bool(out.complete and out.error is None)
    meta = build_meta(spec, trace, policy, out, policy_label=label,
                      extra_requested=extra_requested)
    meta.update(extra_meta or {})
    path = write_run(runs_dir, meta, out.requests, out.merges, steps=out.steps,
                     signals=out.signals, decisions=out.decisions, complete=complete)
    return RunResult(spec.run_id, path, complete, meta.get("k_observed"),
                     None if complete else meta.get("error"))


def _check_output(out: RunOutput, trace) -> None:
    if len(out.requests) != len(trace.requests):
        raise RuntimeError(f"backend returned {len(out.requests)} requests for a trace of "
                           f"{len(trace.requests)}")
    m = out.merges
    if len(m) and (np.any(m["end_s"].to_numpy() < m["start_s"].to_numpy())
                   or not math.isfinite(float(m["end_s"].max()))):
        raise RuntimeError("backend returned malformed merge windows")
