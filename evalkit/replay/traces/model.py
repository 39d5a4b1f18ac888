"""The request trace: one row per request, arrival time and token lengths.

A :class:`Trace` holds a DataFrame with exactly the columns of :data:`COLUMNS`
(``request_id`` 0..n-1 in arrival order, ``arrival_s`` sorted and >= 0, token
counts as int64) plus a name and a ``meta`` dict saying where it came from and
what was done to it.  Its :attr:`Trace.sha256` hashes a canonical byte encoding
of the four columns, so the same content hashes the same whatever wrote it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit.errors import InputError
from evalkit.fileread import check_regular
from evalkit.fsutil import atomic_write   # fsync + rename; mode from the umask
from evalkit.jsonio import loads_json, to_jsonable

COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens")
FORMAT_VERSION = 1
META_KEY = b"evalkit.trace"
_HASH_TAG = b"evalkit-trace-v1\n"


@dataclass(eq=False)
class Trace:
    requests: pd.DataFrame
    name: str = "trace"
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_arrays(cls, arrival_s, prompt_tokens, output_tokens, *, name: str = "trace",
                    meta: dict | None = None, source: str | None = None,
                    sort: bool = False) -> "Trace":
        """Validate arrays of shape (n,) and build a trace (request ids in arrival order).

        ``source`` names the file in error messages.  With ``sort=True`` out-of-order
        or negative arrivals are sorted / shifted and the fact is recorded in ``meta``.
        """
        meta = dict(meta or {})
        arrival, prompt, output, fixes = validate_columns(
            arrival_s, prompt_tokens, output_tokens, source=source, sort=sort)
        if fixes:
            meta.setdefault("repairs", []).extend(fixes)
        df = pd.DataFrame({
            "request_id": np.arange(len(arrival), dtype=np.int64),
            "arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output,
        })
        return cls(df, name=name, meta=meta)

    @property
    def n(self) -> int:
        return int(len(self.requests))

    @property
    def arrival_s(self) -> np.ndarray:
        return self.requests["arrival_s"].to_numpy()

    @property
    def duration_s(self) -> float:
        """Observation window: ``meta['window_s']`` when known, else the last arrival."""
        if "window_s" in self.meta:
            return float(self.meta["window_s"])
        return float(self.arrival_s[-1]) if self.n else 0.0

    @property
    def rate(self) -> float:
        """Mean arrival rate, requests per second (nan for a zero-length window)."""
        d = self.duration_s
        return self.n / d if d > 0 else float("nan")

    @property
    def sha256(self) -> str:
        return content_sha256(self.requests)

    def replace(self, requests: pd.DataFrame, op: dict | None = None, **meta_updates) -> "Trace":
        """A new trace with ``requests``; ``op`` is appended to ``meta['ops']``."""
        meta = copy.deepcopy(self.meta)
        meta.update(meta_updates)
        if op is not None:
            meta.setdefault("ops", []).append(op)
        return Trace(requests.reset_index(drop=True), name=self.name, meta=meta)

    def validate(self) -> None:
        """Raise InputError unless the columns satisfy the data model (see module docstring)."""
        missing = [c for c in COLUMNS if c not in self.requests.columns]
        if missing:
            raise InputError(f"trace {self.name!r} lacks columns {missing}", column=missing[0],
                             fix=f"a trace has columns {', '.join(COLUMNS)}")
        r = self.requests
        validate_columns(r["arrival_s"], r["prompt_tokens"], r["output_tokens"],
                         source=f"trace {self.name!r}")
        if not np.array_equal(r["request_id"].to_numpy(), np.arange(len(r))):
            raise InputError("request_id must be 0..n-1 in arrival order",
                             file=f"trace {self.name!r}", column="request_id",
                             fix="build traces with Trace.from_arrays")

    def write(self, path) -> str:
        """Write Parquet (meta as JSON in the key-value metadata) atomically; return sha256."""
        self.validate()
        path = Path(path)
        digest = self.sha256
        table = pa.Table.from_pandas(self.requests[list(COLUMNS)], preserve_index=False)
        payload = {"format": FORMAT_VERSION, "name": self.name, "sha256": digest,
                   "meta": to_jsonable(self.meta)}
        table = table.replace_schema_metadata({META_KEY: json.dumps(payload).encode()})
        atomic_write(path, lambda tmp: pq.write_table(table, tmp))
        return digest


def content_sha256(requests: pd.DataFrame) -> str:
    """Hex sha256 of the four columns as little-endian int64/float64 bytes, column by column."""
    h = hashlib.sha256(_HASH_TAG)
    h.update(np.int64(len(requests)).astype("<i8").tobytes())
    for col in COLUMNS:
        dtype = "<f8" if col == "arrival_s" else "<i8"
        h.update(col.encode() + b"\0")
        h.update(np.ascontiguousarray(requests[col].to_numpy(), dtype=dtype).tobytes())
    return h.hexdigest()


def validate_columns(arrival_s, prompt_tokens, output_tokens, *, source=None, sort=False):
    """Check and convert arrays of shape (n,); returns (arrival, prompt, output, repairs)."""
    arrival = np.asarray(arrival_s, dtype=np.float64)
    cols = {"arrival_s": arrival}
    n = len(arrival)
    if n == 0:
        raise InputError("trace is empty: no requests", file=source,
                         fix="pick a file, window or filter that keeps at least one request")
    for name, values in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        cols[name] = _as_token_counts(values, name, source, n)
    bad = ~np.isfinite(arrival)
    if bad.any():
        raise InputError(f"{int(bad.sum())} of {n} arrival times are NaN or infinite",
                         file=source, column="arrival_s",
                         fix="remove those rows or fill in their times")
    repairs = []
    n_back = int(np.sum(np.diff(arrival) < 0))
    n_neg = int(np.sum(arrival < 0))
    if (n_back or n_neg) and not sort:
        what = []
        if n_back:
            what.append(f"{n_back} arrival times go backwards")
        if n_neg:
            what.append(f"{n_neg} are negative")
        raise InputError(" and ".join(what) + f" (of {n} requests)", file=source,
                         column="arrival_s",
                         fix="pass --sort (sort=True) to sort by arrival time and shift the "
                             "earliest arrival to 0")
    if n_back:
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
        for name in ("prompt_tokens", "output_tokens"):
            cols[name] = cols[name][order]
        repairs.append({"repair": "sorted", "rows_out_of_order": n_back})
    if n_neg:
        shift = -float(arrival[0])
        arrival = arrival + shift
        repairs.append({"repair": "shifted", "negative_rows": n_neg, "shift_s": shift})
    return arrival, cols["prompt_tokens"], cols["output_tokens"], repairs


def _as_token_counts(values, name, source, n) -> np.ndarray:
    arr = np.asarray(values)
    if len(arr) != n:
        raise InputError(f"has {len(arr)} values but there are {n} arrival times",
                         file=source, column=name, fix="give one value per request")
    if arr.dtype.kind not in "iuf":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError("token counts must be numbers", file=source, column=name,
                             fix="check the column holds integers") from None
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            raise InputError(f"{int(bad.sum())} of {n} token counts are NaN or infinite",
                             file=source, column=name, fix="remove those rows or fill them in")
        frac = arr != np.round(arr)
        if frac.any():
            raise InputError(f"{int(frac.sum())} token counts are not whole numbers",
                             file=source, column=name, fix="token counts must be integers")
    arr = arr.astype(np.int64)
    neg = arr < 0
    if neg.any():
        raise InputError(f"{int(neg.sum())} token counts are negative", file=source,
                         column=name, fix="token counts must be >= 0")
    return arr


def read_trace(path, *, sort: bool = False) -> Trace:
    """Read a trace written by :meth:`Trace.write` (or any Parquet with the three data columns)."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", file=path, fix="check the path")
    check_regular(path, "the trace file")          # a FIFO would block the open below
    try:
        pf = pq.ParquetFile(path)
        table = pf.read()
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable Parquet file ({exc})", file=path,
                         fix="pass a trace written by `evalkit trace import/generate`") from None
    kv = table.schema.metadata or {}
    payload = {}
    if META_KEY in kv:
        payload = loads_json(kv[META_KEY], file=path, what="the trace metadata",
                             nonfinite=True, fix="re-create the trace")
    names = set(table.column_names)
    for col in ("arrival_s", "prompt_tokens", "output_tokens"):
        if col not in names:
            raise InputError(f"missing column (has: {sorted(names)})", file=path, column=col,
                             fix="a trace needs arrival_s, prompt_tokens, output_tokens")
    df = table.to_pandas()
    meta = dict(payload.get("meta", {}))
    arrival, prompt, output, repairs = validate_columns(
        df["arrival_s"], df["prompt_tokens"], df["output_tokens"], source=str(path), sort=sort)
    if repairs:
        meta.setdefault("repairs", []).extend(repairs)
    elif "request_id" in names and not np.array_equal(df["request_id"].to_numpy(),
                                                      np.arange(len(df))):
        raise InputError("request_id must be 0..n-1 in arrival order", file=path,
                         column="request_id", fix="drop the column to renumber")
    trace = Trace.from_arrays(arrival, prompt, output, name=payload.get("name", path.stem),
                              meta=meta, source=str(path))
    stored = payload.get("sha256")
    if stored and not repairs and stored != trace.sha256:
        raise InputError(f"content sha256 {trace.sha256[:12]}… does not match the recorded "
                         f"{stored[:12]}…: the file was changed outside evalkit", file=path,
                         fix="re-create the trace with `evalkit trace import/generate`")
    return trace

