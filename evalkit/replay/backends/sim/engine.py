"""The simulated backend (``--backend sim``): continuous-batching server + co-located trainer.

An event loop over iteration boundaries: between events the running batch is constant, so
the loop jumps over whole runs of identical decode iterations (``k`` iterations of length
τ at once) and stops only where something changes — an arrival that can be admitted, a
completion, an inner-step boundary of the trainer (where the policy is asked and signals
are sampled) or a merge start/end (where the slowdown changes).  Defaults and their sources:
:mod:`evalkit.replay.backends.sim.model`.

Decision-time state is causal: at a trainer event at time ``t_e`` the policy sees the
queue as of the last iteration boundary at or before ``t_e`` and the arrivals up to ``t_e``.

Corridor (the same rule as the torch backend, in steps *and* seconds; ``spec.gaps()`` gives
``min_gap_s``/``max_gap_s`` between consecutive merge STARTS).  At the end of an inner step
``t`` a merge may start only when ``steps_since_merge >= h_min`` and ``t - last_start >=
min_gap_s``; there the policy is asked.  A merge is forced (recorded ``forced``, policy not
asked) at the first step end with ``steps_since_merge >= h_max`` and ``t - last_start >=
min_gap_s``, or at exactly ``last_start + max_gap_s`` — mid-step if need be (the partial
inner step is dropped, as for planned starts) — so consecutive starts are never more than
``max_gap_s`` apart.  Before the first merge the seconds corridor counts from training
start (t = 0), so the first start lies in ``[min_gap_s, max_gap_s]`` too (F_K's edges).
No merge starts after ``horizon - D``.  Hence every run's starts lie in the feasible class
F_K that :func:`evalkit.stats.sample_schedules` draws matched-random schedules from.
Planned policies (``matched_random``, ``calibrated_offline``) start exactly at their planned
times, which their planners already placed inside F_K; ``no_sync`` never merges.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np
import pandas as pd

from evalkit.replay import portable_math
from evalkit.replay.backends.sim.model import SimConfig, inverse_cdf
from evalkit.policies.base import DecisionState, Policy
from evalkit.policies.context import (arrivals_so_far, derived_seed, make_context,
                                      policy_seed)
from evalkit.replay.spec import ReplaySpec, RunOutput

_INF = math.inf


def replay(spec: ReplaySpec, trace, policy: Policy, *, progress=None) -> RunOutput:
    cfg = SimConfig.from_dict(spec.backend_config)
    req = trace.requests
    arrival = req["arrival_s"].to_numpy(dtype=float)
    prompt = req["prompt_tokens"].to_numpy(dtype=np.int64)
    output = req["output_tokens"].to_numpy(dtype=np.int64)
    seeds = {"sim_send_jitter": derived_seed(spec.seed, "sim", "send"),
             "sim_trainer": derived_seed(spec.seed, "sim", "trainer"),
             "policy": policy_seed(spec)}
    if cfg.merge_duration_quantiles is not None:
        seeds["sim_merge_duration"] = derived_seed(spec.seed, "sim", "merge_duration")
    sent = send_times(arrival, cfg, seeds["sim_send_jitter"])
    ctx = make_context(spec, trace, policy)
    policy.reset(ctx)
    sim = _Simulation(spec, cfg, sent, prompt, output, policy, seeds["sim_trainer"],
                      durations=merge_durations(spec, cfg, seeds.get("sim_merge_duration")))
    sim.run()
    requests = pd.DataFrame({
        "request_id": req["request_id"].to_numpy(dtype=np.int64), "arrival_s": arrival,
        "sent_s": sent, "first_token_s": sim.first_token, "end_s": sim.end,
        "prompt_tokens": prompt, "output_tokens": output, "ok": sim.ok,
        "error": sim.error})
    train_f, merge_f = cfg.slowdowns()
    effective = dict(cfg.as_dict(), slowdown_training=train_f, slowdown_merge=merge_f,
                     merge_duration_s=spec.merge_duration_s, h_min=spec.h_min,
                     h_max=spec.h_max, min_gap_s=spec.gaps()[0], max_gap_s=spec.gaps()[1],
                     horizon_s=spec.horizon_s, inner_step_s=spec.inner_step_s)
    merges = sim.merges_frame()
    if cfg.merge_duration_quantiles is not None and len(merges):
        effective["merge_duration_mean_s"] = float(np.mean(merges["end_s"] - merges["start_s"]))
    steps = sim.steps_frame()
    inner = float(np.mean(steps["end_s"] - steps["start_s"])) if len(steps) else spec.inner_step_s
    notes = []
    if sim.n_failed:
        notes.append(f"{sim.n_failed} requests failed (KV capacity or drain limit)")
    return RunOutput(requests=requests, merges=merges, steps=steps,
                     signals=sim.signals_frame(), decisions=sim.decisions_frame(),
                     effective=effective, rng_seeds=seeds, inner_step_s=inner, notes=notes)


def send_times(arrival, cfg: SimConfig, seed: int) -> np.ndarray:
    """Scheduled arrivals plus the client's send lag (uniform jitter, or the twin's quantiles)."""
    rng = np.random.default_rng(seed)
    if cfg.send_lag_quantiles is None:
        return arrival + rng.uniform(0.0, cfg.send_jitter_s, size=len(arrival))
    return arrival + inverse_cdf(cfg.send_lag_quantiles, rng.uniform(size=len(arrival)))


def merge_durations(spec: ReplaySpec, cfg: SimConfig, seed: int | None):
    """Per-merge durations drawn from the twin's quantiles, or None (every merge lasts D)."""
    if cfg.merge_duration_quantiles is None:
        return None
    n = int(spec.horizon_s / max(spec.gaps()[0], 1e-9)) + 2
    rng = np.random.default_rng(seed)
    return inverse_cdf(cfg.merge_duration_quantiles, rng.uniform(size=n)).tolist()


class _Windows:
    """A stand-in policy that merges exactly at given starts (see :func:`serve_with_windows`)."""

    oracle = False
    never_merges = False

    def __init__(self, starts):
        self.planned_starts = np.asarray(starts, dtype=float)
        self.planned_scores = [None] * len(self.planned_starts)


def serve_with_windows(requests: pd.DataFrame, starts, ends, cfg: SimConfig, *, seed: int,
                       horizon_s: float, inner_step_s: float = 0.05) -> pd.DataFrame:
    """Serve ``requests`` with merges exactly at the given windows; the trainer trains between.

    ``requests``: ``request_id``, ``arrival_s``, ``prompt_tokens``, ``output_tokens``;
    ``starts``/``ends``: (k,) merge windows in seconds.  Returns the requests table
    (``sent_s``, ``first_token_s``, ``end_s``, ``ok`` added) — what the twin predicts for a
    real run whose schedule is known.
    """
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    order = np.argsort(arrival, kind="stable")
    req = requests.iloc[order].reset_index(drop=True)
    arrival = arrival[order]
    prompt = req["prompt_tokens"].to_numpy(dtype=np.int64)
    output = req["output_tokens"].to_numpy(dtype=np.int64)
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    horizon = max(float(horizon_s), float(arrival[-1]) if arrival.size else 0.0,
                  float(ends.max()) if ends.size else 0.0)
    spec = ReplaySpec(run_id="twin-prediction", seed=int(seed), regime="twin",
                      horizon_s=horizon, inner_step_s=inner_step_s, h_min=1, h_max=1,
                      merge_duration_s=float(np.max(ends - starts)) if starts.size else 1.0,
                      min_gap_s=0.0, max_gap_s=horizon)
    sent = send_times(arrival, cfg, derived_seed(int(seed), "sim", "send"))
    sim = _Simulation(spec, cfg, sent, prompt, output, _Windows(starts),
                      derived_seed(int(seed), "sim", "trainer"),
                      durations=(ends - starts).tolist())
    sim.run()
    out = req.copy()
    out["sent_s"] = sent
    out["first_token_s"], out["end_s"], out["ok"] = sim.first_token, sim.end, sim.ok
    return out


def simulate_run(run, settings: dict, *, seed: int | None = None) -> pd.DataFrame:
    """The twin's requests table for a recorded run (:class:`~.fit_data.RealRun`): the
    same requests under the run's real merge windows, with twin ``settings``.
    ``seed``: the replay seed (default: the run's seed)."""
    cfg = SimConfig.from_dict(settings)
    return serve_with_windows(run.requests[["request_id", "arrival_s", "prompt_tokens",
                                            "output_tokens"]], run.merge_start, run.merge_end,
                              cfg, seed=run.seed if seed is None else seed,
                              horizon_s=run.horizon_s)


class _Simulation:
    def __init__(self, spec: ReplaySpec, cfg: SimConfig, sent, prompt, output, policy,
                 trainer_seed: int, durations=None):
        self.spec, self.cfg, self.policy = spec, cfg, policy
        self.durations = durations
        order = np.argsort(sent, kind="stable")
        self.order = order
        self.sent = sent[order]
        self.prompt = prompt[order].tolist()
        self.output = output[order].tolist()
        n = len(sent)
        self.n = n
        self._first = np.full(n, np.nan)
        self._end = np.full(n, np.nan)
        self._error: list = [None] * n
        self.n_failed = 0
        self.train_f, self.merge_f = cfg.slowdowns()
        self.slow = self.train_f
        # trainer
        rng = np.random.default_rng(trainer_seed)
        step_s = float(cfg.step_s) if cfg.step_s is not None else spec.inner_step_s
        n_steps = int(spec.horizon_s / step_s * 1.2) + spec.h_max + 16
        sigma = cfg.step_jitter_cv
        # portable exp and 1/sqrt, not np.exp and ** -0.5: these times and losses are
        # recorded, and numpy's transcendental loops differ in the last bit by CPU
        self.step_dur = (step_s * portable_math.exp(rng.normal(-sigma * sigma / 2, sigma,
                                                               n_steps))).tolist()
        g = np.arange(n_steps + 1)
        self.loss = (2.2 + 2.8 / np.sqrt(1.0 + g / 300.0)
                     + rng.normal(0.0, 0.01, n_steps + 1)).tolist()
        self.planned = policy.planned_starts is not None
        self.plan = ([] if not self.planned else
                     sorted(float(x) for x in np.asarray(policy.planned_starts)))
        self.plan_scores = list(getattr(policy, "planned_scores", [None] * len(self.plan)))
        self.never = bool(getattr(policy, "never_merges", False))
        self.rows_steps: list = []
        self.rows_signals: list = []
        self.rows_decisions: list = []
        self.rows_merges: list = []

    # ------------------------------------------------------------------ results
    def _in_input_order(self, values, dtype=float):
        """Per-request ``values`` (kept in send order) back in the order of the input."""
        out = np.empty(self.n, dtype=dtype)
        out[self.order] = values
        return out

    @property
    def first_token(self):
        return self._in_input_order(self._first + self.cfg.response_overhead_s)

    @property
    def end(self):
        return self._in_input_order(self._end + self.cfg.response_overhead_s)

    @property
    def ok(self):
        return self._in_input_order(~np.isnan(self._end), bool)

    @property
    def error(self):
        return self._in_input_order(np.array(self._error, dtype=object), object)

    @staticmethod
    def _columns(rows, dtypes):
        """A frame of ``rows`` (tuples in the order of ``dtypes``' columns)."""
        if not rows:
            return pd.DataFrame({c: np.empty(0, dtype=t) for c, t in dtypes.items()})
        return pd.DataFrame({c: np.asarray(v, dtype=t)
                             for (c, t), v in zip(dtypes.items(), zip(*rows))})

    def steps_frame(self):
        return self._columns(self.rows_steps, {"step": np.int64, "start_s": float,
                                               "end_s": float, "loss": float,
                                               "tokens": np.int64})

    def merges_frame(self):
        return self._columns(self.rows_merges, {
            "merge_idx": np.int64, "start_s": float, "end_s": float, "inner_step": np.int64,
            "bytes": np.int64, "forced": bool})

    def signals_frame(self):
        return self._columns(self.rows_signals, {
            "t_s": float, "queue_waiting": np.int64, "queue_running": np.int64,
            "pressure": float, "kv_used_frac": float})

    def decisions_frame(self):
        rows = self.rows_decisions
        base = ["t_s", "step", "action", "score"]
        if not rows:
            return pd.DataFrame({c: pd.Series(dtype=float if c in ("t_s", "score") else
                                              ("int64" if c == "step" else object))
                                 for c in base})
        df = pd.DataFrame(rows)
        extra = [c for c in df.columns if c not in base]
        df = df[base + extra]
        df["score"] = pd.to_numeric(df["score"], errors="coerce").astype(float)
        return df

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        spec, cfg = self.spec, self.cfg
        sent, prompt, output = self.sent, self.prompt, self.output
        n = self.n
        max_run = int(cfg.max_batch)
        budget = int(cfg.prefill_budget_tokens)
        kv_cap = int(cfg.kv_capacity_tokens)
        base, per_seq, per_tok = cfg.iter_base_s, cfg.decode_per_seq_s, cfg.prefill_per_token_s
        per_admit = cfg.prefill_base_s
        # prefill_pass: admitted requests get their first token after the prefill part of the
        # iteration and their second at its end (a separate prefill forward, then the decode)
        split = 1 if cfg.prefill_pass else 0
        first, end, err = self._first, self._end, self._error
        sent_list = self.sent_list = sent.tolist()
        t_stop = spec.horizon_s + cfg.drain_limit_s

        # trainer state
        self.horizon = float(spec.horizon_s)
        self.D = float(spec.merge_duration_s)
        self.g = 0                       # global inner steps done
        self.j = 0                       # steps since the last merge
        self.seg_t = 0.0                 # start of the current inner step
        self.merge_end = None            # end time of the merge in progress
        self.last_merge_end = None
        self.last_start = None           # start time of the latest merge
        self.min_gap, self.max_gap = spec.gaps()
        self.loss_at_merge = self.loss[0]
        self.plan_i = 0
        self.next_step_end = self.step_dur[0]
        self.tr_next = self._next_trainer_event()

        t, G = 0.0, 0
        head = 0                          # next request to admit (FIFO); waiting = [head, na)
        na = 0                            # arrivals moved in so far
        running: list = []                # heap of (target_iteration, pos)
        heappush, heappop, ceil = heapq.heappush, heapq.heappop, math.ceil
        kv_used = 0
        done = 0
        slow, tr_next = self.slow, self.tr_next
        next_arr = sent_list[0] if n else _INF

        while done < n:
            if t > t_stop:
                for pos in [p for _, p in running] + list(range(head, n)):
                    err[pos] = "not completed within the drain limit"
                self.n_failed += len(running) + (n - head)
                break
            n_run = len(running)
            # ---- admission at boundary t
            if head < na and n_run < max_run:
                tokens, first_pos = 0, head
                while head < na and n_run < max_run:
                    p = prompt[head]
                    need = p + output[head]
                    if need > kv_cap:
                        err[head] = f"request needs {need} KV tokens > capacity {kv_cap}"
                        self.n_failed += 1
                        done += 1
                        head += 1
                        first_pos = head if tokens == 0 else first_pos
                        continue
                    if kv_used + need > kv_cap or (tokens and tokens + p > budget):
                        break
                    tokens += p
                    kv_used += need
                    n_run += 1
                    head += 1
                if head > first_pos and tokens:
                    m = max(1, -(-tokens // budget))
                    t_new = t + slow * (m * (base + per_seq * n_run) + per_admit
                                        + per_tok * tokens)
                    G += m
                    t_first = t + slow * (per_admit + per_tok * tokens) if split else t_new
                    if t_new >= tr_next:
                        self._trainer_until(t_new, head, n_run, kv_used)
                        slow, tr_next = self.slow, self.tr_next
                    t = t_new
                    for pos in range(first_pos, head):
                        if err[pos] is not None:
                            continue
                        first[pos] = t_first
                        if output[pos] <= 1:
                            end[pos] = t_first
                            kv_used -= prompt[pos] + output[pos]
                            done += 1
                        else:
                            heappush(running, (G + output[pos] - 1 - split, pos))
                    while running and running[0][0] <= G:
                        pos = heappop(running)[1]
                        end[pos] = t
                        kv_used -= prompt[pos] + output[pos]
                        done += 1
                    while next_arr <= t:
                        na += 1
                        next_arr = sent_list[na] if na < n else _INF
                    continue
            # ---- decode or idle
            if running:
                tau = slow * (base + per_seq * n_run)
                k = running[0][0] - G
                t_ev = tr_next
                if head == na and n_run < max_run and next_arr < t_ev:   # admissible arrival
                    t_ev = next_arr
                if t_ev < _INF:
                    k_ev = ceil((t_ev - t) / tau - 1e-12)
                    if k_ev < k:
                        k = k_ev if k_ev > 1 else 1
                t_new = t + k * tau
                G += k
                if t_new >= tr_next:
                    self._trainer_until(t_new, head, n_run, kv_used)
                    slow, tr_next = self.slow, self.tr_next
                t = t_new
                while running and running[0][0] <= G:
                    pos = heappop(running)[1]
                    end[pos] = t
                    kv_used -= prompt[pos] + output[pos]
                    done += 1
            else:
                t_new = next_arr if next_arr < tr_next else tr_next
                if t_new == _INF:
                    break
                if t_new < t:
                    t_new = t
                if t_new >= tr_next:
                    self._trainer_until(t_new, head, 0, kv_used)
                    slow, tr_next = self.slow, self.tr_next
                t = t_new
            while next_arr <= t:
                na += 1
                next_arr = sent_list[na] if na < n else _INF
        # trainer steps until the horizon even if serving drained early
        self._trainer_until(self.horizon, head, 0, kv_used)

    # ------------------------------------------------------------------ trainer
    def _next_trainer_event(self) -> float:
        if self.merge_end is not None:
            return self.merge_end
        nxt = self.next_step_end
        if self.planned and self.plan_i < len(self.plan):
            nxt = min(nxt, self.plan[self.plan_i])
        nxt = min(nxt, self._deadline())
        return nxt if nxt <= self.horizon else _INF

    def _deadline(self) -> float:
        """Time of the merge forced by ``max_gap_s`` (inf when none is due)."""
        if self.planned or self.never:
            return _INF
        t = self._corridor_ref() + self.max_gap
        return t if t + self.D <= self.horizon else _INF

    def _trainer_until(self, t_limit, head, n_running, kv_used):
        """Process every trainer event at or before ``t_limit``.

        ``head``, ``n_running``, ``kv_used``: the queue as of the last iteration boundary
        (at or before every event), which is what the policy sees.
        """
        while True:
            te = self.tr_next = self._next_trainer_event()
            if te > t_limit:
                return
            if self.merge_end is not None:                 # merge ends
                self.merge_end = None
                self.last_merge_end = te
                self.slow = self.train_f
                self.seg_t = te
                self.j = 0
                self.loss_at_merge = self.loss[self.g]
                self.next_step_end = te + self.step_dur[self.g]
                continue
            if self.planned and self.plan_i < len(self.plan) and self.plan[self.plan_i] <= \
                    self.next_step_end:
                self._start_merge(te, forced=False)
                score = self.plan_scores[self.plan_i] if self.plan_i < len(self.plan_scores) \
                    else None
                self.rows_decisions.append({"t_s": te, "step": self.j, "action": "merge",
                                            "score": score, "planned": True})
                self.plan_i += 1
                continue
            if self._deadline() < self.next_step_end:     # max_gap_s reached mid-step
                self._start_merge(te, forced=True)
                self.rows_decisions.append({"t_s": te, "step": self.j, "action": "forced",
                                            "score": None})
                continue
            # an inner step ends at te
            self.rows_steps.append((self.g, self.seg_t, te, self.loss[self.g + 1],
                                    self.cfg.tokens_per_step))
            self.g += 1
            self.j += 1
            self.seg_t = te
            self.next_step_end = te + self.step_dur[self.g]
            n_arr = bisect.bisect_right(self.sent_list, te)
            waiting = max(0, n_arr - head)
            cfg = self.cfg
            pressure = min(1.0, max(kv_used / cfg.kv_capacity_tokens,
                                    (n_running + waiting) / cfg.max_batch))
            self.rows_signals.append((te, waiting, n_running, pressure,
                                      kv_used / cfg.kv_capacity_tokens))
            if self.planned or self.never or te + self.D > self.horizon:
                continue
            spec = self.spec
            gap = te - self._corridor_ref()
            if gap < self.min_gap:                          # corridor in seconds
                continue
            if self.j >= spec.h_max or gap >= self.max_gap:
                self._start_merge(te, forced=True)
                self.rows_decisions.append({"t_s": te, "step": self.j, "action": "forced",
                                            "score": None})
                continue
            if self.j < spec.h_min:
                continue
            state = DecisionState(
                t_s=te, steps_since_merge=self.j, total_steps=self.g,
                merges_done=len(self.rows_merges), last_merge_end_s=self.last_merge_end,
                inner_step_s=spec.inner_step_s, queue_waiting=waiting,
                queue_running=n_running, pressure=pressure,
                loss_drop=self.loss_at_merge - self.loss[self.g],
                tokens_since_sync=self.j * cfg.tokens_per_step,
                staleness_s=te - (self.last_merge_end or 0.0),
                recent_arrivals=arrivals_so_far(self.sent, n_arr))
            d = self.policy.decide(state)
            row = {"t_s": te, "step": self.j, "action": "merge" if d.merge else "defer",
                   "score": d.score}
            row.update(d.info)
            self.rows_decisions.append(row)
            if d.merge:
                self._start_merge(te, forced=False)

    def _corridor_ref(self) -> float:
        """Where the seconds corridor counts from: the last merge start, or training start
        (t = 0) before the first merge — F_K's edges (protocol: the first merge lies within
        the corridor after training starts)."""
        return 0.0 if self.last_start is None else self.last_start

    def _start_merge(self, te, forced):
        if self.last_merge_end is not None and te < self.last_merge_end:
            te = self.last_merge_end          # a planned start that fell inside a longer merge
        k = len(self.rows_merges)
        D = self.D if self.durations is None or k >= len(self.durations) else \
            float(self.durations[k])
        self.rows_merges.append((k, te, te + D, self.g, self.cfg.merge_bytes, forced))
        self.merge_end = te + D
        self.last_start = te
        self.slow = self.merge_f
