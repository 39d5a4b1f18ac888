"""Fit the simulator's service and interference model to real runs (pure arrays + one sim pass).

The engine model of :mod:`evalkit.replay.backends.sim.engine`: every iteration advances each
running request by one token and lasts ``slow × (iter_base + decode_per_seq·n + [admission]
(prefill_base + prefill_per_token·P))``, with ``slow`` = ``train_slowdown`` while inner
training runs and ``merge_slowdown`` during a merge window; an admission iteration is a prefill
pass then a decode pass (``prefill_pass``, as in the torch sidecar).

Estimators (all from the requests table, so any real backend's runs can be fitted):

* **Service while training** (no-sync runs; their trainer trains the whole time).  Request
  r's decode span ``S = end − first_token`` covers ``O − 1`` iterations, so
  ``S/(O−1) = base + per_seq·X/(O−1) + prefill_base·A/(O−1) + per_token·P/(O−1)`` with
  ``X`` the tokens every request emitted inside r's span (each request's tokens spread
  evenly over its own span), ``A`` the admission iterations (clusters of first-token
  times) inside it and ``P`` the prompt tokens they admitted.  Non-negative least squares
  over all requests of the no-sync runs.
* **Merge windows** (runs that merged).  With the service above, a request's work at
  training speed is ``Ŵ``; a span with ``T_in`` seconds inside windows and ``T_out``
  outside satisfies ``Ŵ = T_out + T_in/ρ`` where ``ρ`` = merge slowdown / training
  slowdown.  Least squares for ``1/ρ``.  ``ρ < 1``: a merge disturbs serving less than inner
  training does (the merge pauses it), so no-sync runs are the *worst* (negative sync
  excess).
* **Training slowdown** relative to an idle engine: the capacity probe the torch/vLLM
  backends run with the trainer idle (``capacity_tokens_per_s`` at ``max_batch``) against
  the service-while-training prediction of the same probe.  Without a probe it is 1 and the
  service constants include the trainer's effect.
* **Merge durations, send lag, inner-step time**: empirical quantiles (21 points), median
  and log-scale spread.
* **Response overhead**: after the rest is fitted, the median of real − simulated
  end-to-end latency over the no-sync runs' requests (transport the engine model lacks).
* **Host load** (a shared machine): every iteration cost of run r scales as
  ``(step_r / step_ref)^β``, with ``step_r`` the run's median inner-step time — the trainer
  competes for the same cores, so its step time measures the contention a run saw without
  looking at its latencies.  β is the slope of log(observed / predicted decode time) on
  log(step_r / step_ref) over the no-sync runs; the service is then refitted at the
  reference load.  The twin itself runs at the reference load (``step_s`` = step_ref); a
  prediction for a given real run may scale its slowdowns by the run's factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from evalkit.replay.backends.sim.engine import simulate_run
from evalkit.replay.backends.sim.fit_data import RealRun

N_QUANTILES = 21
ADMISSION_TOL_S = 0.005          # first tokens closer than this come from one admission
BIG = 10**9                      # "no limit" for the KV cache and the prefill budget


@dataclass
class DecodeFeatures:
    """Per-request regressors (one row per multi-token completed request)."""

    iters: np.ndarray         # O − 1
    span: np.ndarray          # S = end − first_token
    tokens: np.ndarray        # X
    admissions: np.ndarray    # A
    prompt: np.ndarray        # P
    t_in: np.ndarray          # seconds of the span inside merge windows

    def design(self) -> np.ndarray:
        """Rows of ``[1, X, A, P] / (O − 1)``: per-iteration regressors."""
        k = self.iters
        return np.column_stack([np.ones_like(k), self.tokens / k, self.admissions / k,
                                self.prompt / k])


def _overlap(lo, hi, a, b):
    return np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0.0, None)


def decode_features(run: RealRun) -> DecodeFeatures:
    """The regressors of ``run`` (computed once per run and cached on it)."""
    if "features" not in run.cache:
        run.cache["features"] = _decode_features(run)
    return run.cache["features"]


def _decode_features(run: RealRun) -> DecodeFeatures:
    req = run.requests
    first = req["first_token_s"].to_numpy(dtype=float)
    end = req["end_s"].to_numpy(dtype=float)
    out = req["output_tokens"].to_numpy(dtype=float)
    prompt = req["prompt_tokens"].to_numpy(dtype=float)
    done = req["ok"].to_numpy(dtype=bool) & np.isfinite(first) & np.isfinite(end)
    f, e, o, p = first[done], end[done], out[done], prompt[done]
    span = np.clip(e - f, 0.0, None)
    rate = np.where(span > 0, np.clip(o - 1, 0, None) / np.where(span > 0, span, 1.0), 0.0)
    # tokens emitted by every request q inside request r's span: rate_q * overlap(q, r)
    ov = _overlap(f[None, :], e[None, :], f[:, None], e[:, None])
    tokens = ov @ rate
    # admission iterations: clusters of first-token times
    order = np.sort(f)
    starts = order[np.r_[True, np.diff(order) > ADMISSION_TOL_S]] if order.size else order
    admissions = (np.searchsorted(starts, e, side="right")
                  - np.searchsorted(starts, f + ADMISSION_TOL_S, side="right"))
    inside = (f[None, :] > f[:, None] + ADMISSION_TOL_S) & (f[None, :] <= e[:, None])
    admitted = inside @ p
    t_in = np.zeros_like(f)
    for a, b in zip(run.merge_start, run.merge_end):
        t_in += _overlap(f, e, a, b)
    keep = o >= 2
    return DecodeFeatures(iters=(o - 1)[keep], span=span[keep], tokens=tokens[keep],
                          admissions=admissions[keep].astype(float), prompt=admitted[keep],
                          t_in=t_in[keep])


def _stack(feats: list[DecodeFeatures]) -> DecodeFeatures:
    return DecodeFeatures(*(np.concatenate([getattr(f, name) for f in feats]) for name in
                            ("iters", "span", "tokens", "admissions", "prompt", "t_in")))


@dataclass
class Service:
    """Iteration cost while the trainer trains: seconds (base, per running request, per
    admission, per admitted prompt token)."""

    base: float
    per_seq: float
    prefill_base: float
    per_token: float
    n_requests: int = 0

    def work(self, f: DecodeFeatures) -> np.ndarray:
        """Predicted decode span at training speed, seconds per request."""
        coef = np.array([self.base, self.per_seq, self.prefill_base, self.per_token])
        return f.design() @ coef * f.iters


def _scaled(feats: list[DecodeFeatures], scales) -> np.ndarray:
    """Per-request load factor: each run's factor repeated over its requests."""
    if scales is None:
        return np.ones(sum(f.iters.size for f in feats))
    return np.concatenate([np.full(f.iters.size, float(s)) for f, s in zip(feats, scales)])


def fit_service(feats: list[DecodeFeatures], scales=None) -> Service:
    """NNLS of per-iteration decode time; ``scales``: each run's host-load factor (or None)."""
    f = _stack(feats)
    coef, _ = nnls(f.design(), f.span / f.iters / _scaled(feats, scales))
    if coef[0] <= 0:               # a zero base cost would make the engine free when idle
        coef[0] = max(float(np.median(f.span / f.iters)) * 1e-3, 1e-6)
    return Service(*(float(c) for c in coef), n_requests=int(f.iters.size))


def fit_merge_ratio(feats: list[DecodeFeatures], service: Service,
                    scales=None) -> tuple[float, int]:
    """ρ = merge slowdown / training slowdown, and the number of requests it rests on."""
    f = _stack(feats)
    hit = f.t_in > 0
    if not np.any(hit):
        return float("nan"), 0
    w = 1.0 / f.iters[hit] ** 2
    work = (service.work(f) * _scaled(feats, scales))[hit]
    t_in, t_out = f.t_in[hit], (f.span - f.t_in)[hit]
    inv = float(np.sum(w * t_in * (work - t_out)) / np.sum(w * t_in * t_in))
    inv = min(max(inv, 0.05), 20.0)         # ρ in [0.05, 20]: the data's range, not a prior
    return 1.0 / inv, int(hit.sum())


def probe_slowdown(runs: list[RealRun], service: Service) -> float | None:
    """Training slowdown from the idle-trainer capacity probe (None when no run has one)."""
    ratios = []
    for r in runs:
        e = r.effective
        need = ("probe_elapsed_s", "probe_requests", "probe_prompt_tokens", "probe_output_tokens")
        if not all(isinstance(e.get(k), (int, float)) for k in need) or \
                not e["probe_elapsed_s"] > 0:
            continue
        n, p, o = int(e["probe_requests"]), int(e["probe_prompt_tokens"]), \
            int(e["probe_output_tokens"])
        busy = (o * (service.base + service.per_seq * n) + service.prefill_base
                + service.per_token * n * p)
        ratios.append(busy / float(e["probe_elapsed_s"]))
    return float(np.median(ratios)) if ratios else None


def quantile_grid(values) -> list[float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return [float(x) for x in np.quantile(v, np.linspace(0, 1, N_QUANTILES))] if v.size else []


def run_step_s(run: RealRun) -> float:
    s = run.step_s[np.isfinite(run.step_s) & (run.step_s > 0)]
    return float(np.median(s)) if s.size else float("nan")


@dataclass(frozen=True)
class HostLoad:
    """Iteration costs of a run scale as ``(step_r / ref_step_s) ** exponent``."""

    exponent: float
    ref_step_s: float

    def factor(self, run: RealRun) -> float:
        step = run_step_s(run)
        if not (self.exponent and np.isfinite(step) and self.ref_step_s > 0):
            return 1.0
        return float((step / self.ref_step_s) ** self.exponent)


def fit_load_exponent(runs: list[RealRun], service: Service, ref_step_s: float) -> float:
    """β: slope of log(observed/predicted decode time) on log(step/ref) over ``runs``."""
    x, y = [], []
    for r in runs:
        f = decode_features(r)
        step = run_step_s(r)
        work = service.work(f).sum()
        if f.iters.size and work > 0 and np.isfinite(step) and step > 0:
            x.append(np.log(step / ref_step_s))
            y.append(np.log(f.span.sum() / work))
    x, y = np.asarray(x), np.asarray(y)
    if x.size < 3 or np.ptp(x) < 1e-6:
        return 0.0
    beta = float(np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))
    return min(max(beta, 0.0), 3.0)


@dataclass
class FitEstimate:
    settings: dict                 # SimConfig settings of the twin
    service: Service               # while training (what no-sync runs measured)
    merge_ratio: float             # merge slowdown / training slowdown
    load: HostLoad = HostLoad(0.0, 1.0)
    derived: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


def fit_settings(runs: list[RealRun], *, with_overhead: bool = True) -> FitEstimate:
    """Every twin setting from ``runs`` (which must hold no-sync and merging runs)."""
    notes = []
    no_sync = [r for r in runs if r.no_sync]
    merging = [r for r in runs if r.merging]
    ns_feats = [decode_features(r) for r in no_sync]
    run_steps = np.array([run_step_s(r) for r in runs])
    run_steps = run_steps[np.isfinite(run_steps)]
    ref = float(np.median(run_steps)) if run_steps.size else float("nan")
    service = fit_service(ns_feats)
    load = HostLoad(0.0, ref)
    if np.isfinite(ref):
        for _ in range(2):          # the service at the reference load, then β again
            load = HostLoad(fit_load_exponent(no_sync, service, ref), ref)
            service = fit_service(ns_feats, [load.factor(r) for r in no_sync])
    ratio, n_hit = fit_merge_ratio([decode_features(r) for r in merging], service,
                                   [load.factor(r) for r in merging])
    if not np.isfinite(ratio):
        ratio = 1.0
        notes.append("no request overlapped a merge window: merge slowdown = training slowdown")
    slow = probe_slowdown(runs, service)
    if slow is None:
        slow = 1.0
        notes.append("no idle-trainer capacity probe in the runs: train_slowdown = 1 and the "
                     "service costs include the trainer's effect")
    elif slow < 1.0:
        notes.append(f"the idle probe was slower than serving while training (ratio "
                     f"{slow:.3f}); train_slowdown set to 1")
        slow = 1.0
    durations = np.concatenate([r.merge_end - r.merge_start for r in merging])
    lags = np.concatenate([(r.requests["sent_s"] - r.requests["arrival_s"]).to_numpy(float)
                           for r in runs])
    steps = np.concatenate([r.step_s for r in runs])
    steps = steps[np.isfinite(steps) & (steps > 0)]
    max_batch = [r.effective.get("max_batch") for r in runs if r.effective.get("max_batch")]
    tokens_per_step = [r.effective.get("tokens_per_step") for r in runs
                       if r.effective.get("tokens_per_step")]
    # step-time spread within a run (between runs it is host load, see HostLoad)
    log_steps = np.concatenate([np.log(r.step_s[r.step_s > 0]) - np.log(run_step_s(r))
                                for r in runs if np.any(r.step_s > 0)] or [np.empty(0)])
    settings = {
        "max_batch": int(np.median(max_batch)) if max_batch else 128,
        "prefill_budget_tokens": BIG, "kv_capacity_tokens": BIG,
        "iter_base_s": service.base / slow, "decode_per_seq_s": service.per_seq / slow,
        "prefill_base_s": service.prefill_base / slow,
        "prefill_per_token_s": service.per_token / slow, "prefill_pass": True,
        "train_colocated": True, "train_slowdown": slow, "merge_slowdown": slow * ratio,
        "merge_duration_quantiles": quantile_grid(durations),
        "send_lag_quantiles": [max(0.0, x) for x in quantile_grid(lags)],
        "response_overhead_s": 0.0,
        "step_s": ref if np.isfinite(ref) else None,
        "step_jitter_cv": float(1.4826 * np.median(np.abs(log_steps)))
        if log_steps.size else 0.02,
        "tokens_per_step": int(np.median(tokens_per_step)) if tokens_per_step else 4096,
    }
    settings = {k: v for k, v in settings.items() if v is not None}
    derived = {"merge_ratio": ratio, "merge_requests": n_hit,
               "load_exponent": load.exponent, "load_ref_step_s": ref,
               "service_requests": service.n_requests,
               "merge_duration_mean_s": float(np.mean(durations)),
               "send_lag_p50_s": float(np.median(lags[np.isfinite(lags)]))}
    est = FitEstimate(settings=settings, service=service, merge_ratio=ratio, load=load,
                      derived=derived, notes=notes)
    if with_overhead:
        est.settings["response_overhead_s"] = response_overhead(no_sync, est.settings, load)
    return est


def at_load(settings: dict, factor: float) -> dict:
    """The twin's settings with every iteration cost scaled by a host-load ``factor``."""
    out = dict(settings)
    for key in ("train_slowdown", "merge_slowdown"):
        if out.get(key) is not None:
            out[key] = float(out[key]) * factor
    return out


def overhead_residuals(run: RealRun, settings: dict, load: HostLoad | None = None) -> np.ndarray:
    """Real − simulated end time of ``run``'s completed requests, the twin without overhead."""
    factor = load.factor(run) if load is not None else 1.0
    sim = simulate_run(run, at_load(dict(settings, response_overhead_s=0.0), factor))
    real_end = run.requests["end_s"].to_numpy(float)
    sim_end = sim["end_s"].to_numpy(float)
    good = np.isfinite(real_end) & np.isfinite(sim_end) & run.requests["ok"].to_numpy(bool)
    return real_end[good] - sim_end[good]


def response_overhead(no_sync: list[RealRun], settings: dict,
                      load: HostLoad | None = None) -> float:
    """Median real − simulated end-to-end latency over the no-sync runs' requests (>= 0)."""
    d = np.concatenate([overhead_residuals(r, settings, load) for r in no_sync]
                       or [np.empty(0)])
    return max(0.0, float(np.median(d))) if d.size else 0.0
