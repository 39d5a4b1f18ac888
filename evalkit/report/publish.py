"""Publish a report directory atomically, touching only files evalkit wrote.

The whole new report is built in a temporary directory beside ``--out`` (same file system),
every file and directory fsync'ed; files of the user's that sit in ``--out`` (anything not
listed in the previous report's manifest) are hard-linked into it; then the two directories
are exchanged in one step (``renameat2(RENAME_EXCHANGE)`` on Linux, ``renamex_np(RENAME_SWAP)``
on macOS).  A reader, or a ``kill -9`` at any instant, sees the previous complete report or
the new complete one.  The previous report, now in the temporary directory, is removed file by
file: only files its manifest lists and links to files that live on in ``--out``.  Anything
else found there (a file the user added while the audit ran) is moved back into ``--out``.

Where the exchange is impossible (no such system call, ``--out`` is a mount point, a file
system without it), the files are replaced one by one (each rename atomic, the set not) and
:attr:`Published.atomic` is false.

``MANIFEST`` in ``--out`` lists the files a report consists of.  A report written before
manifests existed is recognised by its ``audit.json``: the figures it references and the
three report files are evalkit's.  Leftover temporary directories of a killed audit are cleaned
the same way on the next audit into the same ``--out``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import secrets
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from evalkit.fsutil import fsync_dir
from evalkit.errors import InputError, from_os_error
from evalkit.jsonio import read_json
from evalkit.limits import MAX_DOCUMENT_BYTES
from evalkit.pids import pid_alive

__all__ = ["MANIFEST", "publish"]

MANIFEST = ".evalkit-manifest.json"
REPORT_FILES = ("report.html", "report.md", "audit.json")
_TMP_TAG = ".evalkit-tmp-"


@dataclass(frozen=True)
class Published:
    out_dir: Path
    files: tuple[str, ...]        # relative paths evalkit wrote
    atomic: bool
    kept_aside: Path | None = None  # a leftover directory holding files evalkit would not delete
    note: str = ""


# ------------------------------------------------------------------------------ durability

def _write(path: Path, data: bytes) -> None:
    # modes follow the umask (plain open), durable before the directory is published
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


# ---------------------------------------------------------------------------- manifest

def read_manifest(directory: Path) -> set[str]:
    """Relative paths of the files evalkit wrote in ``directory`` (empty if none known)."""
    try:
        data = read_json(directory / MANIFEST, limit=MAX_DOCUMENT_BYTES, what=MANIFEST)
        files = data.get("files", []) if isinstance(data, dict) else []
        return {str(f) for f in files if isinstance(f, str) and _safe_rel(f)}
    except (OSError, ValueError):
        pass
    try:  # a report written before manifests: its audit.json names its figures
        audit = read_json(directory / "audit.json", limit=MAX_DOCUMENT_BYTES,
                          what="audit.json")
    except (OSError, ValueError):
        return set()
    if not isinstance(audit, dict) or "evalkit_version" not in audit:
        return set()
    owned = set(REPORT_FILES)
    for claim in audit.get("claims", []) or []:
        figs = claim.get("figures") if isinstance(claim, dict) else None
        for rel in (figs or {}).values():
            if isinstance(rel, str) and _safe_rel(rel):
                owned.add(rel)
    return owned


def _manifest(files) -> bytes:
    return json.dumps({"written_by": "evalkit", "files": sorted(files)}, indent=1).encode() + b"\n"


def _safe_rel(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


# ------------------------------------------------------------------------- directory swap

def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directory entries; False when the platform cannot."""
    libc_name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
    except OSError:
        return False
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        at_fdcwd, rename_exchange = -100, 2
        rc = libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b),
                            rename_exchange)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        rc = libc.renamex_np(os.fsencode(a), os.fsencode(b), 2)       # RENAME_SWAP
    else:
        return False
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
               errno.EBUSY):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _walk_files(root: Path):
    """(path, relative path) of every file below ``root``; a symbolic link to a directory
    counts as a file (it is never followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d not in links)
        for name in sorted(filenames + links):
            path = Path(dirpath) / name
            yield path, path.relative_to(root).as_posix()


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def discard_tree(tree: Path, live: Path) -> list[str]:
    """Remove from ``tree`` the files evalkit wrote (its manifest) and links to files that
    live on in ``live``; move other files back into ``live`` where that path is free.
    Returns the relative paths left in ``tree`` (nothing is deleted that evalkit did not
    write); ``tree`` itself is removed when empty."""
    owned = read_manifest(tree)
    left = []
    # the manifest goes last: a kill while discarding leaves a tree that still says what is
    # evalkit's
    for path, rel in sorted(_walk_files(tree),
                            key=lambda item: (item[1] == MANIFEST, item[1] == "audit.json")):
        target = live / rel
        if rel in owned or rel == MANIFEST or _same_file(path, target):
            path.unlink()
            continue
        if not os.path.lexists(target):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, target)
                continue
            except OSError:
                pass
        left.append(rel)
    for dirpath, _, _ in sorted(os.walk(tree), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
    return left


def clean_leftovers(out: Path) -> None:
    """Temporary directories of killed audits into ``out`` (beside it, or inside it for an
    in-place replacement): remove what evalkit wrote there, keep anything else."""
    host = socket.gethostname()
    places = [(out.parent, _tmp_prefix(out))]
    if out.is_dir():
        places.append((out, _TMP_TAG))
    for where, prefix in places:
        for cand in sorted(where.glob(f"{prefix}*")):
            parts = cand.name[len(prefix):].split("-")
            if len(parts) < 3 or cand.is_symlink() or not cand.is_dir():
                continue
            cand_host, cand_pid = "-".join(parts[:-2]), parts[-2]
            if cand_host != host or not cand_pid.isdigit():
                continue        # another machine's: cannot tell whether it is still running
            if int(cand_pid) != os.getpid() and pid_alive(int(cand_pid)):
                continue        # another audit into the same --out is running
            discard_tree(cand, out)


# ----------------------------------------------------------------------------- publish

MAX_USER_FILES = 500          # more files of the user's in --out: replace in place instead


def _tmp_prefix(out: Path) -> str:
    name = out.name
    if len(name) > 80:          # keep the temporary name within NAME_MAX
        import hashlib

        name = name[:40] + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f".{name}{_TMP_TAG}"


def _check_out(out: Path) -> Path:
    out = Path(os.path.abspath(out))
    if out.is_symlink():
        out = Path(os.path.realpath(out))
    if out.exists() and not out.is_dir():
        raise InputError("--out exists and is not a directory", file=str(out),
                         fix="pass a directory path (it is created if missing)")
    if out.parent == out:
        raise InputError("--out cannot be the root directory", file=str(out),
                         fix="pass a directory for the report")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


class _CannotSwap(Exception):
    """The user's files in --out cannot be carried over by hard links: replace in place."""


def _user_files(out: Path, new_files: set[str], owned: set[str]) -> list[tuple[Path, str]]:
    found = []
    for path, rel in _walk_files(out):
        if rel in owned or rel == MANIFEST:
            continue
        if rel in new_files:
            raise InputError(f"--out already holds {rel}, which evalkit did not write",
                             file=str(out / rel),
                             fix="move that file away or choose another --out")
        found.append((path, rel))
        if len(found) > MAX_USER_FILES:
            raise _CannotSwap(f"--out holds more than {MAX_USER_FILES} files of its own")
    return found


def _link_user_files(out: Path, tmp: Path, user: list[tuple[Path, str]]) -> None:
    for dirpath, dirnames, _ in os.walk(out):     # the user's directories, modes kept
        for d in dirnames:
            src = Path(dirpath) / d
            if src.is_symlink():
                continue
            dest = tmp / src.relative_to(out)
            dest.mkdir(parents=True, exist_ok=True)
            os.chmod(dest, stat.S_IMODE(src.lstat().st_mode))
    for path, rel in user:
        dest = tmp / rel
        if path.is_symlink():
            os.symlink(os.readlink(path), dest)
            continue
        try:
            os.link(path, dest, follow_symlinks=False)
        except OSError as exc:
            raise _CannotSwap(f"cannot hard-link {rel}: {exc.strerror}") from exc


def publish(out_dir, files: dict[str, bytes]) -> Published:
    """Make ``out_dir`` hold exactly ``files`` (relative path -> bytes) plus the user's own
    files, replacing the previous report in one atomic step where the platform allows.

    An OSError that names no file (a full disk while writing) is raised as an InputError
    naming ``out_dir``."""
    try:
        return _publish(out_dir, files)
    except OSError as exc:
        if exc.filename:
            raise

        raise from_os_error(exc, path=str(out_dir), action="cannot write the report") \
            from exc


def _publish(out_dir, files: dict[str, bytes]) -> Published:
    out = _check_out(Path(out_dir))
    new_names = set(files)
    for rel in new_names:
        if not _safe_rel(rel) or rel == MANIFEST:
            raise ValueError(f"not a report-relative path: {rel!r}")
    clean_leftovers(out)
    owned = read_manifest(out) if out.is_dir() else set()
    manifest = _manifest(new_names)
    try:
        user = _user_files(out, new_names, owned) if out.is_dir() else []
    except _CannotSwap as why:
        return _publish_in_place(out, files, manifest, owned, str(why))
    umask = os.umask(0)
    os.umask(umask)
    tmp = out.parent / (_tmp_prefix(out)
                        + f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        tmp.mkdir()
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and out.is_dir() \
                and os.access(out, os.W_OK):
            return _publish_in_place(out, files, manifest, owned,
                                     "the parent directory of --out is not writable")
        raise
    try:
        os.chmod(tmp, stat.S_IMODE(out.stat().st_mode) if out.is_dir() else 0o777 & ~umask)
        # the manifest first: a kill while writing leaves a directory whose files are known
        _write(tmp / MANIFEST, manifest)
        dirs = {tmp}
        for rel, data in sorted(files.items()):
            dest = tmp / rel
            if dest.parent not in dirs:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dirs.add(dest.parent)
            _write(dest, data)
        if user:
            _link_user_files(out, tmp, user)
        for d in sorted((Path(p) for p, _, _ in os.walk(tmp)), key=lambda p: -len(p.parts)):
            fsync_dir(d)              # new files and the links to the user's files
        if not out.exists():
            os.rename(tmp, out)
            fsync_dir(out.parent)
            return Published(out, tuple(sorted(new_names)), True)
        swapped = _exchange(tmp, out)
    except _CannotSwap as why:
        discard_tree(tmp, out)
        return _publish_in_place(out, files, manifest, owned, str(why))
    except BaseException:
        discard_tree(tmp, out)
        raise
    if not swapped:
        discard_tree(tmp, out)
        return _publish_in_place(out, files, manifest, owned,
                                 "this file system or --out cannot be swapped atomically")
    fsync_dir(out.parent)
    left = discard_tree(tmp, out)
    if left:
        return Published(out, tuple(sorted(new_names)), True, kept_aside=tmp,
                         note=f"{len(left)} file(s) evalkit did not write were left in {tmp}")
    return Published(out, tuple(sorted(new_names)), True)


def _publish_in_place(out: Path, files: dict[str, bytes], manifest: bytes,
                      owned: set[str], why: str) -> Published:
    """Fallback: each file replaced atomically, the report as a whole is not."""
    for rel in files:
        target = out / rel
        if rel not in owned and os.path.lexists(target):
            raise InputError(f"--out already holds {rel}, which evalkit did not write",
                             file=str(target), fix="move that file away or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f"{_TMP_TAG}{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        # first record every file this replacement may leave behind, old and new: a kill
        # half-way leaves a --out whose evalkit files are all known
        _write(staging / MANIFEST, _manifest(owned | set(files)))
        os.replace(staging / MANIFEST, out / MANIFEST)
        fsync_dir(out)
        _write(staging / MANIFEST, manifest)
        for rel, data in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            _write(staging / rel, data)
        # figures first, the report files last: report.html appears when what it shows is there
        order = sorted(files, key=lambda r: (r in REPORT_FILES,
                                             REPORT_FILES.index(r) if r in REPORT_FILES else 0,
                                             r))
        for rel in order:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, out / rel)
            fsync_dir((out / rel).parent)
        for rel in sorted(owned - set(files) - {MANIFEST}):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (out / rel).unlink()
        os.replace(staging / MANIFEST, out / MANIFEST)
        fsync_dir(out)
    finally:
        discard_tree(staging, out)
    return Published(out, tuple(sorted(files)), False,
                     note=f"the report files were replaced one by one, not atomically ({why})")
