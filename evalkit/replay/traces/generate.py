"""Seeded synthetic traces: arrival processes and token-length distributions.

Arrival generators take ``rng`` (a ``numpy.random.Generator`` or an int seed) or
``seed`` and return sorted arrival times, shape (n,), in ``[0, duration_s)``.  :func:`generate`
combines one of them with a length model and returns a :class:`Trace` whose
``meta`` records every parameter.  It draws arrivals and lengths from two
independent streams (``SeedSequence(seed).spawn(2)``), so changing the length
model never changes the arrival times.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.replay import portable_math
from evalkit.replay.traces.model import Trace


def as_rng(rng=None, seed=None) -> np.random.Generator:
    """A Generator from ``rng`` (Generator or int seed) or ``seed``; one is required."""
    if rng is not None and seed is not None:
        raise InputError("give rng or seed, not both", column="seed", fix="drop one of them")
    rng = seed if rng is None else rng
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        raise InputError("a seed or numpy Generator is required", column="seed",
                         fix="pass seed=<int> (runs must be reproducible)")
    return np.random.default_rng(rng)


def _positive(name: str, value, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"must be a number, got {value!r}", column=name,
                         fix=f"set {name}") from None
    ok = v >= 0 if allow_zero else v > 0
    if not (ok and np.isfinite(v)):
        bound = ">= 0" if allow_zero else "> 0"
        raise InputError(f"must be finite and {bound}, got {value!r}", column=name,
                         fix=f"set {name} {bound}")
    return v


# ----------------------------------------------------------------------------- arrivals

def _renewal(rate: float, shape: float, rng, *, duration_s: float | None = None,
             n: int | None = None) -> np.ndarray:
    """Renewal process with gamma(shape, 1/(rate*shape)) gaps, cut at duration_s or n events."""
    scale = 1.0 / (rate * shape)
    if n is not None:
        return np.cumsum(rng.gamma(shape, scale, size=n))
    chunks, t = [], 0.0
    expected = rate * duration_s
    size = int(expected + 6 * np.sqrt(expected) + 16)
    while t < duration_s:
        times = t + np.cumsum(rng.gamma(shape, scale, size=size))
        chunks.append(times)
        t = float(times[-1])
        size = max(16, size // 4)
    times = np.concatenate(chunks)
    return times[times < duration_s]


def poisson(rate: float, duration_s: float, *, rng=None, seed=None) -> np.ndarray:
    """Homogeneous Poisson arrivals (identical to ``gamma_arrivals`` with burstiness 1)."""
    return gamma_arrivals(rate, duration_s, 1.0, rng=as_rng(rng, seed))


def gamma_arrivals(rate: float, duration_s: float, burstiness: float = 1.0, *, rng=None,
                   seed=None) -> np.ndarray:
    """vLLM's bursty arrivals: gamma gaps with shape b, scale 1/(rate*b); CV² of gaps = 1/b."""
    rate = _positive("rate", rate)
    duration_s = _positive("duration_s", duration_s)
    b = _positive("burstiness", burstiness)
    return _renewal(rate, b, as_rng(rng, seed), duration_s=duration_s)


def piecewise_poisson(edges, rates, rng) -> np.ndarray:
    """Poisson arrivals, rate ``rates[i]`` on ``[edges[i], edges[i+1])``; shapes (k+1,), (k,)."""
    rng = as_rng(rng)
    edges = np.asarray(edges, dtype=np.float64)
    rates = np.asarray(rates, dtype=np.float64)
    lengths = np.diff(edges)
    counts = rng.poisson(rates * lengths)
    starts = np.repeat(edges[:-1], counts)
    spans = np.repeat(lengths, counts)
    return np.sort(starts + rng.random(int(counts.sum())) * spans)


def square_wave(period_s: float, burst_s: float, quiet_rate: float, busy_rate: float,
                duration_s: float, phase_s: float = 0.0, *, rng=None, seed=None) -> np.ndarray:
    """Periodic bursts: ``busy_rate`` on ``[phase + k*period, phase + k*period + burst)``."""
    period_s = _positive("period_s", period_s)
    burst_s = _positive("burst_s", burst_s)
    quiet_rate = _positive("quiet_rate", quiet_rate, allow_zero=True)
    busy_rate = _positive("busy_rate", busy_rate, allow_zero=True)
    duration_s = _positive("duration_s", duration_s)
    if burst_s > period_s:
        raise InputError(f"burst_s={burst_s} is longer than period_s={period_s}",
                         column="burst_s", fix="use burst_s <= period_s")
    edges, rates = square_wave_schedule(period_s, burst_s, quiet_rate, busy_rate,
                                        duration_s, float(phase_s))
    return piecewise_poisson(edges, rates, as_rng(rng, seed))


def square_wave_schedule(period_s, burst_s, quiet_rate, busy_rate, duration_s, phase_s=0.0):
    """Edges (k+1,) and rates (k,) of the square wave on [0, duration_s]."""
    first = np.floor(-phase_s / period_s) - 1
    ks = np.arange(first, np.ceil((duration_s - phase_s) / period_s) + 1)
    starts = phase_s + ks * period_s
    cuts = np.sort(np.concatenate([starts, starts + burst_s, [0.0, duration_s]]))
    cuts = np.unique(np.clip(cuts, 0.0, duration_s))
    mids = (cuts[:-1] + cuts[1:]) / 2
    busy = np.mod(mids - phase_s, period_s) < burst_s
    return cuts, np.where(busy, busy_rate, quiet_rate)


def mmpp_bursts(quiet_rate: float, busy_rate: float, mean_quiet_s: float, mean_burst_s: float,
                duration_s: float, *, rng=None, seed=None,
                details: dict | None = None) -> np.ndarray:
    """Non-periodic bursts: a two-state Markov-modulated Poisson process.

    Dwell times are exponential (means ``mean_quiet_s`` and ``mean_burst_s``), so burst
    onsets and lengths are random; the initial state is drawn from the stationary
    distribution.  If ``details`` is a dict it receives the burst windows ``[[start, end], ...]``.
    """
    quiet_rate = _positive("quiet_rate", quiet_rate, allow_zero=True)
    busy_rate = _positive("busy_rate", busy_rate, allow_zero=True)
    mean_quiet_s = _positive("mean_quiet_s", mean_quiet_s)
    mean_burst_s = _positive("mean_burst_s", mean_burst_s)
    duration_s = _positive("duration_s", duration_s)
    rng = as_rng(rng, seed)
    busy = bool(rng.random() < mean_burst_s / (mean_quiet_s + mean_burst_s))
    edges, states, t = [0.0], [], 0.0
    while t < duration_s:
        t = min(duration_s, t + rng.exponential(mean_burst_s if busy else mean_quiet_s))
        edges.append(t)
        states.append(busy)
        busy = not busy
    states = np.array(states)
    edges = np.array(edges)
    if details is not None:
        details["bursts"] = [[float(a), float(b)] for a, b, s
                             in zip(edges[:-1], edges[1:], states) if s]
    return piecewise_poisson(edges, np.where(states, busy_rate, quiet_rate), rng)


ARRIVALS = {
    "poisson": poisson,
    "gamma": gamma_arrivals,
    "square_wave": square_wave,
    "mmpp": mmpp_bursts,
}
KIND_ALIASES = {"gamma_arrivals": "gamma", "mmpp_bursts": "mmpp", "square": "square_wave"}


# ----------------------------------------------------------------------------- lengths

@dataclass(frozen=True)
class Fixed:
    value: int

    def sample(self, n: int, rng=None) -> np.ndarray:
        return np.full(n, int(self.value), dtype=np.int64)

    def describe(self) -> dict:
        return {"dist": "fixed", "value": int(self.value)}


@dataclass(frozen=True)
class LogNormal:
    """round(median * exp(N(0, sigma))), clipped to [min, max] (the exponential is
    :func:`evalkit.replay.portable_math.exp`, the same on every CPU)."""
    median: float
    sigma: float
    min: int = 1
    max: int | None = None

    def sample(self, n: int, rng) -> np.ndarray:
        rng = as_rng(rng)
        x = np.rint(self.median * portable_math.exp(rng.normal(0.0, self.sigma, size=n)))
        hi = np.inf if self.max is None else self.max
        return np.clip(x, self.min, hi).astype(np.int64)

    def describe(self) -> dict:
        return {"dist": "lognormal", "median": float(self.median), "sigma": float(self.sigma),
                "min": int(self.min), "max": None if self.max is None else int(self.max),
                "out_of_range": "clipped"}


@dataclass(frozen=True)
class Resample:
    """Draw with replacement from observed values, shape (m,)."""
    values: np.ndarray
    source: str = ""

    def sample(self, n: int, rng) -> np.ndarray:
        return as_rng(rng).choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)

    def describe(self) -> dict:
        return {"dist": "resample", "source": self.source, "pool_size": int(len(self.values))}


@dataclass(frozen=True)
class Lengths:
    """Independent prompt and output length distributions."""
    prompt: object
    output: object

    def sample(self, n: int, rng):
        rng = as_rng(rng)
        return self.prompt.sample(n, rng), self.output.sample(n, rng)

    def describe(self) -> dict:
        return {"prompt": self.prompt.describe(), "output": self.output.describe()}


@dataclass(frozen=True)
class JointResample:
    """Draw (prompt, output) pairs together from a trace, keeping their correlation."""
    prompt: np.ndarray
    output: np.ndarray
    source: str = ""

    def sample(self, n: int, rng):
        idx = as_rng(rng).integers(0, len(self.prompt), size=n)
        return (np.asarray(self.prompt, dtype=np.int64)[idx],
                np.asarray(self.output, dtype=np.int64)[idx])

    def describe(self) -> dict:
        return {"dist": "joint_resample", "source": self.source, "pool_size": int(len(self.prompt))}


def fixed(value: int) -> Fixed:
    v = _positive("value", value)
    if v != int(v):
        raise InputError(f"fixed length must be a whole number, got {value!r}", column="value",
                         fix="use an integer token count")
    return Fixed(int(v))


def lognormal(median: float, sigma: float, min: int = 1, max: int | None = None) -> LogNormal:
    median = _positive("median", median)
    sigma = _positive("sigma", sigma, allow_zero=True)
    if max is not None and max < min:
        raise InputError(f"max={max} < min={min}", column="max", fix="use max >= min")
    return LogNormal(median, sigma, int(min), None if max is None else int(max))


def resample(trace: Trace, column: str | None = None):
    """Joint (prompt, output) resampling from ``trace``, or one column's marginal."""
    source = f"{trace.name} sha256={trace.sha256[:12]}"
    if column is None:
        return JointResample(trace.requests["prompt_tokens"].to_numpy(),
                             trace.requests["output_tokens"].to_numpy(), source)
    if column not in ("prompt_tokens", "output_tokens"):
        raise InputError(f"cannot resample {column!r}", column=column,
                         fix="use 'prompt_tokens' or 'output_tokens'")
    return Resample(trace.requests[column].to_numpy(), f"{source} {column}")


# Chat-like defaults (an assumption, not a measurement: ~1k-token prompts, ~200-token
# answers); pass ``lengths=`` (e.g. resample(real_trace)) for anything that matters.
DEFAULT_LENGTHS = Lengths(prompt=LogNormal(1000.0, 1.0, 16, 8192),
                          output=LogNormal(200.0, 0.8, 1, 2048))


def parse_length(text: str, *, trace_loader=None):
    """Parse a CLI length spec: ``512``, ``fixed:512``, ``lognormal:MEDIAN,SIGMA[,MIN[,MAX]]``
    (or ``lognormal:median=..,sigma=..,min=..,max=..``), ``resample:TRACE.parquet:COLUMN``."""
    text = text.strip()
    kind, _, rest = text.partition(":")
    try:
        if not rest and kind.replace(".", "", 1).isdigit():
            return fixed(float(kind))
        if kind == "fixed":
            return fixed(float(rest))
        if kind == "lognormal":
            names = ["median", "sigma", "min", "max"]
            kw = {}
            for i, part in enumerate(p for p in rest.split(",") if p):
                key, eq, val = part.partition("=")
                key, val = (key.strip(), val) if eq else (names[i], key)
                if key not in names:
                    raise InputError(f"unknown lognormal parameter {key!r}", column=key,
                                     fix=f"use {', '.join(names)}")
                kw[key] = float(val) if key in ("median", "sigma") else int(float(val))
            return lognormal(**kw)
        if kind == "resample":
            path, _, column = rest.rpartition(":")
            if not path:
                raise ValueError
            return resample(trace_loader(path), column)
    except (ValueError, TypeError, IndexError):
        pass
    raise InputError(f"cannot parse length spec {text!r}", column="length",
                     fix="use 512, fixed:512, lognormal:MEDIAN,SIGMA[,MIN[,MAX]] or "
                         "resample:TRACE.parquet:prompt_tokens|output_tokens")


# ----------------------------------------------------------------------------- generate

def generate(kind: str, *, seed: int, lengths=None, name: str | None = None,
             **params) -> Trace:
    """A seeded synthetic trace.  ``kind`` is one of :data:`ARRIVALS`; ``params`` its arguments."""
    key = kind.replace("-", "_")
    key = KIND_ALIASES.get(key, key)
    if key not in ARRIVALS:
        raise InputError(f"unknown trace kind {kind!r}", column="kind",
                         fix=f"use one of {', '.join(ARRIVALS)}")
    fn = ARRIVALS[key]
    sig = inspect.signature(fn)
    accepted = [p for p in sig.parameters if p not in ("rng", "seed", "details")]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise InputError(f"unknown parameter(s) {unknown} for kind {key!r}", column=unknown[0],
                         fix=f"valid parameters: {', '.join(accepted)}")
    missing = [p for p in accepted if sig.parameters[p].default is inspect.Parameter.empty
               and p not in params]
    if missing:
        raise InputError(f"missing parameter(s) {missing} for kind {key!r}", column=missing[0],
                         fix=f"valid parameters: {', '.join(accepted)}")
    if seed is None or isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}", column="seed",
                         fix="pass --seed N")
    lengths = DEFAULT_LENGTHS if lengths is None else lengths
    if not hasattr(lengths, "sample") or not hasattr(lengths, "describe"):
        raise InputError("lengths must be a length model (Lengths, JointResample or resample())",
                         column="lengths", fix="e.g. Lengths(fixed(512), lognormal(128, 0.8))")
    if isinstance(lengths, (Fixed, LogNormal, Resample)):
        lengths = Lengths(lengths, lengths)
    arrivals_rng, lengths_rng = (np.random.default_rng(s)
                                 for s in np.random.SeedSequence(int(seed)).spawn(2))
    details: dict = {}
    extra = {"details": details} if "details" in sig.parameters else {}
    arrival = fn(**params, rng=arrivals_rng, **extra)
    if len(arrival) == 0:
        raise InputError(f"{key} with {params} produced no requests", column="duration_s",
                         fix="raise the rate or the duration")
    prompt, output = lengths.sample(len(arrival), lengths_rng)
    full = {p: sig.parameters[p].default for p in accepted
            if sig.parameters[p].default is not inspect.Parameter.empty}
    full.update(params)
    meta = {"source": "generated", "generator": key, "params": full, "seed": int(seed),
            "lengths": lengths.describe(), "window_s": float(full["duration_s"]),
            "rng": "numpy PCG64, SeedSequence(seed).spawn(2) -> [arrivals, lengths]"}
    meta.update(details)
    return Trace.from_arrays(arrival, prompt, output, meta=meta,
                             name=name or f"{key}-seed{int(seed)}")
