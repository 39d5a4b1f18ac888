"""Configuration of the simulated server + co-located trainer, with the source of each default.

Serving model: an iteration-level continuous-batching engine shaped like vLLM serving
Qwen2.5-1.5B on one H200.

* ``max_batch = 128`` running sequences (vLLM ``max_num_seqs`` defaults to 256; halved
  because the GPU is shared with a trainer).
* ``prefill_budget_tokens = 2048`` prompt tokens per iteration (vLLM's chunked-prefill
  ``max_num_batched_tokens`` default of 2048); a larger admission takes several iterations.
* ``kv_capacity_tokens = 262144``: Qwen2.5-1.5B keeps 28 layers × 2 KV heads × 128 dims ×
  (K, V) × 2 bytes = 28 KiB per token, so 262k tokens are 7 GiB of KV cache — what is left
  on a GPU that also holds a 0.5B trainer.  Requests reserve prompt + output at admission
  (no preemption); a request larger than the cache fails.
* iteration time = slowdown × (``iter_base_s`` + ``decode_per_seq_s`` × running +
  ``prefill_per_token_s`` × prefill tokens).  A 1.5B model reads ~3 GB of weights per decode
  step (0.7 ms at 4.8 TB/s) and vLLM's scheduler adds a few ms: 6 ms base, 30 µs per running
  sequence (KV reads) — inter-token latencies of 6–10 ms, as vLLM reports for small models
  on Hopper.  Prefill ≈ 2·1.5e9 FLOP per token at ~120 TFLOP/s effective: 25 µs per token.

Trainer and interference (real H200 measurements, Qwen2.5-1.5B-shaped server next to a
0.5B-shaped trainer — the only measured constants here):

* co-located inner training raised serving p50 by 46 % → ``train_slowdown = 1.46`` while the
  trainer computes (all the time except merges; identical in the no-sync run, so load
  matching holds);
* host-staged merges (5.1–6.2 s) added no measurable excess latency →
  ``merge_extra["host"] = 1.0`` (the merge slows serving as much as training did);
* a GPU-side merge (8.6–8.8 s) raised p95 of overlapping requests from 8.7 s to 11.2 s
  (+29 %); requests overlapping a window are slowed for only part of their life, so the
  full-overlap factor is larger: ``merge_extra["gpu"] = 1.45`` (an assumption fitted by eye
  to that +29 %, not a measurement);
* ``merge_extra["network"] = 1.1``: assumed (no measurement; NCCL traffic on a shared NIC
  mainly delays host-side work).

``inner_step_s`` comes from the replay spec (0.5 s default); each step draws ±2 % lognormal
jitter.  Loss follows ``2.2 + 2.8·(1 + step/300)^-0.5`` plus N(0, 0.01) noise, 4096 tokens
per step — a shape, not a measurement, feeding the WA progress term.

Settings a fitted twin (``evalkit sim fit``, :mod:`evalkit.replay.backends.sim.twin`) sets;
each is off by default, so a run without a twin is exactly the model above:

* ``prefill_base_s``: fixed cost of an iteration that admits requests (an extra prefill
  forward, as in a server that runs prefill and decode as separate passes);
* ``prefill_pass``: such an iteration is a prefill pass followed by a decode pass, so the
  admitted requests get their first token after the prefill part and their second at the
  end of the iteration (the torch sidecar; vLLM without chunked prefill) — by default the
  first token comes at the end of the admission iteration (chunked prefill);
* ``merge_slowdown``: slowdown during a merge relative to an idle server, replacing the
  mechanism product ``train_slowdown × Π merge_extra`` (a value below ``train_slowdown``
  means a merge disturbs serving *less* than inner training does);
* ``merge_duration_quantiles``: merge durations drawn per merge by inverse CDF from these
  evenly spaced quantiles (probabilities 0, 1/(m−1), …, 1) instead of the fixed D;
* ``send_lag_quantiles``: the client's send lag (sent − scheduled arrival), likewise,
  instead of the uniform ``send_jitter_s``;
* ``response_overhead_s``: added to every first-token and end time (transport and client
  overhead that the engine model does not see);
* ``step_s``: the trainer's inner-step time, instead of the replay spec's nominal one;
* ``twin_sha256``, ``twin_name``: provenance, recorded in run.json's settings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from evalkit.errors import InputError

MECHANISMS = ("gpu", "host", "network")


@dataclass
class SimConfig:
    max_batch: int = 128
    prefill_budget_tokens: int = 2048
    kv_capacity_tokens: int = 262_144
    iter_base_s: float = 0.006
    decode_per_seq_s: float = 3e-5
    prefill_per_token_s: float = 2.5e-5
    train_colocated: bool = True
    train_slowdown: float = 1.46
    merge_mechanisms: list = field(default_factory=lambda: ["gpu"])
    merge_extra: dict = field(default_factory=lambda: {"gpu": 1.45, "host": 1.0,
                                                       "network": 1.1})
    step_jitter_cv: float = 0.02
    send_jitter_s: float = 0.0005
    tokens_per_step: int = 4096
    merge_bytes: int = 494_032_768 * 4       # fp32 pseudo-gradient of a 0.5B model
    drain_limit_s: float = 3600.0            # requests unfinished this long after the horizon fail
    prefill_base_s: float = 0.0
    prefill_pass: bool = False
    merge_slowdown: float | None = None
    merge_duration_quantiles: list | None = None
    send_lag_quantiles: list | None = None
    response_overhead_s: float = 0.0
    step_s: float | None = None
    twin_sha256: str | None = None
    twin_name: str | None = None

    @classmethod
    def from_dict(cls, cfg: dict | None, *, source: str | None = None) -> "SimConfig":
        cfg = dict(cfg or {})
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(cfg) - set(names))
        if unknown:
            raise InputError(f"unknown sim backend setting(s) {unknown}", file=source,
                             column=unknown[0], fix=f"valid settings: {', '.join(names)}")
        out = cls()
        for key, value in cfg.items():
            if key == "merge_extra":
                merged = dict(out.merge_extra)
                merged.update(value)
                value = merged
            setattr(out, key, value)
        out.check(source)
        return out

    def check(self, source=None) -> None:
        mech = self.merge_mechanisms
        if isinstance(mech, str):
            self.merge_mechanisms = mech = [mech]
        bad = [m for m in list(mech) + list(self.merge_extra) if m not in MECHANISMS]
        if bad:
            raise InputError(f"unknown merge mechanism {bad[0]!r}", file=source,
                             column="merge_mechanisms", fix=f"use any of {', '.join(MECHANISMS)}")
        positive = ("max_batch", "prefill_budget_tokens", "kv_capacity_tokens", "iter_base_s",
                    "train_slowdown", "drain_limit_s")
        for name in positive:
            if not float(getattr(self, name)) > 0:
                raise InputError(f"{name} must be > 0", file=source, column=name,
                                 fix=f"set {name} to a positive value")
        for name in ("decode_per_seq_s", "prefill_per_token_s", "step_jitter_cv",
                     "send_jitter_s", "prefill_base_s", "response_overhead_s"):
            if float(getattr(self, name)) < 0:
                raise InputError(f"{name} must be >= 0", file=source, column=name,
                                 fix=f"set {name} >= 0")
        for name in ("merge_slowdown", "step_s"):
            value = getattr(self, name)
            if value is not None and not float(value) > 0:
                raise InputError(f"{name} must be > 0", file=source, column=name,
                                 fix=f"set {name} to a positive value or leave it unset")
        for name in ("merge_duration_quantiles", "send_lag_quantiles"):
            _check_quantiles(getattr(self, name), name, source,
                             positive=name == "merge_duration_quantiles")

    def slowdowns(self) -> tuple[float, float]:
        """(factor while training, factor during a merge)."""
        base = self.train_slowdown if self.train_colocated else 1.0
        if self.merge_slowdown is not None:
            return base, float(self.merge_slowdown)
        extra = 1.0
        for m in self.merge_mechanisms:
            extra *= float(self.merge_extra[m])
        return base, base * extra

    def as_dict(self) -> dict:
        return asdict(self)


def _check_quantiles(values, name: str, source, *, positive: bool) -> None:
    """An inverse CDF on an even probability grid: >= 2 finite, non-decreasing values >= 0."""
    if values is None:
        return
    fix = f"give {name} as >= 2 non-decreasing numbers (quantiles at 0, 1/(m-1), ..., 1)"
    try:
        vals = [float(v) for v in values]
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a list of numbers", file=source, column=name,
                         fix=fix) from None
    ok = (len(vals) >= 2 and all(math.isfinite(v) and v >= 0 for v in vals)
          and all(b >= a for a, b in zip(vals, vals[1:])) and (not positive or vals[0] > 0))
    if not ok:
        raise InputError(f"{name} is not a valid quantile list: {vals[:6]}", file=source,
                         column=name, fix=fix)


def inverse_cdf(quantiles, u):
    """Values at probabilities ``u`` (array in [0, 1]) of the evenly spaced ``quantiles``."""
    q = np.asarray(quantiles, dtype=float)
    return np.interp(np.asarray(u, dtype=float), np.linspace(0.0, 1.0, q.size), q)
