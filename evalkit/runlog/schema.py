"""The evalkit run-log format, version 1.

One directory per run::

    <run_id>/
        run.json            metadata (keys below); ``complete`` is written last
        requests.parquet    one row per request of the replayed trace
        merges.parquet      one row per outer merge (sync window) the trainer performed
        steps.parquet       optional: trainer inner steps
        signals.parquet     optional: time series the policy observed
        decisions.parquet   optional: every policy decision (time, step, action, score)

Times are seconds from the run's time origin (``t = 0`` is when the replay clock started;
the first request need not arrive at 0).  ``arrival_s`` is the *scheduled* (open-loop) arrival
of a request; latency is always measured from it.

``run.json`` keys (``REQUIRED_META``):

============== ===================================================================
schema_version integer, currently 1
run_id         unique name; equals the directory name
policy         scheduling policy name (``no_sync`` for the baseline)
role           ``policy`` | ``matched_random`` | ``no_sync``
seed           integer replication unit (trace realisation + backend randomness)
draw           null, or the draw index of a matched-random run
matched_to     null, or (for ``matched_random``) the policy whose K this draw matches
regime         name of the load / interference regime (runs are only compared within one)
trace          {"name": str, "sha256": str}
backend        ``sim`` | ``torch`` | ``vllm`` | ``import``
slo            {"e2e_s": float, "ttft_s": float|null, "tpot_s": float|null}
merge_duration_s  nominal merge duration D (s)
horizon_s      end of the observed span (s)
corridor       {"min_gap_s": float, "max_gap_s": float}
oracle         bool: the policy saw future information
complete       bool: the writer finished; incomplete runs are never audited
evalkit_version  version of the writer
created_at     ISO-8601 UTC timestamp
settings       {"requested": {...}, "effective": {...}}  (MLPerf-style)
host           {"hostname": ..., "platform": ..., "python": ...}
rng_seeds      {name: int} the seed of every random generator used
============== ===================================================================

Optional keys: ``error`` (why an incomplete run stopped), ``trace_realisation`` (identifier of
the request sequence: runs sharing it saw identical arrivals; defaults to ``trace.sha256``),
``inner_step_s`` (measured inner-step time), ``notes``, ``policy_params``, ``plan_sha256``
(sha256 of the campaign plan, ``plan.json`` beside the runs, the run was written under;
see :mod:`evalkit.runlog.plan`), ``run_order`` (written by ``evalkit sweep``; see
:mod:`evalkit.replay.run_order`)::

    "run_order": {
        "order_seed": int,          seed of the campaign's randomised order
        "position": int,            0-based execution position among "runs" runs
        "runs": int,
        "block": int,               0-based position of the seed's block among "blocks"
        "blocks": int,
        "position_in_block": int,
        "window": int,              blocks open at once
        "started_at": ISO-8601,     wall clock when the run started      (varies)
        "host_load": {"load_1m": float|null, "probe_s": float}           (varies)
    }

Wall-clock fields (``created_at``, ``run_order.started_at``, ``run_order.host_load``) are the
only parts of a run that differ between two sweeps of the same campaign.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)

ROLES = ("policy", "matched_random", "no_sync")
BACKENDS = ("sim", "torch", "vllm", "import")

RUN_ORDER_KEYS = ("order_seed", "position", "runs", "block", "blocks", "position_in_block",
                  "window", "started_at", "host_load")

REQUIRED_META = (
    "schema_version", "run_id", "policy", "role", "seed", "draw", "matched_to", "regime",
    "trace", "backend", "slo", "merge_duration_s", "horizon_s", "corridor", "oracle",
    "complete", "evalkit_version", "created_at", "settings", "host", "rng_seeds",
)


@dataclass(frozen=True)
class Column:
    name: str
    kind: str          # "int", "float", "bool", "string"
    nullable: bool
    doc: str


REQUESTS_COLUMNS = (
    Column("request_id", "int", False, "unique id within the run (int64)"),
    Column("arrival_s", "float", False, "scheduled arrival (open loop), s"),
    Column("sent_s", "float", False, "actual send time, s"),
    Column("first_token_s", "float", True, "first output token, s; null if none"),
    Column("end_s", "float", True, "completion, s; null if the request failed"),
    Column("prompt_tokens", "int", False, "prompt length in tokens"),
    Column("output_tokens", "int", False, "generated tokens (requested for failed requests)"),
    Column("ok", "bool", False, "request completed successfully"),
    Column("error", "string", True, "error text for failed requests"),
)

MERGES_COLUMNS = (
    Column("merge_idx", "int", False, "0-based merge counter"),
    Column("start_s", "float", False, "merge window start, s"),
    Column("end_s", "float", False, "merge window end, s"),
    Column("inner_step", "int", True, "inner step at which the merge began"),
    Column("bytes", "int", True, "bytes all-reduced"),
)

STEPS_COLUMNS = (
    Column("step", "int", False, "inner step index"),
    Column("start_s", "float", False, "step start, s"),
    Column("end_s", "float", False, "step end, s"),
    Column("loss", "float", True, "training loss"),
    Column("tokens", "int", True, "tokens processed"),
)

SIGNALS_COLUMNS = (
    Column("t_s", "float", False, "observation time, s"),
)

DECISIONS_COLUMNS = (
    Column("t_s", "float", False, "decision time, s"),
    Column("step", "int", False, "inner steps since the last merge"),
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
