"""Orchestration shared by the torch and vllm backends.

Order: rig acquired (a warm one reused, else engine + learners started, see
:mod:`~evalkit.replay.backends.torch.rig`) -> sidecar drained and counters zeroed ->
learners re-initialised from the run's seed, warm-up steps timed -> capacity probe (once
per rig and request shape) -> replay clock ``t0`` -> open-loop client, metrics scraper,
policy decisions (this process) -> client drained -> trainer stopped (learners idle,
ready for the next run).  Anything that dies mid-run ends the run as incomplete with the
error and closes the rig; every child is killed by process group.

Corridor: a policy is asked (and a forced merge placed) only when ``h_min`` inner steps
have passed since the last merge *and* the last merge started at least ``min_gap_s``
earlier; a merge is forced at ``h_max`` steps or ``max_gap_s`` seconds after the last
start.  Real inner steps rarely take the nominal ``inner_step_s``, so the step corridor
alone would not give the seconds corridor that matched-random draws are placed in.

``DecisionState.inner_step_s`` is the *measured* inner-step time: the median duration of
the last (up to) 64 inner steps of this run, observed before the decision (decision-time
information); ``RunContext.inner_step_s`` is the warm-up measurement taken before ``t0``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections import deque

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.policies.base import DecisionState
from evalkit.policies.context import arrivals_so_far, make_context, policy_seed
from evalkit.replay.backends.procs import Managed
from evalkit.replay.backends.torch import client as cl
from evalkit.replay.backends.torch import rig as rigs
from evalkit.replay.backends.torch.health import Server, say
from evalkit.replay.backends.torch.pacing import (host_busy_error, missed_tick_error,
                                                  wait_for_quiet_host)
from evalkit.replay.backends.torch.trainer import CONTINUE, MERGE, STOP
from evalkit.replay.spec import RunOutput
from evalkit.runlog.io import empty_frame


class LiveState:
    """Signals shared between the asyncio side (client, scraper) and the policy thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.waiting = 0
        self.arrivals: list[float] = []

    def update_queue(self, running: int, waiting: int) -> None:
        with self.lock:
            self.running, self.waiting = running, waiting

    def add_arrival(self, t: float) -> None:
        with self.lock:
            self.arrivals.append(t)

    def n_arrivals(self) -> int:
        return len(self.arrivals)

    def snapshot(self):
        with self.lock:
            return self.running, self.waiting, arrivals_so_far(self.arrivals, len(self.arrivals))


async def probe_capacity(server: Server, requests: pd.DataFrame, cfg: dict, seed: int) -> dict:
    """Saturate the engine with ``max_batch`` median requests: tokens/s it sustains."""
    import aiohttp
    n = int(cfg["max_batch"])
    med_p = int(np.median(requests["prompt_tokens"])) if len(requests) else 16
    med_o = max(2, int(np.median(requests["output_tokens"])) if len(requests) else 16)
    probe = pd.DataFrame({"request_id": np.arange(n) + 10**9, "arrival_s": np.zeros(n),
                          "prompt_tokens": np.full(n, med_p), "output_tokens": np.full(n, med_o)})
    bodies, _ = cl.request_bodies(probe, server.model, seed,
                                  max_prompt_tokens=cfg["max_prompt_tokens"])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        warm = cl.make_records(probe.iloc[:1])
        await cl.open_loop(s, server.base_url, warm, bodies[:1], time.monotonic(),
                           timeout_s=float(cfg["request_timeout_s"]))
        if not warm[0].ok:
            raise InputError(f"warm-up request to {server.base_url} failed: {warm[0].error}",
                             column="backend_config", fix="check the serving engine")
        recs = cl.make_records(probe)
        t = time.monotonic()
        await cl.open_loop(s, server.base_url, recs, bodies, t,
                           timeout_s=float(cfg["request_timeout_s"]))
        elapsed = time.monotonic() - t
    tokens = sum(r.tokens_received for r in recs if r.ok)
    ttft = [r.first_token_s for r in recs if r.first_token_s is not None]
    return {"probe_requests": n, "probe_prompt_tokens": med_p, "probe_output_tokens": med_o,
            "capacity_tokens_per_s": tokens / elapsed if elapsed > 0 else float("nan"),
            "capacity_requests_per_s": (tokens / med_o) / elapsed if elapsed > 0 else float("nan"),
            "probe_elapsed_s": elapsed,
            "single_request_s": float(warm[0].end_s or float("nan")),
            "probe_ttft_median_s": float(np.median(ttft)) if ttft else float("nan")}


class Trainer:
    """One run's policy loop over the rig's learner group (it answers rank 0 every step)."""

    def __init__(self, spec, policy, cfg: dict, group, live: LiveState, on_fail):
        self.spec, self.policy, self.cfg, self.live, self.on_fail = spec, policy, cfg, live, on_fail
        self.group = group
        self.procs = group.procs
        self.conn = group.conns[0]
        self.steps, self.merges, self.decisions = [], [], []
        self.stop_requested = threading.Event()
        self.finished = threading.Event()
        self.got_done = False
        self.pacing: dict | None = None     # the paced trainer's clock record (rank 0)
        self.error: str | None = None
        self.closing = False

    def begin(self, timeout_s: float) -> dict:
        run_cfg = {k: self.cfg[k] for k in rigs.RUN_KEYS_FOR_LEARNERS}
        run_cfg["seed"] = int(self.spec.seed)
        self.ready = self.group.begin_run(run_cfg, timeout_s)
        return self.ready

    def start(self, t0: float, ctx, no_sync: bool, planned: bool) -> None:
        self.t0, self.ctx, self.no_sync, self.planned = t0, ctx, no_sync, planned
        self.group.go(t0)
        self.thread = threading.Thread(target=self._serve, name="policy", daemon=True)
        self.thread.start()

    # -- the policy loop -----------------------------------------------------------------
    def _serve(self) -> None:
        since, total, tokens_since = 0, 0, 0
        last_end: float | None = None
        last_start: float | None = None
        lo, hi = self.ctx.corridor.min_gap_s, self.ctx.corridor.max_gap_s
        loss_s: float | None = None
        loss_at_merge: float | None = None
        pending_forced: list[bool] = []
        plan = sorted(float(x) for x in np.asarray(self.policy.planned_starts)) \
            if self.planned else []
        plan_i = 0
        cap = float(self.cfg["pressure_capacity"])
        recent_step_s: deque = deque(maxlen=64)
        try:
            while True:
                msg = self.conn.recv()
                kind = msg["type"]
                if kind == "done":
                    self.pacing = msg.get("pacing")
                    self.got_done = True
                    break
                if kind == "merge":
                    msg["forced"] = pending_forced.pop(0) if pending_forced else False
                    self.merges.append(msg)
                    last_end = msg["end_s"]
                    continue
                self.steps.append({k: msg[k] for k in ("step", "start_s", "end_s", "loss", "tokens")})
                recent_step_s.append(float(msg["end_s"] - msg["start_s"]))
                since, total = since + 1, total + 1
                tokens_since += int(msg["tokens"])
                loss_s = msg["loss"] if loss_s is None else 0.9 * loss_s + 0.1 * msg["loss"]
                if loss_at_merge is None:
                    loss_at_merge = loss_s
                t = time.monotonic() - self.t0
                action, label, score, info = CONTINUE, None, None, {}
                running, waiting, arrivals = self.live.snapshot()
                if self.stop_requested.is_set():
                    action = STOP
                elif self.planned:
                    # merge at the first step boundary at or after each planned start
                    if plan_i < len(plan) and t >= plan[plan_i]:
                        action, label = MERGE, "merge"
                        plan_i += 1
                elif self.no_sync or t + self.ctx.merge_duration_s > self.ctx.horizon_s:
                    pass
                elif t - (last_start or 0.0) < lo:
                    # corridor in seconds, counted from training start before the first merge
                    pass
                elif since >= self.ctx.corridor.h_max or t - (last_start or 0.0) >= hi:
                    action, label = MERGE, "forced"
                elif since >= self.ctx.corridor.h_min:
                    state = DecisionState(
                        t_s=t, steps_since_merge=since, total_steps=total,
                        merges_done=len(self.merges) + len(pending_forced),
                        last_merge_end_s=last_end,
                        inner_step_s=float(np.median(recent_step_s)),
                        queue_waiting=waiting, queue_running=running,
                        pressure=min(1.0, (running + waiting) / cap),
                        loss_drop=float(loss_at_merge - loss_s),
                        tokens_since_sync=tokens_since,
                        staleness_s=t - (last_end if last_end is not None else 0.0),
                        recent_arrivals=arrivals)
                    d = self.policy.decide(state)
                    action = MERGE if d.merge else CONTINUE
                    label, score = ("merge" if d.merge else "defer"), d.score
                    info = {k: v for k, v in (d.info or {}).items()
                            if isinstance(v, (int, float, str, bool)) or v is None}
                if label is not None:
                    self.decisions.append({
                        "t_s": t, "step": since, "action": label,
                        "score": None if score is None else float(score),
                        "planned": self.planned, "total_steps": total,
                        "queue_running": running, "queue_waiting": waiting, **info})
                if action == MERGE:
                    last_start = t
                    pending_forced.append(label == "forced")
                    since, tokens_since, loss_at_merge = 0, 0, loss_s
                self.conn.send({"action": action})
        except (EOFError, OSError) as exc:
            if not self.closing:
                self._fail(f"trainer rank 0 connection lost ({type(exc).__name__})")
        except Exception as exc:
            self._fail(f"policy loop failed: {type(exc).__name__}: {exc}")
            with contextlib.suppress(Exception):
                self.conn.send({"action": STOP})
        finally:
            self.finished.set()

    def _fail(self, text: str) -> None:
        if self.error is None:
            self.error = text
            self.on_fail(text)

    def dead(self) -> Managed | None:
        return self.group.dead()

    def stop(self, timeout_s: float) -> None:
        """Ask rank 0 to stop at its next step; wait for every rank's ``done``."""
        self.stop_requested.set()
        if hasattr(self, "thread"):
            self.thread.join(timeout_s)
        if self.got_done:
            self.group.finish(timeout_s)


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows) if rows else pd.DataFrame({c: [] for c in columns})


def run_replay(spec, trace, policy, *, cfg: dict, start_server, backend: str = "torch",
               progress=None) -> RunOutput:
    """Run one replay on the warm rig, or a fresh one (``start_server(cfg, log_dir)``).

    Any failure (an exception, or an incomplete run) closes the rig, so the next run
    starts from fresh processes; ``reuse_rig = false`` closes it after every run.
    """
    if cfg["max_load_1m"] is not None:
        refused = _host_load_gate(cfg, progress)
        if refused is not None:
            return refused
    say(progress, "acquiring the rig")
    rig, warm = rigs.acquire(cfg, start_server, backend, progress)
    ok = False
    try:
        out = _run(spec, trace, policy, cfg, rig, warm, progress)
        ok = out.complete
        rig.runs += 1
        return out
    finally:
        if not ok or not cfg["reuse_rig"]:
            rigs.close_rig()


def _host_load_gate(cfg: dict, progress) -> RunOutput | None:
    """A failed run (to be re-run) when the host stays busier than ``max_load_1m``."""
    limit, wait_s = float(cfg["max_load_1m"]), float(cfg["load_wait_s"])
    say(progress, f"waiting up to {wait_s:g} s for the 1-minute load to be <= {limit:g}")
    quiet, load, waited = wait_for_quiet_host(limit, wait_s,
                                              read_load=lambda: os.getloadavg()[0])
    if quiet:
        return None
    effective = {k: v for k, v in cfg.items() if not k.startswith("_")}
    effective["load_gate"] = {"load_1m": load, "max_load_1m": limit, "waited_s": waited}
    return RunOutput(requests=empty_frame("requests"), merges=empty_frame("merges"),
                     effective=effective, complete=False,
                     error=host_busy_error(load, limit, waited))


PROBE_VALUES = ("probe_requests", "probe_prompt_tokens", "probe_output_tokens",
                "capacity_tokens_per_s", "capacity_requests_per_s", "probe_elapsed_s",
                "single_request_s", "probe_ttft_median_s")


def probe_shape(requests, cfg) -> tuple:
    """What a capacity probe depends on: the median request and the engine's batch settings."""
    med_p = int(np.median(requests["prompt_tokens"])) if len(requests) else 16
    med_o = max(2, int(np.median(requests["output_tokens"])) if len(requests) else 16)
    return (med_p, med_o, int(cfg["max_batch"]), cfg["max_prompt_tokens"])


def recorded_probe(meta: dict) -> dict | None:
    """The capacity probe a complete run.json carries (``run_id``, ``shape`` as
    :func:`probe_shape`, ``values``), or None; a sweep hands it to the seed's later runs."""
    eff = (meta.get("settings") or {}).get("effective") or {}
    if meta.get("complete") is not True or any(k not in eff for k in PROBE_VALUES):
        return None
    return {"run_id": str(meta.get("run_id")),
            "shape": [eff["probe_prompt_tokens"], eff["probe_output_tokens"],
                      eff.get("max_batch"), eff.get("max_prompt_tokens")],
            "values": {k: eff[k] for k in PROBE_VALUES}}


def _probe(rig, requests, cfg, seed, recorded: dict | None = None) -> dict:
    """Capacity probe: the one an earlier run of this seed recorded (``recorded``, when its
    shape matches), else the rig's (once per rig and shape), else measured now."""
    key = probe_shape(requests, cfg)
    if recorded is not None and list(recorded.get("shape") or ()) == list(key):
        return {**recorded["values"], "capacity_probe_cached": True,
                "capacity_probe_from": recorded["run_id"]}
    if key in rig.probes:
        return {**rig.probes[key], "capacity_probe_cached": True, "capacity_probe_from": None}
    cap = asyncio.run(probe_capacity(rig.server, requests, cfg, seed))
    rig.probes[key] = cap
    return {**cap, "capacity_probe_cached": False, "capacity_probe_from": None}


def _run(spec, trace, policy, cfg, rig, warm, progress) -> RunOutput:
    server = rig.server
    effective = {k: v for k, v in cfg.items() if not k.startswith("_")}
    effective.update({"base_url": server.base_url, "served_model": server.model,
                      "server_kind": server.kind, **server.info})
    requests = trace.requests.sort_values("arrival_s").reset_index(drop=True)
    live = LiveState()
    failure: dict = {}
    loop_box: dict = {}

    def on_fail(text):
        failure.setdefault("error", text)
        loop, ev = loop_box.get("loop"), loop_box.get("event")
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the run already ended
                loop.call_soon_threadsafe(ev.set)

    t_reset = time.monotonic()
    say(progress, "resetting the rig" if warm else "learners ready; first run on this rig")
    asyncio.run(rig.reset_server())
    trainer = Trainer(spec, policy, cfg, rig.learners, live, on_fail)
    ready = trainer.begin(float(cfg["startup_timeout_s"]))
    effective.update({"warmup_inner_step_s": ready["warmup_step_s"],
                      "trainer_n_params": ready["n_params"],
                      "tokens_per_step": ready["tokens_per_step"],
                      "init_param_digests": list(ready["init_digests"]),
                      "pids": rig.pids(),
                      "rig": {"warm": bool(warm), "runs_before": int(rig.runs),
                              "startup_s": float(rig.startup_s),
                              "reset_s": float(time.monotonic() - t_reset)}})

    say(progress, "probing serving capacity")
    cap = _probe(rig, requests, cfg, spec.seed, getattr(spec, "seed_probe", None))
    effective.update(cap)
    effective["capacity_note"] = "measured after start-up with the trainer idle"
    notes: list[str] = []
    span_t = max(float(spec.horizon_s), float(requests["arrival_s"].max()) if len(requests) else 0)
    offered = float(requests["output_tokens"].sum()) / span_t if span_t > 0 else 0.0
    effective["offered_tokens_per_s"] = offered
    effective["offered_requests_per_s"] = len(requests) / span_t if span_t > 0 else 0.0
    if offered > float(cfg["capacity_margin"]) * cap["capacity_tokens_per_s"]:
        text = (f"the trace offers {offered:.1f} output tokens/s "
                f"({effective['offered_requests_per_s']:.2f} req/s) but the engine sustained "
                f"{cap['capacity_tokens_per_s']:.1f} tokens/s "
                f"({cap['capacity_requests_per_s']:.2f} req/s of median size) with "
                f"max_batch={cfg['max_batch']}")
        if cfg["capacity_check"]:
            raise InputError(text, column="backend_config.capacity_check",
                             fix="lower the trace rate, raise max_batch, use a smaller "
                                 "server_model, or set capacity_check = false to overload")
        notes.append("overloaded: " + text)

    no_sync = (spec.role == "no_sync" or getattr(policy, "role", "") == "no_sync"
               or bool(getattr(policy, "never_merges", False)))
    ctx = make_context(spec, trace, policy, inner_step_s=float(ready["warmup_step_s"]))
    if getattr(policy, "oracle", False) and ctx.future_requests is None:
        per_tok = float(cfg["max_batch"]) / max(1e-9, cap["capacity_tokens_per_s"])
        ctx.future_requests = requests.assign(
            expected_end_s=requests["arrival_s"] + requests["output_tokens"] * per_tok)
        notes.append("oracle request ends estimated from the measured per-token time")
    ctx.extra["backend"] = spec.backend
    policy.reset(ctx)
    planned = getattr(policy, "planned_starts", None) is not None
    bodies, truncated = cl.request_bodies(requests, server.model, spec.seed,
                                          max_prompt_tokens=cfg["max_prompt_tokens"])
    effective["prompts_truncated"] = truncated
    if truncated:
        notes.append(f"{truncated} prompts truncated to {cfg['max_prompt_tokens']} tokens")
    recs = cl.make_records(requests)
    signal_rows: list[dict] = []

    async def main():
        import aiohttp
        loop_box["loop"], loop_box["event"] = asyncio.get_running_loop(), asyncio.Event()
        if "error" in failure:
            loop_box["event"].set()
        t0 = time.monotonic() + 0.5
        trainer.start(t0, ctx, no_sync, planned)
        say(progress, f"replaying {len(recs)} requests over {span_t:.0f} s")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            client = asyncio.ensure_future(cl.open_loop(
                session, server.base_url, recs, bodies, t0,
                timeout_s=float(cfg["request_timeout_s"]),
                on_send=lambda r: live.add_arrival(r.arrival_s)))
            scraper = asyncio.ensure_future(cl.scrape_loop(
                session, server.base_url + "/metrics", t0, float(cfg["scrape_interval_s"]),
                live, signal_rows))
            watch = asyncio.ensure_future(_watch(trainer, server, cfg, t0, on_fail))
            failed = asyncio.ensure_future(loop_box["event"].wait())
            await asyncio.wait({client, failed}, return_when=asyncio.FIRST_COMPLETED)
            for task in (client, scraper, watch, failed):
                task.cancel()
            await asyncio.gather(client, scraper, watch, failed, return_exceptions=True)
        return t0

    asyncio.run(main())
    if "error" not in failure:
        say(progress, "stopping the trainer")
        try:
            trainer.stop(float(cfg["stop_timeout_s"]))
        except Exception as exc:        # a learner died or hung while stopping
            failure.setdefault("error", f"{type(exc).__name__}: {exc}")
        if not trainer.got_done:
            failure.setdefault("error", "trainer did not stop within stop_timeout_s")
        dead = trainer.dead()
        if dead is not None:
            failure.setdefault("error", f"{dead.name} exited with code {dead.poll()}")
    trainer.closing = True
    if "error" in failure:              # kill everything before reading the run's tables
        rigs.close_rig()
    return _output(spec, cfg, requests, recs, trainer, signal_rows, effective, notes,
                   failure.get("error"), ready)


async def _watch(trainer: Trainer, server: Server, cfg, t0: float, on_fail) -> None:
    fault = cfg["fault"]
    while True:
        t = time.monotonic() - t0
        if fault is not None and t >= float(fault["at_s"]):
            target = server.proc if fault["target"] == "sidecar" else next(
                (p for p in trainer.procs if p.name == fault["target"]), None)
            if target is not None:
                target.kill(signal.SIGKILL)
            fault = None
        dead = trainer.dead()
        if dead is not None:
            on_fail(f"{dead.name} exited with code {dead.poll()} at t={t:.1f} s: "
                    f"{dead.log_tail(600)}")
            return
        if server.proc is not None and server.proc.poll() is not None:
            on_fail(f"{server.kind} exited with code {server.proc.poll()} at t={t:.1f} s")
            return
        await asyncio.sleep(0.1)


def _output(spec, cfg, requests, recs, trainer, signal_rows, effective, notes, error,
            ready) -> RunOutput:
    req = cl.records_frame(recs, token_times=bool(cfg["store_token_times"]))
    merges = _frame(trainer.merges, ["start_s", "end_s", "inner_step", "bytes"])
    merges.insert(0, "merge_idx", np.arange(len(merges), dtype=np.int64))
    if len(merges):
        merges["duration_s"] = merges["end_s"] - merges["start_s"]
        merges = merges.rename(columns={"digests_before": "param_digests_before",
                                        "digests_after": "param_digests_after"})
        merges = merges.drop(columns=["type"], errors="ignore")
    steps = _frame(trainer.steps, ["step", "start_s", "end_s", "loss", "tokens"])
    signals = _frame(signal_rows, ["t_s", "queue_running", "queue_waiting", "scrape_ok"])
    for c in ("queue_running", "queue_waiting"):
        signals[c] = pd.to_numeric(signals[c], errors="coerce").astype(float)
    decisions = _frame(trainer.decisions, ["t_s", "step", "action", "score"])
    if len(decisions):
        decisions["score"] = pd.to_numeric(decisions["score"], errors="coerce").astype(float)
    lag = req["send_lag_s"].to_numpy(dtype=float)
    lag = lag[np.isfinite(lag)]
    p99 = float(np.quantile(lag, 0.99)) if lag.size else float("nan")
    effective.update({
        "send_lag_p50_s": float(np.quantile(lag, 0.5)) if lag.size else None,
        "send_lag_p99_s": p99, "send_lag_max_s": float(lag.max()) if lag.size else None,
        "client_keeps_up": bool(lag.size == 0 or p99 <= float(cfg["max_send_lag_p99_s"])),
        "requests_failed": int((~req["ok"]).sum()),
        "merges": int(len(merges)), "inner_steps": int(len(steps)),
        "scrapes": int(len(signals)),
        "scrapes_ok": int(signals["scrape_ok"].sum()) if len(signals) else 0,
    })
    if len(merges):
        effective["merge_duration_mean_s"] = float(merges["duration_s"].mean())
    if not effective["client_keeps_up"]:
        notes.append(f"client could not keep up: p99 send lag {p99 * 1e3:.1f} ms > "
                     f"{float(cfg['max_send_lag_p99_s']) * 1e3:.0f} ms")
        if error is None and p99 > float(cfg["send_lag_fail_s"]):
            error = f"client fell behind the trace: p99 send lag {p99:.2f} s"
    if cfg["step_period_s"] is not None:
        if trainer.pacing is None:
            error = error or "the paced trainer reported no clock record"
        else:
            effective["pacing"] = dict(trainer.pacing)
            error = error or missed_tick_error(int(trainer.pacing["ticks"]),
                                               int(trainer.pacing["missed_ticks"]),
                                               float(cfg["max_missed_share"]))
    step_s = float(np.median(steps["end_s"] - steps["start_s"])) if len(steps) else None
    return RunOutput(requests=req, merges=merges, steps=steps, signals=signals,
                     decisions=decisions, effective=effective,
                     rng_seeds={"trainer": int(spec.seed), "policy": policy_seed(spec),
                                "prompts": int(spec.seed), "sidecar_weights": 12345},
                     inner_step_s=step_s, complete=error is None, error=error, notes=notes)
