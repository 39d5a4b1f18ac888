"""Durable, atomic file writes whose modes follow the umask.

A file is published by writing it under a hidden temporary name in the target directory,
``fsync``-ing it, renaming it into place and ``fsync``-ing the directory, so that neither a
killed process nor a power loss leaves a half-written file under the final name.  The
temporary file is created by the writer itself (``0o666`` minus the umask), never with
``tempfile.mkstemp`` (always ``0o600``): what evalkit writes is as readable as what any
other tool writes in the same shell.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evalkit.errors import from_os_error

__all__ = ["atomic_write", "fsync_dir", "fsync_tree", "map_ordered", "temp_sibling"]


def fsync_file(path: str | os.PathLike) -> None:
    """Flush one file's data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory's entries (renames, new files); a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:          # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file below ``root`` and then each directory, deepest first."""
    dirs = []
    for here, _, files in os.walk(root):
        dirs.append(here)
        for name in files:
            fsync_file(os.path.join(here, name))
    for here in reversed(dirs):
        fsync_dir(here)


def temp_sibling(path: str | os.PathLike, tag: str = "tmp") -> Path:
    """A unique hidden name beside ``path``: ``.<name>.<8 hex>.<tag>`` (not created)."""
    path = Path(path)
    return path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.{tag}"


def atomic_write(path: str | os.PathLike, write) -> Path:
    """Publish a file atomically: ``write(tmp_path)`` creates it, then fsync + rename.

    ``write`` receives the temporary path and must create the file there (``to_csv``,
    ``pq.write_table``, ``Path.write_text`` ...); the mode is the writer's default,
    i.e. ``0o666`` minus the umask.  On any error the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        write(tmp)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and not exc.filename:    # e.g. a full disk mid-write
            raise from_os_error(exc, path=str(path), action=f"cannot write {path.name}") \
                from exc
        raise
    fsync_dir(path.parent)
    return path


def default_threads() -> int:
    """Worker threads for per-run work: every core (Parquet decoding and numpy release the GIL)."""
    return max(1, min(8, os.cpu_count() or 1))


def map_ordered(fn, items, threads: int | None = None, window: int | None = None):
    """Yield ``fn(item)`` for each item, in order, computed by ``threads`` worker threads.

    At most ``window`` (default ``2 * threads``) results are pending at once, so memory stays
    bounded by a few runs whatever the store size.  ``threads <= 1`` runs in this thread.
    """
    threads = default_threads() if threads is None else int(threads)
    if threads <= 1:
        for item in items:
            yield fn(item)
        return
    window = window or 2 * threads
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="evalkit-run") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()
