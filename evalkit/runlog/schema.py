"""The evalkit run-log format, version 1: the one machine-readable source of the format.

The specification for readers and for other harnesses is ``FORMAT.md`` beside this file;
its key and column tables, ``schemas/run.schema.json`` (JSON Schema of run.json) and
``schemas/<table>.arrow.json`` (the Arrow schema of each Parquet table) are generated from
the definitions here by :mod:`evalkit.runlog.export` (``python -m evalkit.runlog.export``);
a test regenerates them and compares.  The invariants ``evalkit validate`` checks, with
their error codes, are in :mod:`evalkit.runlog.codes`.

One directory per run::

    <run_id>/
        run.json            metadata (:data:`META_KEYS`); ``complete`` is written last
        requests.parquet    one row per request of the replayed trace
        merges.parquet      one row per outer merge (sync window) the trainer performed
        steps.parquet       optional: trainer inner steps
        signals.parquet     optional: time series the policy observed
        decisions.parquet   optional: every policy decision (time, step, action, score)

Times are seconds from the run's time origin (``t = 0`` is when the replay clock started;
the first request need not arrive at 0).  ``arrival_s`` is the *scheduled* (open-loop) arrival
of a request; latency is always measured from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalkit.errors import InputError
from evalkit.limits import capped_name

__all__ = ["ARROW_TYPES", "BACKENDS", "MERGES_COLUMNS", "META_KEYS", "OPTIONAL_COLUMNS",
           "REQUIRED_META", "REQUIRED_TABLES", "ROLES", "RUN_ORDER_KEYS", "SCHEMA_VERSION",
           "SERVER_TIMING_COLUMNS", "SUPPORTED_SCHEMA_VERSIONS", "TABLES", "Column", "MetaKey", "Slo", "identity_problems",
           "is_number", "role_problem", "run_id", "short_repr"]

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)

ROLES = ("policy", "matched_random", "no_sync")
# the serving sidecar's per-request ``server_timing`` keys -> the request columns its client
# writes them to (optional columns below; real_sidecar holds them against the client)
SERVER_TIMING_COLUMNS = {"queue_s": "server_queue_s", "prefill_s": "server_prefill_s",
                         "decode_s": "server_decode_s", "total_s": "server_total_s"}
BACKENDS = ("sim", "torch", "vllm", "import")



@dataclass(frozen=True)
class KeyProblem:
    """A run.json value that breaks a rule of the format: the key, what is wrong, the fix."""

    key: str
    message: str
    fix: str


def short_repr(value, limit: int = 60) -> str:
    """repr of a value from a file, cut to ``limit`` characters (hostile values are huge)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 30:
        return f"a {len(str(abs(value)))}-digit integer"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def is_number(x) -> bool:
    """A finite JSON number (not a boolean)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive(x) -> bool:
    return is_number(x) and x > 0


@dataclass(frozen=True)
class Slo:
    """The service-level objectives of a run (run.json ``slo``), in seconds.

    A request violates the SLO when it misses any configured one (``ttft_s`` / ``tpot_s``
    None: not used); :func:`evalkit.runlog.metrics.violations` is that definition.
    """

    e2e_s: float
    ttft_s: float | None = None
    tpot_s: float | None = None

    KEYS = ("e2e_s", "ttft_s", "tpot_s")

    @staticmethod
    def check(value, key: str = "slo") -> list[KeyProblem]:
        """Every rule ``value`` (a run.json ``slo`` object, parsed) breaks; [] when valid."""
        if not isinstance(value, dict):
            return [KeyProblem(key, "must be an object {e2e_s, ttft_s, tpot_s}",
                               "write the SLOs in seconds")]
        out = []
        if not _positive(value.get("e2e_s")):
            out.append(KeyProblem(f"{key}.e2e_s", "must be a positive number of seconds, got "
                                  f"{short_repr(value.get('e2e_s'))}",
                                  "set the end-to-end SLO in seconds"))
        for sub in ("ttft_s", "tpot_s"):
            val = value.get(sub)
            if val is not None and not _positive(val):
                out.append(KeyProblem(f"{key}.{sub}", "must be null or a positive number of "
                                      f"seconds, got {short_repr(val)}",
                                      f"set {sub} in seconds or null when that SLO is not used"))
        return out

    @classmethod
    def from_dict(cls, value, key: str = "slo") -> "Slo":
        """The SLO of a run.json-style object, or an InputError naming the first bad key."""
        problems = cls.check(value, key)
        if problems:
            from_problem = problems[0]
            raise InputError(from_problem.message, column=from_problem.key, fix=from_problem.fix)
        return cls(float(value["e2e_s"]), _opt(value.get("ttft_s")), _opt(value.get("tpot_s")))

    def to_dict(self) -> dict:
        return {"e2e_s": self.e2e_s, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s}


def _opt(value) -> float | None:
    return None if value is None else float(value)


def role_problem(role) -> KeyProblem | None:
    """An unknown ``role``, or None."""
    if role in ROLES:
        return None
    return KeyProblem("role", f"unknown role {short_repr(role)}", f"use one of {', '.join(ROLES)}")


def identity_problems(meta) -> list[KeyProblem]:
    """How ``role``, ``draw``, ``matched_to``, ``policy`` and ``oracle`` of a run disagree.

    A matched_random run has a draw index and names the policy whose K it matches; no other
    role has either; a no_sync run's policy is ``no_sync`` and it is no oracle.  Keys absent
    from ``meta`` are not judged here (the required-key rule reports them).
    """
    out = []
    role = meta.get("role")
    if role == "matched_random":
        if meta.get("draw") is None:
            out.append(KeyProblem("draw", "a matched_random run needs its draw index",
                                  "set draw to 0, 1, ..."))
        if meta.get("matched_to") is None:
            out.append(KeyProblem("matched_to", "a matched_random run must name the policy "
                                  "whose K it matches", "set matched_to to that policy's name"))
    elif role in ROLES:
        for key in ("draw", "matched_to"):
            if meta.get(key) is not None:
                out.append(KeyProblem(key, f"only matched_random runs have {key}; this run's "
                                      f"role is {role!r}", f"set {key} to null or fix role"))
    if role == "no_sync" and "policy" in meta and meta["policy"] != "no_sync":
        out.append(KeyProblem("policy", f"role no_sync but policy {short_repr(meta['policy'])}",
                              "a no_sync run's policy is 'no_sync'"))
    if role in ("policy", "matched_random") and meta.get("policy") == "no_sync":
        out.append(KeyProblem("role", f"policy no_sync but role {role!r}",
                              "set role to 'no_sync'"))
    if role == "no_sync" and meta.get("oracle") is True:
        out.append(KeyProblem("oracle", "a no_sync run cannot be an oracle",
                              "set oracle to false"))
    return out


def run_id(regime: str, policy: str, seed: int, draw=None, *, sep: str = "__",
           role: str | None = None, matched_to: str | None = None) -> str:
    """The conventional run id, ``regime__policy__sSEED[__dDRAW]`` (``evalkit replay``).

    Importers pass ``sep="-"``, ``role`` and ``matched_to``, which appear when the policy
    does not imply them: ``regime-policy[-role][-matched_to]-sSEED[-dDRAW]``, unique over a
    campaign matrix.  ``/`` and spaces become ``_``, leading dots go, and the id is capped at
    200 bytes (:func:`evalkit.limits.capped_name`): it names a directory.
    """
    parts = [regime, policy]
    if role not in (None, "policy", policy):
        parts.append(role)
    if role == "matched_random" and matched_to not in (None, "", policy):
        parts.append(matched_to)
    parts.append(f"s{int(seed)}")
    if draw is not None:
        parts.append(f"d{int(draw)}")
    name = sep.join(str(p).replace("/", "_").replace(" ", "_") for p in parts)
    return capped_name(name.lstrip(".") or "run")


@dataclass(frozen=True)
class MetaKey:
    """One run.json key: JSON types (JSON Schema names), required, constraints, meaning.

    ``check`` is the value rule in words (it is what ``evalkit validate`` enforces, code
    M05); ``enum`` / ``minimum`` / ``exclusive_minimum`` / ``min_length`` say the same for
    the JSON Schema; ``keys`` are the sub-keys of an object.
    """

    name: str
    types: tuple[str, ...]
    required: bool
    doc: str
    unit: str | None = None
    check: str = ""
    enum: tuple | None = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    min_length: int | None = None
    keys: tuple["MetaKey", ...] = ()


def _pos_s(name, doc, required=True, nullable=False):
    return MetaKey(name, ("number", "null") if nullable else ("number",), required, doc, "s",
                   "null or > 0" if nullable else "> 0", exclusive_minimum=0)


def _text(name, doc, required=True, nullable=False, check="non-empty string"):
    return MetaKey(name, ("string", "null") if nullable else ("string",), required, doc,
                   check=("null or " + check) if nullable else check, min_length=1)


META_KEYS: tuple[MetaKey, ...] = (
    MetaKey("schema_version", ("integer",), True, "version of this format", check="one of "
            + ", ".join(map(str, SUPPORTED_SCHEMA_VERSIONS)), enum=SUPPORTED_SCHEMA_VERSIONS),
    _text("run_id", "unique name of the run", check="non-empty string equal to the "
          "directory name"),
    _text("policy", "scheduling policy (campaign label); 'no_sync' for the baseline"),
    MetaKey("role", ("string",), True, "what the run is in the comparison",
            check="one of " + ", ".join(ROLES), enum=ROLES),
    MetaKey("seed", ("integer",), True, "replication unit (trace realisation + backend "
            "randomness); runs of one seed are paired", check="64-bit integer"),
    MetaKey("draw", ("integer", "null"), True, "draw index of a matched-random run",
            check="integer >= 0 for matched_random, else null", minimum=0),
    MetaKey("matched_to", ("string", "null"), True, "the policy whose K a matched-random "
            "draw matches", check="policy name for matched_random, else null", min_length=1),
    _text("regime", "load / interference regime; runs are compared only within one"),
    MetaKey("trace", ("object",), True, "the replayed trace", check="object", keys=(
        _text("name", "trace name"),
        _text("sha256", "sha256 of the trace's content"))),
    MetaKey("backend", ("string",), True, "what produced the run",
            check="one of " + ", ".join(BACKENDS), enum=BACKENDS),
    MetaKey("slo", ("object",), True, "service-level objectives", check="object", keys=(
        _pos_s("e2e_s", "end-to-end latency SLO (from the scheduled arrival)"),
        _pos_s("ttft_s", "time-to-first-token SLO; null when not used", nullable=True),
        _pos_s("tpot_s", "time-per-output-token SLO; null when not used", nullable=True))),
    _pos_s("merge_duration_s", "nominal merge (sync window) duration D"),
    _pos_s("horizon_s", "end of the replay: the observed span ends at or before it"),
    MetaKey("corridor", ("object",), True, "allowed gaps between merge starts",
            check="object; min_gap_s <= max_gap_s", keys=(
                MetaKey("min_gap_s", ("number",), True, "least gap between merge starts", "s",
                        ">= 0", minimum=0),
                MetaKey("max_gap_s", ("number",), True, "largest gap between merge starts",
                        "s", ">= 0", minimum=0),
                MetaKey("h_min", ("integer",), False, "least inner steps between merges",
                        "steps"),
                MetaKey("h_max", ("integer",), False, "most inner steps between merges",
                        "steps"))),
    MetaKey("oracle", ("boolean",), True, "the policy saw future information",
            check="boolean; false for no_sync"),
    MetaKey("complete", ("boolean",), True, "the writer finished; incomplete runs are "
            "listed and never audited", check="boolean"),
    _text("evalkit_version", "version of the writer (another harness: its own name and "
          "version)", check="string"),
    _text("created_at", "ISO-8601 UTC time the run was written", check="string"),
    MetaKey("settings", ("object",), True, "{'requested': {...}, 'effective': {...}}: what "
            "was asked for and what ran (MLPerf-style)", check="object"),
    MetaKey("host", ("object",), True, "{'hostname', 'platform', 'python'} of the writer",
            check="object"),
    MetaKey("rng_seeds", ("object",), True, "{name: int}: the seed of every random "
            "generator used", check="object"),
    MetaKey("error", ("string", "null"), False, "why an incomplete run stopped (with the "
            "traceback of a failing backend or policy)"),
    _text("trace_realisation", "identifier of the request sequence; runs sharing it saw "
          "identical arrivals (default: trace.sha256)", required=False),
    MetaKey("inner_step_s", ("number",), False, "measured (or nominal) inner-step time", "s"),
    MetaKey("training_start_s", ("number", "null"), False, "when training started; the "
            "corridor's first gap is counted from it (default 0)", "s"),
    MetaKey("k_observed", ("integer",), False, "merges whose window lies in the observed "
            "span, as the writer counted them (readers recount from the tables)"),
    MetaKey("reference_run_id", ("string",), False, "run whose observed K this run used"),
    MetaKey("reference_k", ("integer",), False, "that K"),
    MetaKey("policy_params", ("object",), False, "every parameter of the policy"),
    MetaKey("policy_identity", ("object",), False, "code identity of the policy class",
            keys=(
                MetaKey("name", ("string",), True, "registry name of the policy"),
                MetaKey("class", ("string",), True, "package.module:ClassName"),
                MetaKey("builtin", ("boolean",), True, "shipped with evalkit"),
                MetaKey("distribution", ("string", "null"), True, "installed distribution "
                        "that provides the module; null if none"),
                MetaKey("version", ("string", "null"), True, "its version"),
                MetaKey("source_sha256", ("string", "null"), True, "sha256 of the class's "
                        "source file; null if it has none"))),
    MetaKey("notes", ("array",), False, "free-text notes of the writer"),
    MetaKey("run_order", ("object",), False, "where the run sat in the sweep's randomised, "
            "blocked execution order (evalkit.runlog.execution_order); started_at and "
            "host_load are wall-clock measurements that differ between identical sweeps, as "
            "created_at does",
            check="object", keys=(
                MetaKey("order_seed", ("integer",), True, "seed of the campaign's order"),
                MetaKey("position", ("integer",), True, "0-based execution position among "
                        "'runs' runs ordered together", minimum=0),
                MetaKey("runs", ("integer",), True, "runs ordered together", minimum=1),
                MetaKey("block", ("integer",), True, "0-based position of the seed's block",
                        minimum=0),
                MetaKey("blocks", ("integer",), True, "blocks ordered together", minimum=1),
                MetaKey("position_in_block", ("integer",), True, "0-based position inside "
                        "the block", minimum=0),
                MetaKey("window", ("integer",), True, "blocks open at once", minimum=1),
                MetaKey("shard", ("object",), False, "{'index', 'count'} of a sharded "
                        "sweep (--shard I/N): the runs recording it are ordered together"),
                MetaKey("started_at", ("string",), True, "ISO-8601 wall clock when the run "
                        "started (varies)"),
                MetaKey("host_load", ("object",), True, "{'load_1m': 1-minute load average "
                        "or null, 'probe_s': seconds a fixed CPU loop took} as the run "
                        "started (varies)"),
                MetaKey("attempts", ("array",), False, "a re-run's failed earlier attempts at "
                        "this slot, oldest first: {'position', 'started_at', 'written_at', "
                        "'error', 'run_json_sha256'}; each failed run.json is kept as "
                        "<runs>/.attempts/<run_id>.<n>.run.json; an attempt stopped before "
                        "its run.json was written has written_at and run_json_sha256 null "
                        "(its start comes from the marker the sweep writes as a run starts)"))),
)

RUN_ORDER_KEYS = ("order_seed", "position", "runs", "block", "blocks", "position_in_block",
                  "window", "started_at", "host_load")

REQUIRED_META = tuple(k.name for k in META_KEYS if k.required)

@dataclass(frozen=True)
class Column:
    name: str
    kind: str          # "int", "float", "bool", "string"
    nullable: bool
    doc: str
    unit: str | None = None


ARROW_TYPES = {"int": "int64", "float": "double", "bool": "bool", "string": "string"}


REQUESTS_COLUMNS = (
    Column("request_id", "int", False, "unique id within the run (int64)"),
    Column("arrival_s", "float", False, "scheduled arrival (open loop)", "s"),
    Column("sent_s", "float", False, "actual send time", "s"),
    Column("first_token_s", "float", True, "first output token; null if none", "s"),
    Column("end_s", "float", True, "completion; null if the request failed", "s"),
    Column("prompt_tokens", "int", False, "prompt length", "tokens"),
    Column("output_tokens", "int", False, "generated tokens (requested for failed requests)",
           "tokens"),
    Column("ok", "bool", False, "request completed successfully"),
    Column("error", "string", True, "error text for failed requests"),
)

MERGES_COLUMNS = (
    Column("merge_idx", "int", False, "0-based merge counter"),
    Column("start_s", "float", False, "merge window start", "s"),
    Column("end_s", "float", False, "merge window end", "s"),
    Column("inner_step", "int", True, "inner step at which the merge began"),
    Column("bytes", "int", True, "bytes all-reduced", "bytes"),
)

STEPS_COLUMNS = (
    Column("step", "int", False, "inner step index"),
    Column("start_s", "float", False, "step start", "s"),
    Column("end_s", "float", False, "step end", "s"),
    Column("loss", "float", True, "training loss"),
    Column("tokens", "int", True, "tokens processed", "tokens"),
)

SIGNALS_COLUMNS = (
    Column("t_s", "float", False, "observation time", "s"),
)

DECISIONS_COLUMNS = (
    Column("t_s", "float", False, "decision time", "s"),
    Column("step", "int", False, "inner steps since the last merge", "steps"),
    Column("action", "string", False, "'merge' | 'defer' | 'forced'"),
)

TABLES = {
    "requests": REQUESTS_COLUMNS,
    "merges": MERGES_COLUMNS,
    "steps": STEPS_COLUMNS,
    "signals": SIGNALS_COLUMNS,
    "decisions": DECISIONS_COLUMNS,
}
REQUIRED_TABLES = ("requests", "merges")

# Columns evalkit's own backends add, optional for other writers: not checked by validate
# (extra columns are kept and ignored), listed so readers know their meaning.
OPTIONAL_COLUMNS = {
    "requests": (
        Column("tokens_received", "int", True, "output tokens actually streamed", "tokens"),
        Column("send_lag_s", "float", True, "sent_s - arrival_s", "s"),
        Column("tpot_s", "float", True, "mean inter-token time of the request", "s"),
        Column("server_queue_s", "float", True, "the sidecar's own measure: arrival -> "
               "admitted into the batch (server_timing.queue_s)", "s"),
        Column("server_prefill_s", "float", True, "the sidecar's own measure: admitted -> "
               "first token (server_timing.prefill_s)", "s"),
        Column("server_decode_s", "float", True, "the sidecar's own measure: first -> last "
               "token (server_timing.decode_s)", "s"),
        Column("server_total_s", "float", True, "the sidecar's own measure: arrival -> end "
               "(server_timing.total_s); real_sidecar holds it against the client's latency",
               "s"),
    ),
    "merges": (
        Column("duration_s", "float", True, "end_s - start_s", "s"),
        Column("forced", "bool", True, "the corridor forced the merge (h_max / max_gap_s)"),
    ),
    "signals": (
        Column("queue_running", "float", True, "requests running (vllm:num_requests_running)",
               "requests"),
        Column("queue_waiting", "float", True, "requests waiting (vllm:num_requests_waiting)",
               "requests"),
        Column("pressure", "float", True, "serving pressure the policy saw, in [0, 1]"),
        Column("scrape_ok", "bool", True, "the metrics scrape at t_s succeeded (a null or "
               "false row: the signals were unavailable at t_s)"),
    ),
    "decisions": (
        Column("score", "float", True, "the policy's score at the decision (its own units)"),
    ),
}
