"""Open-loop replay client and metrics scraper (the same code talks to the sidecar and vLLM).

Every request is sent at ``t0 + arrival_s`` whatever happened to earlier ones.  Times are
``time.monotonic()`` seconds minus ``t0``.  Failed and timed-out requests are kept with
``ok = False`` and the error text.  The sidecar (``evalkit serve``) ends each streamed choice
with its own ``server_timing`` (queue, prefill, decode, total seconds); the client records them
as the ``server_*_s`` request columns (null when the server sent none, e.g. vLLM).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from evalkit.runlog.schema import SERVER_TIMING_COLUMNS

PROMPT_TOKEN_LOW, PROMPT_TOKEN_HIGH = 100, 500     # ids valid in any real vocabulary


@dataclass
class Record:
    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    sent_s: float = float("nan")
    first_token_s: float | None = None
    end_s: float | None = None
    tokens_received: int = 0
    ok: bool = False
    error: str | None = None
    token_times: list = field(default_factory=list)
    server_timing: dict = field(default_factory=dict)   # the sidecar's own phases of it


def request_bodies(requests: pd.DataFrame, model: str, seed: int, *,
                   max_prompt_tokens: int | None) -> tuple[list[bytes], int]:
    """JSON bodies built before the clock starts (no encoding work at send time).

    Returns the bodies and how many prompts were truncated to ``max_prompt_tokens``.
    """
    bodies, truncated = [], 0
    for rid, p, o in requests[["request_id", "prompt_tokens", "output_tokens"]].itertuples(
            index=False):
        n = int(p)
        if max_prompt_tokens is not None and n > max_prompt_tokens:
            n, truncated = int(max_prompt_tokens), truncated + 1
        rng = np.random.default_rng([int(seed), int(rid)])
        ids = rng.integers(PROMPT_TOKEN_LOW, PROMPT_TOKEN_HIGH, size=max(n, 1)).tolist()
        bodies.append(json.dumps({
            "model": model, "prompt": ids, "max_tokens": int(o), "min_tokens": int(o),
            "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}).encode())
    return bodies, truncated


async def _one(session, url: str, body: bytes, rec: Record, t0: float, timeout_s: float):
    rec.sent_s = time.monotonic() - t0
    done = False
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, data=body,
                                    headers={"Content-Type": "application/json"}) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    rec.error = f"HTTP {resp.status}: {text}"
                    return
                usage_tokens = None
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        break
                    now = time.monotonic() - t0
                    msg = json.loads(payload)
                    if "error" in msg:
                        rec.error = f"server error: {msg['error']}"
                        return
                    if msg.get("usage"):
                        usage_tokens = msg["usage"].get("completion_tokens")
                    if isinstance(msg.get("server_timing"), dict):
                        rec.server_timing = msg["server_timing"]
                    for ch in msg.get("choices") or ():
                        if ch.get("text") or ch.get("finish_reason") is None:
                            if rec.first_token_s is None:
                                rec.first_token_s = now
                            rec.token_times.append(now)
                            rec.tokens_received += 1
        end = time.monotonic() - t0
        if not done:
            rec.error = "stream ended without [DONE]"
            return
        if usage_tokens is not None:
            rec.tokens_received = int(usage_tokens)
        if rec.tokens_received < rec.output_tokens:
            rec.error = f"short output: {rec.tokens_received} of {rec.output_tokens} tokens"
            return
        rec.end_s, rec.ok = end, True
    except TimeoutError:
        rec.error = f"timeout after {timeout_s:g} s"
    except asyncio.CancelledError:
        rec.error = rec.error or "aborted: run stopped"
        raise
    except Exception as exc:  # connection refused/reset, bad JSON: a failed request
        rec.error = f"{type(exc).__name__}: {exc}"[:300]


def make_records(requests: pd.DataFrame) -> list[Record]:
    return [Record(int(r), float(a), int(p), int(o)) for r, a, p, o in
            requests[["request_id", "arrival_s", "prompt_tokens", "output_tokens"]].itertuples(
                index=False)]


async def open_loop(session, base_url: str, recs: list[Record], bodies: list[bytes],
                    t0: float, *, timeout_s: float, on_send=None) -> list[Record]:
    """Send every request at its scheduled time, filling ``recs`` (one per request).

    Cancelling this coroutine cancels in-flight requests; their records say so.
    """
    url = base_url.rstrip("/") + "/v1/completions"
    tasks = []
    try:
        for rec, body in zip(recs, bodies):
            delay = t0 + rec.arrival_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(session, url, body, rec, t0, timeout_s)))
            if on_send is not None:
                on_send(rec)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for rec in recs:
            if rec.sent_s != rec.sent_s and rec.error is None:   # never sent
                rec.error = "aborted before send"
                rec.sent_s = rec.arrival_s
    return recs


def records_frame(recs: list[Record], *, token_times: bool = True) -> pd.DataFrame:
    """requests-table rows (+ tokens_received, tpot_s, itl_max_s, token_times extras)."""
    rows = []
    for r in recs:
        tt = np.asarray(r.token_times, dtype=float)
        itl = np.diff(tt) if tt.size > 1 else np.empty(0)
        row = {"request_id": r.request_id, "arrival_s": r.arrival_s, "sent_s": r.sent_s,
               "first_token_s": r.first_token_s, "end_s": r.end_s if r.ok else None,
               "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
               "ok": bool(r.ok), "error": r.error, "tokens_received": r.tokens_received,
               "send_lag_s": r.sent_s - r.arrival_s,
               "tpot_s": float(itl.mean()) if itl.size else None,
               "itl_max_s": float(itl.max()) if itl.size else None}
        for key, col in SERVER_TIMING_COLUMNS.items():
            row[col] = _seconds(r.server_timing.get(key))
        if token_times:
            row["token_times"] = [float(x) for x in tt]
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in ("first_token_s", "end_s", "tpot_s", "itl_max_s",
                *SERVER_TIMING_COLUMNS.values()):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df


def _seconds(value) -> float | None:
    """A server-reported duration, or None when it is absent or not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if np.isfinite(value) else None


def parse_prometheus(text: str, names=("vllm:num_requests_running",
                                       "vllm:num_requests_waiting")) -> dict:
    """Sum each named metric over its label sets; a name that is absent is missing."""
    out: dict = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0].strip()
        if name in names:
            try:
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return out


async def scrape_loop(session, metrics_url: str, t0: float, interval_s: float, state,
                      rows: list) -> None:
    """Poll ``metrics_url`` until cancelled; update ``state`` and append signal rows."""
    from aiohttp import ClientTimeout
    while True:
        t_req = time.monotonic()
        ok, running, waiting, err = False, None, None, None
        try:
            async with session.get(metrics_url, timeout=ClientTimeout(total=2.0)) as resp:
                vals = parse_prometheus(await resp.text())
            running = vals.get("vllm:num_requests_running")
            waiting = vals.get("vllm:num_requests_waiting")
            ok = running is not None and waiting is not None
            if not ok:
                err = "metrics lack vllm:num_requests_running/waiting"
        except Exception as exc:
            err = f"{type(exc).__name__}: {exc}"[:200]
        now = time.monotonic()
        if ok:
            state.update_queue(int(running), int(waiting))
        rows.append({"t_s": now - t0, "queue_running": running, "queue_waiting": waiting,
                     "scrape_ok": ok, "scrape_latency_s": now - t_req,
                     "arrivals_seen": state.n_arrivals(), "error": err})
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - t_req)))
