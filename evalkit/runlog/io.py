"""Atomic writing and reading of run directories (see :mod:`evalkit.runlog.schema`)."""

from __future__ import annotations

import datetime as _dt
import errno
import os
import platform
import shutil
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit import jsonio
from evalkit.version import __version__
from evalkit.errors import InputError, from_os_error
from evalkit.fileread import check_regular, read_bounded
from evalkit.fsutil import fsync_dir, fsync_tree
from evalkit.jsonio import loads_json
from evalkit.limits import MAX_RUN_ID_BYTES, MAX_RUN_JSON_BYTES
from evalkit.names import reserved_name_problem, reserved_names_text
from evalkit.runlog.schema import REQUIRED_TABLES, SCHEMA_VERSION, TABLES

__all__ = ["LINK_FIX", "EnvironmentFailure", "Run", "RunListing", "TableFile", "UnreadableRun",
           "check_run_id", "dump_json", "empty_frame", "environment_failure", "iter_run_dirs",
           "leftover_kind", "list_runs", "move_run_aside", "read_columns", "read_meta", "read_run",
           "read_table", "refused_error", "run_link_trouble", "write_run"]

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
            if not col.nullable:
                raise InputError(f"table '{name}' lacks required column", column=col.name,
                                 fix="the writer must provide every schema column")
            arrays.append(pa.nulls(len(df), type=_ARROW[col.kind]))
            names.append(col.name)
            continue
        values = df[col.name]
        arrays.append(pa.array(values.to_numpy(dtype=object) if col.kind == "string" else values,
                               type=_ARROW[col.kind], from_pandas=True))
        names.append(col.name)
    for extra in df.columns:
        if extra not in names:
            arrays.append(pa.array(df[extra], from_pandas=True))
            names.append(extra)
    return pa.Table.from_arrays(arrays, names=names)


_PANDAS = {"int": "int64", "float": "float64", "bool": "bool", "string": "object"}


def empty_frame(name: str) -> pd.DataFrame:
    """A run table ``name`` with no rows: every schema column, with its dtype."""
    return pd.DataFrame({c.name: pd.Series(dtype=_PANDAS[c.kind]) for c in TABLES[name]})


def dump_json(obj, path: Path) -> None:
    """run.json's layout: sorted keys, ASCII, NaN/inf as null (strict JSON), and a TypeError
    for a value that is not data."""
    jsonio.dump_json(obj, path, strict=True, ensure_ascii=True)


def check_run_id(run_id: str) -> str:
    """A run id usable as a directory name, or an InputError saying why not."""
    if not run_id or "/" in run_id or "\\" in run_id or "\0" in run_id:
        raise InputError(f"invalid run_id {run_id!r}", column="run_id",
                         fix="use a plain directory name")
    reserved = reserved_name_problem(run_id)
    if reserved is not None:
        raise InputError(f"invalid run_id: {reserved}", column="run_id",
                         fix=reserved_names_text())
    if len(run_id.encode()) > MAX_RUN_ID_BYTES:
        raise InputError(f"run_id is {len(run_id.encode())} bytes long", column="run_id",
                         fix=f"use a run id of at most {MAX_RUN_ID_BYTES} bytes (it names a "
                             "directory)")
    return run_id


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished ``tmp`` to ``final``, moving an older ``final`` aside first.

    Between the two renames the old run lives on as ``.<id>.old-<hex>``; a process killed
    there leaves it for :func:`restore_interrupted` (``evalkit sweep`` does it on resume).
    """
    runs_dir = final.parent
    if final.exists():
        trash = runs_dir / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
        final.rename(trash)
        tmp.rename(final)
        fsync_dir(runs_dir)
        if trash.is_symlink():       # a run linked into the store: drop the link only
            trash.unlink()
        else:
            shutil.rmtree(trash, ignore_errors=True)
    else:
        tmp.rename(final)
        fsync_dir(runs_dir)


def write_run(runs_dir: str | os.PathLike, meta: dict, requests: pd.DataFrame,
              merges: pd.DataFrame, *, steps: pd.DataFrame | None = None,
              signals: pd.DataFrame | None = None,
              decisions: pd.DataFrame | None = None, complete: bool = True) -> Path:
    """Write one run directory atomically and durably; return its path.

    Everything is written into ``<runs_dir>/.<run_id>.tmp-<uuid>``; ``run.json`` (with
    ``complete``) is written last; every file and the directory are fsync'ed; then the
    directory is renamed into place (replacing an older run of the same id) and
    ``runs_dir`` is fsync'ed.  A killed writer leaves only hidden directories, which
    readers ignore; a power loss never leaves a published run with unwritten data.
    ``meta`` must hold the schema's required keys except those filled here
    (``schema_version``, ``evalkit_version``, ``created_at``, ``complete``, ``host``).
    """
    runs_dir = Path(runs_dir)
    run_id = check_run_id(str(meta["run_id"]))
    runs_dir.mkdir(parents=True, exist_ok=True)
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
        fsync_tree(tmp)
        _publish(tmp, runs_dir / run_id)
        return runs_dir / run_id
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
    """``run.json`` of one run; every way it can be unusable is an InputError naming it.

    A run.json that cannot be read for lack of permission raises :class:`UnreadableRun`.
    """
    path = Path(run_dir) / "run.json"
    try:
        size = path.stat().st_size
        if size > MAX_RUN_JSON_BYTES:
            raise InputError(f"run.json is {size:,} bytes (limit {MAX_RUN_JSON_BYTES:,})",
                             file=str(path), fix="rewrite the run; run.json holds metadata only")
        # bounded by bytes read: a device reports size 0 and never ends
        raw = read_bounded(path, MAX_RUN_JSON_BYTES, "run.json",
                           fix="rewrite the run; run.json holds metadata only")
    except FileNotFoundError:
        raise InputError("run.json is missing", file=str(path),
                         fix="every run directory needs run.json; rerun or remove the "
                             "directory") from None
    except PermissionError as exc:
        raise UnreadableRun.from_os_error(exc, path) from None
    except (OSError, MemoryError) as exc:
        raise (environment_failure(exc, path) or from_os_error(
            exc, path=str(path), action="cannot read run.json")) from None
    try:
        meta = loads_json(raw, file=str(path), what="run.json",
                          fix="rewrite the run or repair the JSON")
    except MemoryError as exc:
        raise environment_failure(exc, path) from None
    if not isinstance(meta, dict):
        raise InputError("run.json must hold a JSON object", file=str(path),
                         fix="rewrite the run")
    return meta


class UnreadableRun(InputError):
    """A run directory or file evalkit may not read (permissions)."""

    READ_FIX = ("give the user running evalkit read access (e.g. chmod -R u+rX, or chown), "
                "or move it out of the runs directory")

    @classmethod
    def from_os_error(cls, exc: OSError, path) -> "UnreadableRun":
        return cls(f"cannot read: {exc.strerror or exc}", file=str(path), fix=cls.READ_FIX)


CORRUPT_FIX = "rerun this run (or re-import it); the file is damaged"

# Failures of the machine reading a run, not of the run: the same file reads fine with more
# memory, fewer open files or a working disk.  Such a run was not judged; calling it damaged
# would make a sweep move a valid run aside and record another in its place.
ENVIRONMENT_ERRNOS = {
    errno.ENOMEM: ("out of memory", "free memory or raise the memory limit (ulimit -v)"),
    errno.ENOBUFS: ("out of buffer space", "free memory"),
    errno.EMFILE: ("too many open files", "raise the open-file limit (ulimit -n)"),
    errno.ENFILE: ("too many open files system-wide", "close other programs' files"),
    errno.EIO: ("an I/O error from the device", "check the disk and its connection"),
}


class EnvironmentFailure(InputError):
    """A run file could not be read because of the environment (memory, open files, the
    device): the run was not judged -- neither valid nor damaged.  Exit code 2."""


def environment_failure(exc: BaseException, path,
                        subject: str = "the run") -> EnvironmentFailure | None:
    """An :class:`EnvironmentFailure` for ``exc`` when it is one (MemoryError, or an OSError
    whose errno -- or, from Arrow, whose message -- is in :data:`ENVIRONMENT_ERRNOS`)."""
    if isinstance(exc, MemoryError):
        code = errno.ENOMEM
    elif isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS:
        code = exc.errno
    else:
        text = str(exc)
        code = next((c for c in ENVIRONMENT_ERRNOS if os.strerror(c) in text), None)
        if code is None or not isinstance(exc, (OSError, pa.ArrowException)):
            return None
    what, fix = ENVIRONMENT_ERRNOS[code]
    err = EnvironmentFailure(f"could not read {Path(path).name}: {what}; this is the "
                             f"environment, {subject} was not judged", file=str(path),
                             fix=f"{fix}, then run the command again (nothing was moved or "
                                 "rewritten)")
    err.__cause__ = exc
    return err


def _corrupt(path: Path, exc: BaseException) -> InputError:
    env = environment_failure(exc, path)
    if env is not None:
        return env
    return InputError("cannot read Parquet: corrupt or truncated "
                      f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})",
                      file=str(path), fix=CORRUPT_FIX)


class TableFile:
    """One run table opened for reading: its Arrow schema first, then the columns wanted.

    The one Parquet reader of run tables (validation, summaries, the audit's lazy logs):
    memory-mapped without pre-buffering and one thread per file, which is cheapest for
    run-sized files read several runs at a time.  Every failure is an InputError naming the
    file: missing, not a regular file, no permission (:class:`UnreadableRun`), corrupt.
    """

    def __init__(self, run_dir: str | os.PathLike, name: str):
        self.path = Path(run_dir) / f"{name}.parquet"
        self.name = name
        try:
            check_regular(self.path, f"{name}.parquet")   # a FIFO would block the memory map
            self._handle = pq.ParquetFile(self.path, memory_map=True, pre_buffer=False)
            self.schema = self._handle.schema_arrow
        except FileNotFoundError:
            raise InputError(f"{name}.parquet is missing", file=str(self.path),
                             fix="rerun the replay; the run directory is incomplete") from None
        except PermissionError as exc:
            raise UnreadableRun.from_os_error(exc, self.path) from None
        except InputError:
            raise
        except (pa.ArrowException, OSError, ValueError, MemoryError) as exc:
            raise _corrupt(self.path, exc) from None
        names = self.schema.names
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:                   # which of the two a reader takes is arbitrary: refused
            self._handle.close()
            raise InputError(f"{name}.parquet has the column {twice[0]!r} "
                             f"{names.count(twice[0])} times", file=str(self.path),
                             column=twice[0], fix="write each column once (rerun or "
                                                  "re-import the run)")

    def read(self, columns=None) -> pa.Table:
        """``columns`` (every column when None) as an Arrow table, in the order asked."""
        if columns is not None:
            columns = list(columns)
            for col in columns:
                if col not in self.schema.names:
                    raise InputError(f"column is missing from {self.name}.parquet",
                                     file=str(self.path), column=col,
                                     fix="rewrite the run with every schema column")
        try:
            return self._handle.read(columns=columns, use_threads=False)
        except PermissionError as exc:
            raise UnreadableRun.from_os_error(exc, self.path) from None
        except (pa.ArrowException, OSError, ValueError, MemoryError) as exc:
            raise _corrupt(self.path, exc) from None

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "TableFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_columns(run_dir: str | os.PathLike, table: str, columns=None) -> pa.Table:
    """Columns of one run table (``requests``, ``merges``, ...) as Arrow; None: all.

    Errors as :class:`TableFile`: an InputError naming the file (and the column when one
    asked for is missing).
    """
    with TableFile(run_dir, table) as handle:
        return handle.read(columns)


def read_table(run_dir: str | os.PathLike, name: str, columns=None) -> pd.DataFrame:
    """One run table as a DataFrame (:func:`read_columns`, then pandas)."""
    return read_columns(run_dir, name, columns).to_pandas()


def read_run(run_dir: str | os.PathLike, *, validate: bool = False) -> Run:
    """Load one run as written: run.json and every table present.

    Reading does not check the run; a caller that wants it checked calls
    :func:`evalkit.runlog.validate.read_valid_run` (or ``validate_run`` first).
    """
    if validate:
        raise TypeError("read_run no longer validates: call "
                        "evalkit.runlog.validate.read_valid_run(run_dir) instead")
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    tables = {}
    for name in TABLES:
        if name in REQUIRED_TABLES or (run_dir / f"{name}.parquet").exists():
            tables[name] = read_table(run_dir, name)
    return Run(path=run_dir, meta=meta, **tables)


@dataclass
class RunListing:
    """What a walk of a runs directory found.

    ``run_dirs``: directories holding ``run.json`` (hidden ones skipped; reached through a
    symbolic link inside the store they are listed under the link's path); ``unreadable``:
    ``(path, reason)`` of directories that could not be listed -- runs that would otherwise
    vanish; ``refused``: ``(path, reason)`` of symbolic links not followed (they leave the
    store, loop, dangle, or lead to a directory already listed) -- never skipped silently;
    ``orphans``: visible directories with Parquet files but no ``run.json``; ``leftovers``:
    hidden ``.<id>.tmp-*`` / ``.<id>.old-*`` / ``.<id>.damaged-*`` directories of
    interrupted or repaired writes.
    """

    root: Path
    run_dirs: list[Path] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    refused: list[tuple[Path, str]] = field(default_factory=list)
    orphans: list[Path] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)


LEFTOVER_TAGS = (".tmp-", ".old-", ".damaged-", ".replaced-")
LINK_FIX = ("make it a real directory, or a symbolic link to a directory inside the runs "
            "directory (a hidden one such as .pool/<run> is not listed twice), or remove it")


def move_run_aside(run_dir: str | os.PathLike, tag: str) -> Path:
    """Rename a run to ``.<id>.<tag>-<UTC time>-<hex>`` (hidden: never read, never deleted);
    ``tag``: ``damaged`` (a sweep redoes it) or ``replaced`` (an import asked to replace it)."""
    run_dir = Path(run_dir)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = run_dir.parent / f".{run_dir.name}.{tag}-{stamp}-{uuid.uuid4().hex[:4]}"
    run_dir.rename(dest)
    fsync_dir(run_dir.parent)
    return dest


def leftover_kind(name: str) -> tuple[str, str] | None:
    """``(run_id, tag)`` for a hidden leftover name ``.<run_id><tag><suffix>``, else None."""
    if not name.startswith("."):
        return None
    for tag in LEFTOVER_TAGS:
        head, sep, _ = name[1:].rpartition(tag)
        if sep and head:
            return head, tag.strip(".-")
    return None


def _check_root(root: Path) -> None:
    try:
        st = root.stat()
    except FileNotFoundError:
        raise InputError("runs directory does not exist", file=str(root),
                         fix="pass the directory that holds the run directories") from None
    except OSError as exc:
        raise from_os_error(exc, path=str(root), action="cannot open the runs directory") \
            from None
    import stat as _stat
    if not _stat.S_ISDIR(st.st_mode):
        raise InputError("expected a directory of runs", file=str(root),
                         fix="pass the directory that holds the run directories")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def link_trouble(root_real: str, link: Path, parent_real: str | None = None) -> str | None:
    """Why the symbolic link ``link`` may not be followed as a run directory, or None.

    Followed only when it resolves to an existing directory inside ``root_real`` (the
    store's real path) that is not one of its own ancestors (``parent_real``: the real path
    of the directory holding the link).  A link to a file is not a run: None as well.
    """
    try:
        target = os.path.realpath(link, strict=True)
    except OSError as exc:
        import errno as _errno

        if exc.errno == _errno.ELOOP:
            return "symbolic link loop (it resolves to itself)"
        if exc.errno == _errno.ENOENT:
            return f"dangling symbolic link (-> {os.readlink(link)}: no such directory)"
        return f"cannot resolve symbolic link: {exc.strerror or exc}"
    if not os.path.isdir(target):
        return None
    if not _inside(target, root_real):
        return f"symbolic link leaves the runs directory (-> {target})"
    if parent_real is not None and _inside(parent_real, target):
        return f"symbolic link loops back to a directory above it (-> {target})"
    return None


def run_link_trouble(runs_dir: str | os.PathLike, run_dir: str | os.PathLike) -> str | None:
    """:func:`link_trouble` for one planned run directory ``runs_dir/<run_id>`` (sweeps)."""
    run_dir = Path(run_dir)
    if not run_dir.is_symlink():
        return None
    root_real = os.path.realpath(runs_dir)
    return link_trouble(root_real, run_dir, os.path.realpath(run_dir.parent))


def list_runs(runs_dir: str | os.PathLike) -> RunListing:
    """Walk ``runs_dir`` once, following symbolic links to directories inside it.

    A link that leaves ``runs_dir``, loops, dangles or leads to a directory already listed
    is not followed and is reported in ``refused`` (real directories are listed before
    links, links in name order, so which path counts is deterministic).  Raises InputError
    when ``runs_dir`` itself is missing, not a directory or unlistable; any directory below
    it that cannot be listed is reported in ``unreadable``, never skipped silently.
    """
    root = Path(runs_dir)
    _check_root(root)
    out = RunListing(root)
    if _exists(root / "run.json"):
        out.run_dirs.append(root)
        return out
    root_real = os.path.realpath(root)
    walked: dict[str, Path] = {}          # real path -> the path it was listed under
    links: list[tuple[Path, str]] = []    # (link, real path of its directory)
    stack = [(root, root_real)]
    while stack or links:
        if not stack:                     # real directories first, then one link at a time
            links.sort(key=lambda item: str(item[0]), reverse=True)
            link, parent_real = links.pop()
            why = link_trouble(root_real, link, parent_real)
            if why is None:
                target = os.path.realpath(link)
                if not os.path.isdir(target):
                    continue              # a link to a file: not a run directory
                if target in walked:
                    why = (f"a second path to {walked[target]} (symbolic link -> {target}); "
                           "a run is listed once")
                else:
                    stack.append((link, target))
                    continue
            out.refused.append((link, why))
            continue
        here, here_real = stack.pop()
        if here_real in walked:
            out.refused.append((here, f"a second path to {walked[here_real]}; a run is "
                                      "listed once"))
            continue
        walked[here_real] = here
        try:
            with os.scandir(here) as it:
                entries = list(it)
        except OSError as exc:
            if here == root:
                raise from_os_error(exc, path=str(root),
                                    action="cannot list the runs directory") from None
            if _exists(here / "run.json"):      # searchable but not listable: still a run
                out.run_dirs.append(here)
            else:
                out.unreadable.append((here, f"cannot list directory: "
                                             f"{exc.strerror or exc}"))
            continue
        names = {e.name for e in entries}
        if here != root and "run.json" in names:
            out.run_dirs.append(here)
        elif any(n.endswith(".parquet") for n in names):
            out.orphans.append(here)
        for entry in entries:
            hidden = entry.name.startswith(".")
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError:
                is_link = is_dir = False
            if is_link:
                if not hidden:
                    links.append((Path(entry.path), here_real))
                continue
            if not is_dir:
                continue
            if hidden:
                if leftover_kind(entry.name) is not None:
                    out.leftovers.append(Path(entry.path))
                continue
            stack.append((Path(entry.path), os.path.join(here_real, entry.name)))
    out.run_dirs.sort()
    out.unreadable.sort()
    out.refused.sort()
    out.orphans.sort()
    out.leftovers.sort()
    return out


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def iter_run_dirs(runs_dir: str | os.PathLike) -> list[Path]:
    """Run directories under ``runs_dir`` (recursively; hidden temporaries skipped), sorted.

    A directory below ``runs_dir`` that cannot be listed raises :class:`UnreadableRun`,
    a symbolic link that is not followed an InputError naming every such link (no run is
    ever dropped silently); :func:`list_runs` reports both instead.
    """
    listing = list_runs(runs_dir)
    if listing.refused:
        raise refused_error(listing.refused)
    if listing.unreadable:
        path, reason = listing.unreadable[0]
        more = f" (+{len(listing.unreadable) - 1} more)" if len(listing.unreadable) > 1 else ""
        raise UnreadableRun(reason + more, file=str(path), fix=UnreadableRun.READ_FIX)
    return listing.run_dirs


def refused_error(refused: list[tuple[Path, str]]) -> InputError:
    """One InputError naming every symbolic link :func:`list_runs` did not follow."""
    shown = "; ".join(f"{p}: {why}" for p, why in refused[:20])
    more = f" (+{len(refused) - 20} more)" if len(refused) > 20 else ""
    return InputError(f"{len(refused)} symbolic link(s) below the runs directory not followed: "
                      f"{shown}{more}", file=str(refused[0][0]), fix=LINK_FIX)
