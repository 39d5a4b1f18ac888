"""Run tables built in memory and fixture-run copies for the run-log validation tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
POLICY = "fixture-s0-fixed_h"


# ----------------------------------------------------------------------------- helpers


def requests(n: int = 3, **cols) -> pa.Table:
    base = {
        "request_id": pa.array(range(n), pa.int64()),
        "arrival_s": [float(i) for i in range(n)],
        "sent_s": [float(i) for i in range(n)],
        "first_token_s": [i + 0.1 for i in range(n)],
        "end_s": [i + 0.5 for i in range(n)],
        "prompt_tokens": pa.array([10] * n, pa.int64()),
        "output_tokens": pa.array([5] * n, pa.int64()),
        "ok": [True] * n,
        "error": pa.array([None] * n, pa.string()),
    }
    for key, value in cols.items():
        if value is None:
            del base[key]
        else:
            base[key] = value
    return pa.table(base)


def merges(start, end, idx=True) -> pa.Table:
    cols = {"start_s": pa.array(start, pa.float64()), "end_s": pa.array(end, pa.float64())}
    if idx is True:
        cols = {"merge_idx": pa.array(range(len(start)), pa.int64()), **cols}
    elif idx is not None:
        cols = {"merge_idx": pa.array(idx, pa.int64()), **cols}
    return pa.table(cols)


def found(problems) -> list[tuple]:
    return [(p.column, p.message, p.severity, p.kind) for p in problems]


def err(column, message, kind="format"):
    return (column, message, "error", kind)


def copy_run(tmp_path, name=POLICY, dest=None) -> Path:
    run = tmp_path / (dest or name)
    shutil.copytree(FIXTURES / name, run)
    return run
