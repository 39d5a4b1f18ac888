"""Campaign files (TOML) and the job plan they expand to.

A campaign (see ``examples/*.toml``)::

    regime = "bursty"               # runs are only compared within one regime
    seeds = 10                      # or a list [0, 1, ...]
    matched_random_draws = 5        # per (policy, seed)
    horizon_s = 600.0
    merge_duration_s = 8.0
    inner_step_s = 0.5              # converts the corridor (steps) to seconds
    h_min = 128
    h_max = 512
    [slo]      e2e_s = ..., ttft_s = ..., tpot_s = ...
    [trace]    generator = "square_wave" + its parameters, prompt_tokens/output_tokens specs
               | path = "..." (+ format, start_s, end_s, time_scale, seed_stride_s: seed s
                 replays [start_s, end_s] shifted by s x seed_stride_s, its own realisation)
    [backend]  name = "sim"; [backend.config] ... backend settings
               sim_params = "twin.toml"  (sim: a fitted twin, path relative to this file;
               [backend.config] overrides it)
    [[policies]] name = "...", label = "...", params = {...}, draws = N
               name: a built-in, an ``evalkit.policies`` entry point or package.module:Class;
               label defaults to the policy class's ``name``
    [design]   kind = "fixed" (default) | "sequential", max_seeds, batch (sequential only)

:func:`plan_campaign` expands it into :class:`Job` s with dependencies: per seed a no-sync run;
each policy run (``calibrated_offline`` also needs the no-sync run's request intervals and,
with ``k_from``, the K of another policy's run); then the matched-random draws of each policy
run, whose K is that run's observed K.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from evalkit import limits as L
from evalkit.errors import InputError, from_os_error
from evalkit.fileread import read_text_bounded
from evalkit.replay.policies import RESERVED, get_policy, resolve_policy
from evalkit.replay.spec import ReplaySpec

TOP_KEYS = {"regime", "description", "seeds", "matched_random_draws", "horizon_s",
            "merge_duration_s", "inner_step_s", "h_min", "h_max", "min_gap_s", "max_gap_s",
            "slo", "trace", "backend", "policies", "design"}
DESIGN_KEYS = {"kind", "max_seeds", "batch"}
DESIGN_KINDS = ("fixed", "sequential")
SLO_KEYS = {"e2e_s", "ttft_s", "tpot_s"}
TRACE_FILE_KEYS = {"path", "format", "start_s", "end_s", "time_scale", "name", "sort",
                   "seed_stride_s"}
TRACE_GEN_KEYS = {"generator", "prompt_tokens", "output_tokens", "name"}
BACKEND_KEYS = {"name", "config", "sim_params"}
POLICY_KEYS = {"name", "label", "params", "draws"}
_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class PolicyEntry:
    label: str
    name: str
    params: dict
    draws: int


@dataclass
class Campaign:
    path: Path | None
    regime: str
    seeds: list[int]
    draws: int
    horizon_s: float
    merge_duration_s: float
    inner_step_s: float
    h_min: int
    h_max: int
    min_gap_s: float | None
    max_gap_s: float | None
    slo: dict
    trace: dict
    backend: str
    backend_config: dict
    policies: list[PolicyEntry]
    text: str = ""
    description: str = ""
    design: dict = field(default_factory=lambda: {"kind": "fixed", "max_seeds": None,
                                                  "batch": None})
    plan_sha256: str | None = None   # set by the sweep: the runs directory's plan

    def spec(self, run_id: str, seed: int, **kw) -> ReplaySpec:
        return ReplaySpec(run_id=run_id, seed=seed, regime=self.regime, backend=self.backend,
                          merge_duration_s=self.merge_duration_s, horizon_s=self.horizon_s,
                          inner_step_s=self.inner_step_s, h_min=self.h_min, h_max=self.h_max,
                          min_gap_s=self.min_gap_s, max_gap_s=self.max_gap_s,
                          slo=dict(self.slo), backend_config=dict(self.backend_config), **kw)

    def fingerprint(self) -> str:
        """Hash of everything that shapes a run (not the file's path or comments)."""
        payload = {k: getattr(self, k) for k in (
            "regime", "horizon_s", "merge_duration_s", "inner_step_s", "h_min", "h_max",
            "min_gap_s", "max_gap_s", "slo", "trace", "backend", "backend_config")}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                              ).hexdigest()[:16]


@dataclass
class Job:
    run_id: str
    kind: str                       # "no_sync" | "policy" | "matched_random"
    seed: int
    policy: PolicyEntry | None = None
    draw: int | None = None
    depends_on: list[str] = field(default_factory=list)
    k_from_run: str | None = None   # run whose observed K this job needs
    intervals_from_run: str | None = None   # no-sync run whose request intervals it needs
    order: dict | None = None       # its execution slot (evalkit.replay.run_order), for run.json


# ----------------------------------------------------------------------------- parsing

def _line_of(text: str, key: str) -> int | None:
    pat = re.compile(rf"^\s*(\[+\s*)?{re.escape(key)}\s*(=|\]|\.)", re.M)
    m = pat.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _err(path, text, key, message, fix, *, where=None):
    line = _line_of(text, key)
    loc = f" (line {line})" if line else ""
    return InputError(f"{message}{loc}", file=str(path) if path else None,
                      column=f"{where}.{key}" if where else key, fix=fix)


def _unknown(path, text, table: dict, valid: set, where: str | None):
    for key in table:
        if key not in valid:
            raise _err(path, text, key, f"unknown key {key!r}"
                       + (f" in [{where}]" if where else ""),
                       f"valid keys: {', '.join(sorted(valid))}", where=where)


def _num(path, text, table, key, *, kind=float, default=None, positive=True, where=None):
    if key not in table:
        if default is None:
            raise _err(path, text, key, f"missing required key {key!r}",
                       f"add {key} = <number>", where=where)
        return default
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and
                                                                 not float(v).is_integer()):
        raise _err(path, text, key, f"{key} must be {'an integer' if kind is int else 'a number'}"
                   f", got {v!r}", f"write {key} = <number>", where=where)
    if not math.isfinite(v):
        raise _err(path, text, key, f"{key} must be a finite number, got {v}",
                   f"write {key} = <number>", where=where)
    if positive and not v > 0:
        raise _err(path, text, key, f"{key} must be > 0, got {v}", f"use {key} > 0",
                   where=where)
    return kind(v)


def _bounded(path, text, key, value, lo, hi, *, where=None):
    """``value`` within ``[lo, hi]`` or an InputError naming the key and the allowed range."""
    if not lo <= value <= hi:
        raise _err(path, text, key, f"{key} = {value:,} is out of range",
                   L.range_fix(lo, hi), where=where)
    return value


def load_campaign(path) -> Campaign:
    path = Path(path)
    if not path.exists():
        raise InputError("campaign file not found", file=str(path), fix="check the path")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise from_os_error(exc, path=str(path), action="cannot read the campaign") from None
    if size > L.MAX_CONFIG_BYTES:
        raise InputError(f"campaign file is {size:,} bytes", file=str(path),
                         fix=f"campaign files are limited to {L.MAX_CONFIG_BYTES:,} bytes")
    # a FIFO or device is refused; the bound is on bytes read, not the size stat reports
    text = read_text_bounded(path, L.MAX_CONFIG_BYTES, "campaign file",
                             action="cannot read the campaign",
                             fix=f"campaign files are limited to {L.MAX_CONFIG_BYTES:,} bytes")
    try:
        data = L.loads_toml(text, file=str(path))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML: {exc}", file=str(path),
                         fix="fix the syntax at the line given") from None
    return parse_campaign(data, path=path, text=text)


def parse_campaign(data: dict, *, path: Path | None = None, text: str = "") -> Campaign:
    L.check_structure(data, file=str(path) if path else None)
    _unknown(path, text, data, TOP_KEYS, None)
    regime = data.get("regime")
    if not isinstance(regime, str) or not _LABEL.fullmatch(regime) \
            or len(regime) > L.MAX_LABEL_CHARS:
        raise _err(path, text, "regime", f"regime must be a plain name of at most "
                   f"{L.MAX_LABEL_CHARS} characters, got {_short(regime)}",
                   'write regime = "bursty" (letters, digits, _ . -)')
    seeds = data.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 0:
        _bounded(path, text, "seeds", seeds, 1, L.MAX_SEEDS)
        seeds = list(range(seeds))
    elif isinstance(seeds, list):
        _bounded(path, text, "seeds", len(seeds), 1, L.MAX_SEEDS)
        for s in seeds:
            if isinstance(s, int) and not isinstance(s, bool):
                _bounded(path, text, "seeds", s, 0, L.MAX_SEED_VALUE)
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise _err(path, text, "seeds", f"seeds must be a count or a list of distinct "
                   f"non-negative integers, got {seeds!r}", "write seeds = 10 or [0, 1, 2]")
    draws = _num(path, text, data, "matched_random_draws", kind=int, default=5, positive=False)
    _bounded(path, text, "matched_random_draws", draws, 0, L.MAX_DRAWS)
    horizon = _num(path, text, data, "horizon_s")
    _bounded(path, text, "horizon_s", horizon, 0, L.MAX_HORIZON_S)
    D = _num(path, text, data, "merge_duration_s", default=8.0)
    step = _num(path, text, data, "inner_step_s", default=0.5)
    h_min = _num(path, text, data, "h_min", kind=int, default=128)
    h_max = _num(path, text, data, "h_max", kind=int, default=512)
    min_gap = _num(path, text, data, "min_gap_s") if "min_gap_s" in data else None
    max_gap = _num(path, text, data, "max_gap_s") if "max_gap_s" in data else None

    slo = data.get("slo", {})
    if not isinstance(slo, dict):
        raise _err(path, text, "slo", "[slo] must be a table", "write [slo] e2e_s = 10.0")
    _unknown(path, text, slo, SLO_KEYS, "slo")
    slo_out = {"e2e_s": _num(path, text, slo, "e2e_s", where="slo"),
               "ttft_s": _num(path, text, slo, "ttft_s", where="slo") if "ttft_s" in slo else None,
               "tpot_s": _num(path, text, slo, "tpot_s", where="slo") if "tpot_s" in slo else None}

    trace = data.get("trace")
    if not isinstance(trace, dict):
        raise _err(path, text, "trace", "missing [trace] table",
                   'add [trace] with generator = "..." or path = "..."')
    trace = _parse_trace(trace, path, text, horizon)

    backend = data.get("backend", {"name": "sim"})
    if not isinstance(backend, dict):
        raise _err(path, text, "backend", "[backend] must be a table", 'write [backend] name = "sim"')
    _unknown(path, text, backend, BACKEND_KEYS, "backend")
    backend_name = backend.get("name", "sim")
    from evalkit.replay.runner import BACKENDS
    if backend_name not in BACKENDS:
        raise _err(path, text, "name", f"unknown backend {backend_name!r}",
                   f"use one of {', '.join(BACKENDS)}", where="backend")
    backend_config = backend.get("config", {})
    if "sim_params" in backend:
        backend_config = _twin_config(path, text, backend, backend_name, backend_config)
    if backend_name == "sim":
        from evalkit.replay.backends.sim.model import SimConfig
        try:
            SimConfig.from_dict(backend_config)
        except InputError as exc:
            raise _err(path, text, exc.column or "config", exc.message, exc.fix,
                       where="backend.config") from None

    raw_policies = data.get("policies")
    if not isinstance(raw_policies, list) or not raw_policies:
        raise _err(path, text, "policies", "no [[policies]] given",
                   'add [[policies]] name = "fixed_h" ...')
    _bounded(path, text, "policies", len(raw_policies), 1, L.MAX_POLICIES)
    policies, labels = [], set()
    for entry in raw_policies:
        if not isinstance(entry, dict):
            raise _err(path, text, "policies", "each policy must be a table",
                       'write [[policies]] name = "wa"')
        _unknown(path, text, entry, POLICY_KEYS, "policies")
        name = entry.get("name")
        if name in RESERVED:
            raise _err(path, text, "name", f"reserved policy {name!r} (no_sync and "
                       "matched_random runs are added automatically)",
                       "name a policy to evaluate (evalkit policies list)", where="policies")
        try:
            cls = resolve_policy(name)
        except InputError as exc:
            raise _err(path, text, "name", exc.message, exc.fix, where="policies") from None
        label = entry.get("label", cls.name)
        if not isinstance(label, str) or not _LABEL.fullmatch(label) or label in labels \
                or label in ("no_sync",) or label.startswith("mr-") \
                or len(label) > L.MAX_LABEL_CHARS:
            raise _err(path, text, "label", f"policy label {_short(label)} is invalid or "
                       "repeated", f"give each policy a unique plain label of at most "
                       f"{L.MAX_LABEL_CHARS} characters", where="policies")
        labels.add(label)
        params = entry.get("params", {})
        if not isinstance(params, dict):
            raise _err(path, text, "params", "params must be a table",
                       "write params = { H = 256 }", where="policies")
        try:
            get_policy(name, **params)
        except InputError as exc:
            raise _err(path, text, exc.column or "params", exc.message, exc.fix,
                       where=f"policies.{label}") from None
        n_draws = _num(path, text, entry, "draws", kind=int, default=draws, positive=False) \
            if "draws" in entry else draws
        _bounded(path, text, "draws", n_draws, 0, L.MAX_DRAWS, where="policies")
        policies.append(PolicyEntry(label, name, dict(params), n_draws))
    n_jobs = len(seeds) * (1 + len(policies) + sum(p.draws for p in policies))
    if n_jobs > L.MAX_JOBS:
        raise _err(path, text, "seeds", f"the campaign plans {n_jobs:,} runs (seeds x "
                   "(no-sync + policies + draws))",
                   f"at most {L.MAX_JOBS:,} runs per campaign: fewer seeds or draws, or "
                   "split it into several campaigns")
    for pe in policies:
        k_from = pe.params.get("k_from")
        if k_from is not None and k_from not in labels - {pe.label}:
            raise _err(path, text, "k_from", f"policy {pe.label!r}: k_from={k_from!r} is not "
                       "another policy of this campaign",
                       f"use one of {', '.join(sorted(labels - {pe.label}))}",
                       where="policies.params")
        if pe.name == "calibrated_offline" and k_from is None and pe.params.get("k") is None:
            raise _err(path, text, "k_from", f"policy {pe.label!r} needs K",
                       "set params = { k_from = \"wa\" } or { k = 3 }", where="policies.params")
    design = _parse_design(data.get("design"), path, text, len(seeds))
    camp = Campaign(path=path, regime=regime, seeds=seeds, draws=draws, horizon_s=horizon,
                    merge_duration_s=D, inner_step_s=step, h_min=h_min, h_max=h_max,
                    min_gap_s=min_gap, max_gap_s=max_gap, slo=slo_out, trace=trace,
                    backend=backend_name, backend_config=dict(backend_config),
                    policies=policies, text=text, description=str(data.get("description", "")),
                    design=design)
    from evalkit.replay.runner import check_spec
    check_spec(camp.spec("check", 0), source=str(path) if path else None)
    return camp


def _parse_design(table, path, text, n_seeds: int) -> dict:
    """``[design]``: kind = "fixed" (default: every planned seed is run, then tested once) or
    "sequential" (seeds in batches until decided, at most max_seeds)."""
    if table is None:
        return {"kind": "fixed", "max_seeds": None, "batch": None}
    if not isinstance(table, dict):
        raise _err(path, text, "design", "[design] must be a table",
                   'write [design] kind = "fixed"')
    _unknown(path, text, table, DESIGN_KEYS, "design")
    kind = table.get("kind", "fixed")
    if kind not in DESIGN_KINDS:
        raise _err(path, text, "kind", f"design kind must be 'fixed' or 'sequential', got "
                   f"{_short(kind)}", 'write kind = "fixed" or kind = "sequential"',
                   where="design")
    if kind == "fixed":
        extra = sorted(set(table) & {"max_seeds", "batch"})
        if extra:
            raise _err(path, text, extra[0], f"{extra[0]} applies to sequential designs only",
                       f'remove {extra[0]} or write kind = "sequential"', where="design")
        return {"kind": "fixed", "max_seeds": None, "batch": None}
    max_seeds = _num(path, text, table, "max_seeds", kind=int, default=n_seeds, where="design")
    _bounded(path, text, "max_seeds", max_seeds, 2, n_seeds, where="design")
    batch = _num(path, text, table, "batch", kind=int, default=1, where="design")
    _bounded(path, text, "batch", batch, 1, max_seeds, where="design")
    return {"kind": "sequential", "max_seeds": max_seeds, "batch": batch}


def _twin_config(path, text, backend: dict, backend_name: str, config: dict) -> dict:
    """``[backend] sim_params``: the twin's settings under ``config``, with its sha256."""
    from evalkit.replay.backends.sim.twin import twin_backend_config

    twin = backend["sim_params"]
    if backend_name != "sim" or not isinstance(twin, str):
        raise _err(path, text, "sim_params", "sim_params must be a twin file path and needs "
                   f"the sim backend (backend is {backend_name!r})",
                   'write [backend] name = "sim" and sim_params = "twin.toml"', where="backend")
    twin_path = Path(twin)
    if not twin_path.is_absolute() and path is not None:
        twin_path = Path(path).parent / twin_path
    try:
        return twin_backend_config(twin_path, config)
    except InputError as exc:
        raise _err(path, text, "sim_params", f"{exc.message} ({twin_path})", exc.fix,
                   where="backend") from None


def _parse_trace(trace: dict, path, text, horizon) -> dict:
    if ("generator" in trace) == ("path" in trace):
        raise _err(path, text, "trace", "[trace] needs exactly one of generator = ... or "
                   "path = ...", "pick a generator or a trace file")
    if "path" in trace:
        _unknown(path, text, trace, TRACE_FILE_KEYS, "trace")
        return dict(trace)
    from evalkit.replay.traces.generate import ARRIVALS, KIND_ALIASES
    kind = trace["generator"]
    # the spellings evalkit.replay.traces.generate() accepts ("square-wave", "mmpp_bursts")
    key = kind.replace("-", "_") if isinstance(kind, str) else kind
    key = KIND_ALIASES.get(key, key) if isinstance(key, str) else key
    if key not in ARRIVALS:
        raise _err(path, text, "generator", f"unknown trace generator {kind!r}",
                   f"use one of {', '.join(ARRIVALS)}", where="trace")
    out = dict(trace)
    out["generator"] = key          # canonical, so equivalent spellings fingerprint alike
    out.setdefault("duration_s", horizon)
    _check_trace_size(out, path, text)
    return out


def _check_trace_size(spec: dict, path, text) -> None:
    """Reject generator settings whose trace could not fit in memory (before generating)."""
    def num(key):
        v = spec.get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return float(v) if ok else None

    duration = num("duration_s")
    if duration is None or duration <= 0:
        return
    rates = [r for r in (num("rate"), num("busy_rate"), num("quiet_rate")) if r is not None]
    if rates and max(rates) * duration > L.MAX_TRACE_REQUESTS:
        raise _err(path, text, "rate", f"the trace would hold about {max(rates) * duration:,.0f} "
                   "requests", f"at most {L.MAX_TRACE_REQUESTS:,} requests per generated "
                   "trace: lower the rate or the duration", where="trace")
    for key in ("period_s", "mean_quiet_s", "mean_burst_s"):
        step = num(key)
        if step is not None and step > 0 and duration / step > L.MAX_TRACE_REQUESTS:
            raise _err(path, text, key, f"{key} = {step:g} cuts the trace into "
                       f"{duration / step:,.0f} segments", f"raise {key}", where="trace")


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


# ----------------------------------------------------------------------------- planning

def run_ids(regime: str, label: str, seed: int, draw: int | None = None) -> str:
    if label == "no_sync":
        return f"{regime}__no_sync__s{seed}"
    if draw is None:
        return f"{regime}__{label}__s{seed}"
    return f"{regime}__mr-{label}__s{seed}__d{draw}"


def plan_campaign(camp: Campaign) -> list[Job]:
    """All jobs, in an order that respects dependencies (references before their draws)."""
    jobs: list[Job] = []
    by_label = {p.label: p for p in camp.policies}
    for seed in camp.seeds:
        ns = run_ids(camp.regime, "no_sync", seed)
        jobs.append(Job(ns, "no_sync", seed))
        order = sorted(camp.policies, key=lambda p: p.params.get("k_from") is not None)
        for pe in order:
            rid = run_ids(camp.regime, pe.label, seed)
            deps, k_from_run, intervals = [], None, None
            if resolve_policy(pe.name).oracle:      # sees the no-sync run's intervals
                intervals = ns
                deps.append(ns)
            k_from = pe.params.get("k_from")
            if k_from is not None:
                k_from_run = run_ids(camp.regime, by_label[k_from].label, seed)
                deps.append(k_from_run)
            jobs.append(Job(rid, "policy", seed, pe, depends_on=deps, k_from_run=k_from_run,
                            intervals_from_run=intervals))
        for pe in camp.policies:
            ref = run_ids(camp.regime, pe.label, seed)
            for d in range(pe.draws):
                jobs.append(Job(run_ids(camp.regime, pe.label, seed, d), "matched_random",
                                seed, pe, draw=d, depends_on=[ref], k_from_run=ref,
                                intervals_from_run=None))
    return jobs


# ----------------------------------------------------------------------------- shards

@dataclass(frozen=True)
class Shard:
    index: int              # 0-based, as Slurm's SLURM_ARRAY_TASK_ID with --array=0-(N-1)
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` with 0 <= I < N; anything else is an InputError naming ``--shard``."""
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", str(text))
    fix = "write --shard I/N with 0 <= I < N, e.g. --shard 0/8 ... --shard 7/8 " \
          "(Slurm: --shard ${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT} with --array=0-7)"
    if not m:
        raise InputError(f"malformed shard spec {text!r}", column="--shard", fix=fix)
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise InputError(f"shard count must be >= 1, got {n}", column="--shard", fix=fix)
    if not 0 <= i < n:
        raise InputError(f"shard index {i} is out of range for {n} shards (indices are "
                         f"0..{n - 1})", column="--shard", fix=fix)
    return Shard(i, n)


def dependency_groups(jobs: list[Job]) -> list[list[Job]]:
    """Jobs joined by dependencies (in plan order), groups ordered by their first job.

    A policy run and its matched-random draws form one group; a ``calibrated_offline`` run
    joins the group of the no-sync run and the policy run it takes K from (same seed).
    """
    parent = {j.run_id: j.run_id for j in jobs}

    def root(r: str) -> str:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for j in jobs:
        for d in j.depends_on:
            if d in parent:
                a, b = root(j.run_id), root(d)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[str, list[Job]] = {}
    for j in jobs:
        groups.setdefault(root(j.run_id), []).append(j)
    return list(groups.values())


def _stable_key(run_id: str) -> str:
    return hashlib.sha256(run_id.encode()).hexdigest()


def shard_jobs(jobs: list[Job], shard: Shard) -> list[Job]:
    """The jobs of one shard: a deterministic partition of the plan by dependency group.

    Each group (see :func:`dependency_groups`) goes whole to one shard, so every
    matched-random draw runs in the same shard as its reference run, after it.  Groups are
    dealt largest first (ties broken by a hash of the group's first run id) to the shard
    with the fewest jobs so far (ties: lowest index), so shards are balanced and the
    assignment depends only on the campaign.  Plan order is kept within the shard.
    """
    groups = dependency_groups(jobs)
    order = sorted(groups, key=lambda g: (-len(g), _stable_key(g[0].run_id)))
    load = [0] * shard.count
    mine: set[str] = set()
    for g in order:
        target = min(range(shard.count), key=lambda s: (load[s], s))
        load[target] += len(g)
        if target == shard.index:
            mine.update(j.run_id for j in g)
    return [j for j in jobs if j.run_id in mine]
