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
import re
from dataclasses import dataclass, field
from pathlib import Path

from evalkit import limits as L
from evalkit.config import ConfigDoc, ConfigTable, read_config
from evalkit.errors import InputError
from evalkit.replay.backends.sim.model import SimConfig
from evalkit.replay.backends.sim.twin import twin_backend_config
from evalkit.policies import RESERVED, get_policy, resolve_policy
from evalkit.replay.runner import BACKENDS, check_spec
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces.generate import ARRIVALS, KIND_ALIASES
from evalkit.runlog.execution_order import dependencies, shard_members
from evalkit.stats.group_sequential import FUTILITY, check_spending

TOP_KEYS = {"regime", "description", "seeds", "matched_random_draws", "horizon_s",
            "merge_duration_s", "inner_step_s", "h_min", "h_max", "min_gap_s", "max_gap_s",
            "slo", "trace", "backend", "policies", "design"}
DESIGN_KEYS = {"kind", "max_seeds", "batch", "first_look", "spending", "gamma", "futility"}
DESIGN_KINDS = ("fixed", "sequential")
SLO_KEYS = {"e2e_s", "ttft_s", "tpot_s"}
TRACE_FILE_KEYS = {"path", "format", "start_s", "end_s", "time_scale", "name", "sort",
                   "seed_stride_s"}
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
    # set by the sweep for a plan frozen under a challenge: run_id -> its derived RNG seed
    policy_seeds: dict | None = None
    # set by the sweep for a plan frozen under a challenge: the commitment the order seed
    # derives from (evalkit.runlog.execution_order.order_seed_of)
    order_commitment: str | None = None

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

def _unknown(table: ConfigTable, valid: set) -> None:
    where = f" in [{table.prefix}]" if table.prefix else ""
    table.no_unknown(valid, message=lambda key: f"unknown key {key!r}{where}",
                     fix=lambda keys: f"valid keys: {', '.join(keys)}")


def load_campaign(path) -> Campaign:
    path = Path(path)
    # the one reader refuses a FIFO or device and bounds the bytes read
    doc = read_config(path, what="campaign file", action="cannot read the campaign",
                      missing_fix="check the path", syntax_message="malformed TOML",
                      syntax_fix="fix the syntax at the line given")
    return parse_campaign(doc.data, path=path, text=doc.text)


def parse_campaign(data: dict, *, path: Path | None = None, text: str = "") -> Campaign:
    L.check_structure(data, file=str(path) if path else None)
    top = ConfigDoc(data=data, text=text, file=str(path) if path else None).table()
    _unknown(top, TOP_KEYS)
    regime = data.get("regime")
    if not isinstance(regime, str) or not _LABEL.fullmatch(regime) \
            or len(regime) > L.MAX_LABEL_CHARS:
        raise top.error("regime", f"regime must be a plain name of at most "
                        f"{L.MAX_LABEL_CHARS} characters, got {_short(regime)}",
                        'write regime = "bursty" (letters, digits, _ . -)')
    seeds = data.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 0:
        top.bounded("seeds", seeds, 1, L.MAX_SEEDS)
        seeds = list(range(seeds))
    elif isinstance(seeds, list):
        top.bounded("seeds", len(seeds), 1, L.MAX_SEEDS)
        for s in seeds:
            if isinstance(s, int) and not isinstance(s, bool):
                top.bounded("seeds", s, 0, L.MAX_SEED_VALUE)
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise top.error("seeds", f"seeds must be a count or a list of distinct "
                        f"non-negative integers, got {seeds!r}", "write seeds = 10 or [0, 1, 2]")
    draws = top.number("matched_random_draws", kind=int, default=5, positive=False)
    top.bounded("matched_random_draws", draws, 0, L.MAX_DRAWS)
    horizon = top.number("horizon_s")
    top.bounded("horizon_s", horizon, 0, L.MAX_HORIZON_S)
    D = top.number("merge_duration_s", default=8.0)
    step = top.number("inner_step_s", default=0.5)
    h_min = top.number("h_min", kind=int, default=128)
    h_max = top.number("h_max", kind=int, default=512)
    min_gap = top.number("min_gap_s") if "min_gap_s" in data else None
    max_gap = top.number("max_gap_s") if "max_gap_s" in data else None

    slo = data.get("slo", {})
    if not isinstance(slo, dict):
        raise top.error("slo", "[slo] must be a table", "write [slo] e2e_s = 10.0")
    st = top.sub("slo", slo)
    _unknown(st, SLO_KEYS)
    slo_out = {"e2e_s": st.number("e2e_s"),
               "ttft_s": st.number("ttft_s") if "ttft_s" in slo else None,
               "tpot_s": st.number("tpot_s") if "tpot_s" in slo else None}

    trace = data.get("trace")
    if not isinstance(trace, dict):
        raise top.error("trace", "missing [trace] table",
                        'add [trace] with generator = "..." or path = "..."')
    trace = _parse_trace(top, top.sub("trace", trace), horizon)

    backend = data.get("backend", {"name": "sim"})
    if not isinstance(backend, dict):
        raise top.error("backend", "[backend] must be a table", 'write [backend] name = "sim"')
    bt = top.sub("backend", backend)
    _unknown(bt, BACKEND_KEYS)
    backend_name = backend.get("name", "sim")
    if backend_name not in BACKENDS:
        raise bt.error("name", f"unknown backend {backend_name!r}",
                       f"use one of {', '.join(BACKENDS)}")
    backend_config = backend.get("config", {})
    if "sim_params" in backend:
        backend_config = _twin_config(bt, path, backend_name, backend_config)
    if backend_name == "sim":
        try:
            SimConfig.from_dict(backend_config)
        except InputError as exc:
            raise bt.sub("config", backend_config if isinstance(backend_config, dict) else {}
                         ).error(exc.column or "config", exc.message, exc.fix) from None

    raw_policies = data.get("policies")
    if not isinstance(raw_policies, list) or not raw_policies:
        raise top.error("policies", "no [[policies]] given",
                        'add [[policies]] name = "fixed_h" ...')
    top.bounded("policies", len(raw_policies), 1, L.MAX_POLICIES)
    policies, labels, tables = [], set(), []
    for i, entry in enumerate(raw_policies):
        if not isinstance(entry, dict):
            raise top.error("policies", "each policy must be a table",
                            'write [[policies]] name = "wa"')
        pt = top.sub("policies", entry, index=i)
        _unknown(pt, POLICY_KEYS)
        name = entry.get("name")
        if name in RESERVED:
            raise pt.error("name", f"reserved policy {name!r} (no_sync and "
                           "matched_random runs are added automatically)",
                           "name a policy to evaluate (evalkit policies list)")
        try:
            cls = resolve_policy(name)
        except InputError as exc:
            raise pt.error("name", exc.message, exc.fix) from None
        label = entry.get("label", cls.name)
        if not isinstance(label, str) or not _LABEL.fullmatch(label) or label in labels \
                or label in ("no_sync",) or label.startswith("mr-") \
                or len(label) > L.MAX_LABEL_CHARS:
            raise pt.error("label", f"policy label {_short(label)} is invalid or "
                           "repeated", f"give each policy a unique plain label of at most "
                           f"{L.MAX_LABEL_CHARS} characters")
        labels.add(label)
        params = entry.get("params", {})
        if not isinstance(params, dict):
            raise pt.error("params", "params must be a table", "write params = { H = 256 }")
        try:
            get_policy(name, **params)
        except InputError as exc:
            raised = ConfigTable(pt.doc, params, f"policies.{label}", f"policies[{i}].params")
            raise raised.error(exc.column or "params", exc.message, exc.fix) from None
        n_draws = pt.number("draws", kind=int, default=draws, positive=False) \
            if "draws" in entry else draws
        pt.bounded("draws", n_draws, 0, L.MAX_DRAWS)
        policies.append(PolicyEntry(label, name, dict(params), n_draws))
        tables.append(pt.sub("params", params))
    n_jobs = len(seeds) * (1 + len(policies) + sum(p.draws for p in policies))
    if n_jobs > L.MAX_JOBS:
        raise top.error("seeds", f"the campaign plans {n_jobs:,} runs (seeds x "
                        "(no-sync + policies + draws))",
                        f"at most {L.MAX_JOBS:,} runs per campaign: fewer seeds or draws, or "
                        "split it into several campaigns")
    for pe, params_table in zip(policies, tables):
        k_from = pe.params.get("k_from")
        if k_from is not None and k_from not in labels - {pe.label}:
            raise params_table.error("k_from", f"policy {pe.label!r}: k_from={k_from!r} is "
                                     "not another policy of this campaign",
                                     f"use one of {', '.join(sorted(labels - {pe.label}))}")
        if pe.name == "calibrated_offline" and k_from is None and pe.params.get("k") is None:
            raise params_table.error("k_from", f"policy {pe.label!r} needs K",
                                     "set params = { k_from = \"wa\" } or { k = 3 }")
    design = _parse_design(top, data.get("design"), len(seeds))
    camp = Campaign(path=path, regime=regime, seeds=seeds, draws=draws, horizon_s=horizon,
                    merge_duration_s=D, inner_step_s=step, h_min=h_min, h_max=h_max,
                    min_gap_s=min_gap, max_gap_s=max_gap, slo=slo_out, trace=trace,
                    backend=backend_name, backend_config=dict(backend_config),
                    policies=policies, text=text, description=str(data.get("description", "")),
                    design=design)
    check_spec(camp.spec("check", 0), source=str(path) if path else None)
    return camp


def _parse_design(top: ConfigTable, table, n_seeds: int) -> dict:
    """``[design]``: kind = "fixed" (default: every planned seed is run, then tested once) or
    "sequential" (seeds in batches until decided, at most max_seeds; looks after every
    ``batch`` seeds, or from ``first_look`` seeds on and then every ``batch``; ``futility``:
    "zero", the default, or "rising", :mod:`evalkit.stats.group_sequential`)."""
    if table is None:
        return {"kind": "fixed", "max_seeds": None, "batch": None}
    if not isinstance(table, dict):
        raise top.error("design", "[design] must be a table", 'write [design] kind = "fixed"')
    dt = top.sub("design", table)
    _unknown(dt, DESIGN_KEYS)
    kind = table.get("kind", "fixed")
    if kind not in DESIGN_KINDS:
        raise dt.error("kind", f"design kind must be 'fixed' or 'sequential', got "
                       f"{_short(kind)}", 'write kind = "fixed" or kind = "sequential"')
    if kind == "fixed":
        extra = sorted(set(table) & (DESIGN_KEYS - {"kind"}))
        if extra:
            raise dt.error(extra[0], f"{extra[0]} applies to sequential designs only",
                           f'remove {extra[0]} or write kind = "sequential"')
        return {"kind": "fixed", "max_seeds": None, "batch": None}
    max_seeds = dt.number("max_seeds", kind=int, default=n_seeds)
    dt.bounded("max_seeds", max_seeds, 2, n_seeds)
    batch = dt.number("batch", kind=int, default=1)
    dt.bounded("batch", batch, 1, max_seeds)
    first_look = None
    if "first_look" in table:
        first_look = dt.number("first_look", kind=int)
        dt.bounded("first_look", first_look, 2, max_seeds)
    spending = table.get("spending", "obrien-fleming")
    try:
        spending, gamma = check_spending(spending, table.get("gamma"))
    except InputError as err:
        raise dt.error(err.column, err.message, err.fix) from None
    design = {"kind": "sequential", "max_seeds": max_seeds, "batch": batch,
              "spending": spending, "gamma": gamma if spending != "obrien-fleming" else None}
    if "futility" in table:
        if table["futility"] not in FUTILITY:
            raise dt.error("futility", f"unknown futility rule {_short(table['futility'])}",
                           f"write futility = one of {', '.join(map(repr, FUTILITY))} (or "
                           "leave it out: \"zero\")")
        design["futility"] = table["futility"]
    return design if first_look is None else {**design, "first_look": first_look}


def _twin_config(bt: ConfigTable, path, backend_name: str, config: dict) -> dict:
    """``[backend] sim_params``: the twin's settings under ``config``, with its sha256."""

    twin = bt.data["sim_params"]
    if backend_name != "sim" or not isinstance(twin, str):
        raise bt.error("sim_params", "sim_params must be a twin file path and needs "
                       f"the sim backend (backend is {backend_name!r})",
                       'write [backend] name = "sim" and sim_params = "twin.toml"')
    twin_path = Path(twin)
    if not twin_path.is_absolute() and path is not None:
        twin_path = Path(path).parent / twin_path
    try:
        return twin_backend_config(twin_path, config)
    except InputError as exc:
        raise bt.error("sim_params", f"{exc.message} ({twin_path})", exc.fix) from None


def _parse_trace(top: ConfigTable, tt: ConfigTable, horizon) -> dict:
    trace = tt.data
    if ("generator" in trace) == ("path" in trace):
        raise top.error("trace", "[trace] needs exactly one of generator = ... or "
                        "path = ...", "pick a generator or a trace file")
    if "path" in trace:
        _unknown(tt, TRACE_FILE_KEYS)
        return dict(trace)
    kind = trace["generator"]
    # the spellings evalkit.replay.traces.generate() accepts ("square-wave", "mmpp_bursts")
    key = kind.replace("-", "_") if isinstance(kind, str) else kind
    key = KIND_ALIASES.get(key, key) if isinstance(key, str) else key
    if key not in ARRIVALS:
        raise tt.error("generator", f"unknown trace generator {kind!r}",
                       f"use one of {', '.join(ARRIVALS)}")
    out = dict(trace)
    out["generator"] = key          # canonical, so equivalent spellings fingerprint alike
    out.setdefault("duration_s", horizon)
    _check_trace_size(out, tt)
    return out


def _check_trace_size(spec: dict, tt: ConfigTable) -> None:
    """Reject generator settings whose trace could not fit in memory (before generating)."""
    def num(key):
        return float(spec[key]) if L.finite(spec.get(key)) else None

    duration = num("duration_s")
    if duration is None or duration <= 0:
        return
    rates = [r for r in (num("rate"), num("busy_rate"), num("quiet_rate")) if r is not None]
    if rates and max(rates) * duration > L.MAX_TRACE_REQUESTS:
        raise tt.error("rate", f"the trace would hold about {max(rates) * duration:,.0f} "
                       "requests", f"at most {L.MAX_TRACE_REQUESTS:,} requests per generated "
                       "trace: lower the rate or the duration")
    for key in ("period_s", "mean_quiet_s", "mean_burst_s"):
        step = num(key)
        if step is not None and step > 0 and duration / step > L.MAX_TRACE_REQUESTS:
            raise tt.error(key, f"{key} = {step:g} cuts the trace into "
                           f"{duration / step:,.0f} segments", f"raise {key}")


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

    def run_id(role: str, label: str, seed: int) -> str:
        return run_ids(camp.regime, label, seed)
    for seed in camp.seeds:
        ns = run_ids(camp.regime, "no_sync", seed)
        jobs.append(Job(ns, "no_sync", seed))
        order = sorted(camp.policies, key=lambda p: p.params.get("k_from") is not None)
        for pe in order:
            rid = run_ids(camp.regime, pe.label, seed)
            oracle = resolve_policy(pe.name).oracle      # sees the no-sync run's intervals
            k_from = pe.params.get("k_from")
            k_from = by_label[k_from].label if k_from is not None else None
            jobs.append(Job(rid, "policy", seed, pe,
                            depends_on=dependencies("policy", seed, run_id, oracle=oracle,
                                                    k_from=k_from),
                            k_from_run=run_id("policy", k_from, seed) if k_from else None,
                            intervals_from_run=ns if oracle else None))
        for pe in camp.policies:
            ref = run_ids(camp.regime, pe.label, seed)
            for d in range(pe.draws):
                jobs.append(Job(run_ids(camp.regime, pe.label, seed, d), "matched_random",
                                seed, pe, draw=d,
                                depends_on=dependencies("matched_random", seed, run_id,
                                                        matched_to=pe.label),
                                k_from_run=ref, intervals_from_run=None))
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


def shard_jobs(jobs: list[Job], shard: Shard) -> list[Job]:
    """The jobs of one shard, by the rule the audit regenerates
    (:func:`evalkit.runlog.execution_order.shard_members`)."""
    return shard_members(jobs, shard.index, shard.count)
