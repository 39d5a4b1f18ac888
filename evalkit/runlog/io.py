"""Atomic writing and reading of run directories (see :mod:`evalkit.runlog.schema`)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit import __version__
from evalkit.errors import InputError
from evalkit.runlog.schema import REQUIRED_TABLES, SCHEMA_VERSION, TABLES

_ARROW = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "string": pa.string()}


def host_info() -> dict:
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version()}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _to_table(name: str, df: pd.DataFrame) -> pa.Table:
    """Cast the schema columns to their declared Arrow types; extra columns are kept."""
    cols = TABLES[name]
    arrays, names = [], []
    for col in cols:
        if col.name not in df.columns:
            if name in ("signals", "decisions") or col.nullable:
                if col.name not in df.columns and not col.nullable:
                    raise InputError(f"table '{name}' lacks required column", column=col.name,
                                     fix="the writer must provide every schema column")
                arrays.append(pa.nulls(len(df), type=_ARROW[col.kind]))
                names.append(col.name)
                continue
            raise InputError(f"table '{name}' lacks required column", column=col.name,
                             fix="the writer must provide every schema column")
        values = df[col.name]
        arrays.append(pa.array(values.to_numpy(dtype=object) if col.kind == "string" else values,
                               type=_ARROW[col.kind], from_pandas=True))
        names.append(col.name)
    for extra in df.columns:
        if extra not in names:
            arrays.append(pa.array(df[extra], from_pandas=True))
            names.append(extra)
    return pa.Table.from_arrays(arrays, names=names)


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dump_json(obj, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def write_run(runs_dir: str | os.PathLike, meta: dict, requests: pd.DataFrame,
              merges: pd.DataFrame, *, steps: pd.DataFrame | None = None,
              signals: pd.DataFrame | None = None,
              decisions: pd.DataFrame | None = None, complete: bool = True) -> Path:
    """Write one run directory atomically and return its path.

    Everything is written into ``<runs_dir>/.<run_id>.tmp-<uuid>``; ``run.json`` (with
    ``complete``) is written last, then the directory is renamed into place, replacing an
    older run of the same id.  A killed writer leaves only a hidden temporary directory,
    which readers ignore.  ``meta`` must hold the schema's required keys except those filled
    here (``schema_version``, ``evalkit_version``, ``created_at``, ``complete``, ``host``).
    """
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    run_id = str(meta["run_id"])
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise InputError(f"invalid run_id {run_id!r}", column="run_id",
                         fix="use a plain directory name")
    tmp = runs_dir / f".{run_id}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        pq.write_table(_to_table("requests", requests), tmp / "requests.parquet")
        pq.write_table(_to_table("merges", merges), tmp / "merges.parquet")
        for name, df in (("steps", steps), ("signals", signals), ("decisions", decisions)):
            if df is not None:
                pq.write_table(_to_table(name, df), tmp / f"{name}.parquet")
        full = dict(meta)
        full.setdefault("schema_version", SCHEMA_VERSION)
        full.setdefault("evalkit_version", __version__)
        full.setdefault("created_at", now_iso())
        full.setdefault("host", host_info())
        full["complete"] = bool(complete)
        dump_json(full, tmp / "run.json")
        final = runs_dir / run_id
        if final.exists():
            trash = runs_dir / f".{run_id}.old-{uuid.uuid4().hex[:8]}"
            final.rename(trash)
            tmp.rename(final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            tmp.rename(final)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@dataclass
class Run:
    """A run directory loaded into memory."""

    path: Path
    meta: dict
    requests: pd.DataFrame
    merges: pd.DataFrame
    steps: pd.DataFrame | None = None
    signals: pd.DataFrame | None = None
    decisions: pd.DataFrame | None = None
    extra: dict = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id", self.path.name))


def read_meta(run_dir: str | os.PathLike) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.exists():
        raise InputError("run.json is missing", file=str(path),
                         fix="every run directory needs run.json; rerun or remove the directory")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"run.json is not valid JSON ({exc.msg} at line {exc.lineno})",
                         file=str(path), fix="rewrite the run or repair the JSON") from exc
    if not isinstance(meta, dict):
        raise InputError("run.json must hold a JSON object", file=str(path),
                         fix="rewrite the run")
    return meta


def read_table(run_dir: str | os.PathLike, name: str, columns=None) -> pd.DataFrame:
    path = Path(run_dir) / f"{name}.parquet"
    try:
        return pq.read_table(path, columns=columns).to_pandas()
    except FileNotFoundError as exc:
        raise InputError(f"{name}.parquet is missing", file=str(path),
                         fix="rerun the replay; the run directory is incomplete") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"cannot read Parquet ({exc})", file=str(path),
                         fix="the file is corrupt or truncated; rerun this run") from exc


def read_run(run_dir: str | os.PathLike, *, validate: bool = True) -> Run:
    """Load one run.  With ``validate`` the run is checked first and the first problem raised."""
    run_dir = Path(run_dir)
    if validate:
        from evalkit.runlog.validate import validate_run

        errors = [p for p in validate_run(run_dir) if p.severity == "error"]
        if errors:
            raise errors[0].as_error()
    meta = read_meta(run_dir)
    tables = {}
    for name in TABLES:
        if name in REQUIRED_TABLES or (run_dir / f"{name}.parquet").exists():
            tables[name] = read_table(run_dir, name)
    return Run(path=run_dir, meta=meta, **tables)


def iter_run_dirs(runs_dir: str | os.PathLike) -> list[Path]:
    """Run directories under ``runs_dir`` (recursively; hidden temporaries skipped), sorted."""
    root = Path(runs_dir)
    if not root.exists():
        raise InputError("runs directory does not exist", file=str(root),
                         fix="pass the directory that holds the run directories")
    if not root.is_dir():
        raise InputError("expected a directory of runs", file=str(root),
                         fix="pass the directory that holds the run directories")
    if (root / "run.json").exists():
        return [root]
    found = []
    for meta in root.rglob("run.json"):
        if any(part.startswith(".") for part in meta.relative_to(root).parts):
            continue
        found.append(meta.parent)
    return sorted(found)
