"""Bounds on what evalkit reads: TOML files (protocol, campaign, twin: evalkit.config), run logs.

Hostile or mistyped input (``n_resamples = 10**12``, ``seeds = 1e12``, a 100 MB string, a
100,000-deep nested table) must end in a clear :class:`~evalkit.errors.InputError` naming
the allowed range -- exit code 2 -- never in a hang, a memory blow-up or a RecursionError.
Every limit is far beyond what a real campaign or protocol needs.

Also here: :func:`capped_name`, for the places where a user-chosen name becomes a file or
directory name (a file name is at most 255 bytes on common file systems).
"""

from __future__ import annotations

import hashlib
import math
import tomllib

from evalkit.errors import InputError

__all__ = ["INT64_MAX", "MAX_CONFIG_BYTES", "MAX_DOCUMENT_BYTES", "MAX_DRAWS", "MAX_HORIZON_S",
           "MAX_IMPORT_JSON_BYTES", "MAX_INNER_STEPS", "MAX_JOBS", "MAX_JSON_NESTING",
           "MAX_LABEL_CHARS", "MAX_LOG_TIME_S", "MAX_MERGES", "MAX_NESTING", "MAX_PLAN_BYTES",
           "MAX_POLICIES", "MAX_RUN_ID_BYTES", "MAX_RUN_JSON_BYTES", "MAX_SEEDS", "MAX_SEED_VALUE",
           "MAX_STRING_CHARS", "MAX_TOKENS", "MAX_TRACE_REQUESTS", "RESAMPLES_RANGE", "capped_name",
           "check_run_sizes", "check_structure", "finite", "loads_toml", "range_fix"]

# configuration files (protocol, campaign and twin TOML, read by evalkit.config)
MAX_CONFIG_BYTES = 1 << 20          # 1 MiB
MAX_STRING_CHARS = 10_000           # any one string in a TOML file
MAX_NESTING = 32                    # tables/arrays inside each other
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1   # TOML integers are 64-bit

# statistics (protocol)
RESAMPLES_RANGE = (100, 1_000_000)  # n_resamples, bootstrap_resamples

# campaigns
MAX_SEEDS = 10_000
MAX_SEED_VALUE = (1 << 32) - 1      # numpy SeedSequence-friendly, fits every integer column
MAX_DRAWS = 1_000                   # matched-random draws per (policy, seed)
MAX_POLICIES = 64
MAX_JOBS = 200_000                  # runs one campaign may plan
MAX_LABEL_CHARS = 64                # regime and policy labels (they become run directory names)
MAX_TRACE_REQUESTS = 50_000_000     # expected requests of one generated trace
MAX_HORIZON_S = 30 * 86_400.0       # 30 days
# sizes one run implies (checked when a campaign or a replay spec is read, before anything
# is allocated): a 30-day horizon at the default 0.5 s step is 5.2 million inner steps
MAX_INNER_STEPS = 10_000_000        # horizon_s / inner step time, and h_max
MAX_MERGES = 1_000_000              # horizon_s / the corridor's minimum gap

# run logs
MAX_RUN_JSON_BYTES = 16 << 20       # 16 MiB
MAX_LOG_TIME_S = 10 * MAX_HORIZON_S  # any time in a run log (seconds from the run's origin)
MAX_TOKENS = 1 << 32                # tokens of one request: totals of any run fit int64
MAX_JSON_NESTING = 64
MAX_PLAN_BYTES = 256 << 20          # plan.json: 200,000 planned runs fit many times over
MAX_DOCUMENT_BYTES = 256 << 20      # audit.json read by report, diff and gate --baseline
MAX_IMPORT_JSON_BYTES = 1 << 30     # a GuideLLM report or vLLM bench result being imported
MAX_RUN_ID_BYTES = 200              # + ".<id>.tmp-xxxxxxxx" must fit a 255-byte file name


def range_fix(lo, hi) -> str:
    return f"use a value in [{lo:,}, {hi:,}]"


def capped_name(name: str, max_bytes: int = MAX_RUN_ID_BYTES) -> str:
    """``name`` if it fits ``max_bytes`` (UTF-8), else a prefix + ``~`` + 16 hex of its sha256.

    Deterministic and collision-resistant: two long names that share a prefix still differ.
    """
    raw = name.encode()
    if len(raw) <= max_bytes:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    prefix = raw[:max_bytes - len(digest) - 1].decode("utf-8", errors="ignore")
    return f"{prefix}~{digest}"


# ----------------------------------------------------------------------------- structures

def check_structure(data, *, file: str | None, max_depth: int = MAX_NESTING,
                    max_string: int | None = MAX_STRING_CHARS, int64: bool = True) -> None:
    """Walk parsed TOML/JSON (iteratively) and reject deep nesting, long strings, huge ints."""
    stack = [(data, 1, "")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = ((f"[{i}]", v) for i, v in enumerate(value))
        else:
            if isinstance(value, str) and max_string is not None and len(value) > max_string:
                raise InputError(f"a string of {len(value):,} characters", file=file,
                                 column=where or None,
                                 fix=f"strings are limited to {max_string:,} characters")
            if int64 and isinstance(value, int) and not isinstance(value, bool) \
                    and not INT64_MIN <= value <= INT64_MAX:
                raise InputError("integer out of the 64-bit range", file=file,
                                 column=where or None, fix=range_fix(INT64_MIN, INT64_MAX))
            continue
        if depth > max_depth:
            raise InputError(f"nested more than {max_depth} levels deep", file=file,
                             column=where or None,
                             fix=f"flatten the structure (at most {max_depth} levels)")
        for key, sub in items:
            sub_where = (f"{where}{key}" if str(key).startswith("[")
                         else f"{where}.{key}" if where else str(key))
            stack.append((sub, depth + 1, sub_where))


def loads_toml(text: str, *, file: str | None) -> dict:
    """``tomllib.loads`` with the size, nesting, string and integer limits above.

    Syntax errors propagate as ``tomllib.TOMLDecodeError`` (callers report the line).
    """
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_CONFIG_BYTES:
        raise InputError(f"file is {size:,} bytes", file=file,
                         fix=f"configuration files are limited to {MAX_CONFIG_BYTES:,} bytes")
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise InputError("nested too deeply to parse", file=file,
                         fix=f"flatten the structure (at most {MAX_NESTING} levels)") from None
    except ValueError as exc:
        if isinstance(exc, tomllib.TOMLDecodeError):
            raise
        raise InputError(f"cannot parse TOML: {exc}", file=file,   # e.g. a 5,000-digit integer
                         fix="TOML integers are 64-bit; shorten the value") from None
    check_structure(data, file=file)
    return data


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _ratio(a: float, b: float) -> float:
    """``a / b`` for positive numbers, ``inf`` instead of OverflowError or a zero divisor."""
    try:
        return float(a) / float(b) if b > 0 else math.inf
    except (OverflowError, ZeroDivisionError):
        return math.inf


def _count(n: float) -> str:
    return f"{n:,.0f}" if math.isfinite(n) and n < 1e15 else f"{n:.3g}"


def check_run_sizes(*, horizon_s: float, step_s: float, step_key: str, min_gap_s: float,
                    gap_key: str, h_max: int, file=None) -> None:
    """Reject a run whose inner steps or merges would not fit in memory (before any is
    allocated): ``horizon_s / step_s`` <= :data:`MAX_INNER_STEPS`, ``h_max`` likewise, and
    ``horizon_s / min_gap_s`` <= :data:`MAX_MERGES`.  The error names the key to change.
    """
    steps = _ratio(horizon_s, step_s)
    if not steps <= MAX_INNER_STEPS:
        raise InputError(f"{step_key} = {step_s:g} s makes horizon_s / {step_key} = "
                         f"{_count(steps)} inner steps per run", file=file, column=step_key,
                         fix=f"at most {MAX_INNER_STEPS:,} inner steps per run: raise "
                             f"{step_key} to at least {horizon_s / MAX_INNER_STEPS:.3g} s or "
                             "shorten horizon_s")
    if h_max > MAX_INNER_STEPS:
        raise InputError(f"h_max = {h_max:,} inner steps between merges is out of range",
                         file=file, column="h_max", fix=range_fix(1, MAX_INNER_STEPS))
    merges = _ratio(horizon_s, min_gap_s)
    if not merges <= MAX_MERGES:
        raise InputError(f"the corridor allows up to {_count(merges)} merges per run "
                         f"(horizon_s / minimum gap of {min_gap_s:g} s)", file=file,
                         column=gap_key, fix=f"at most {MAX_MERGES:,} merges per run: raise "
                                             f"{gap_key} or shorten horizon_s")
