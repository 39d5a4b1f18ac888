"""Reading input files that may not be what their names say.

A run file, campaign or lock file can be a FIFO (opening it blocks until a writer comes,
reading it never ends) or a device (``run.json -> /dev/zero`` reports size 0 and never
reaches end of file).  :func:`open_regular` opens without blocking and refuses anything but
a regular file; :func:`read_bounded` stops after ``limit`` bytes actually read, whatever size
the file claims.  Both raise :class:`~evalkit.errors.InputError` naming the path (exit 2).
"""

from __future__ import annotations

import errno
import os
import stat

from evalkit.errors import InputError, from_os_error

__all__ = ["check_regular", "not_regular", "read_bounded", "read_input_bytes",
           "read_text_bounded"]

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))
CHUNK = 1 << 16


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path, mode: int, what: str) -> InputError:
    return InputError(f"{what} is {_kind(mode)}, not a regular file", file=str(path),
                      fix="replace it with a regular file (evalkit reads only regular files)")


def open_regular(path, what: str = "the file") -> int:
    """A read-only descriptor of ``path``, which must be (or link to) a regular file.

    Opened with ``O_NONBLOCK`` so a FIFO without a writer cannot block, then checked with
    ``fstat`` (no race between the check and the read).  ``OSError`` (missing, permission)
    propagates for the caller to word; a FIFO, device, socket or directory is an InputError.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path, what: str = "the file") -> None:
    """Raise unless ``path`` is a regular file (for readers that open by name: pyarrow)."""
    os.close(open_regular(path, what))


def read_bounded(path, limit: int, what: str = "the file", fix: str | None = None) -> bytes:
    """All of ``path`` (a regular file) if it holds at most ``limit`` bytes, else InputError.

    The bound is on bytes read, not on the size ``stat`` reports.
    """
    fd = open_regular(path, what)
    try:
        parts, total = [], 0
        while True:
            chunk = os.read(fd, min(CHUNK, limit + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InputError(f"{what} holds more than {limit:,} bytes", file=str(path),
                                 fix=fix or f"files of this kind are limited to {limit:,} bytes")
        return b"".join(parts)
    finally:
        os.close(fd)


def read_input_bytes(path, limit: int, what: str = "the file", *, action: str,
                     fix: str | None = None) -> bytes:
    """:func:`read_bounded`, with a missing file an InputError naming it and any other OSError
    the error :func:`~evalkit.errors.from_os_error` makes of it (``action`` says what failed)."""
    try:
        return read_bounded(path, limit, what, fix)
    except InputError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise InputError(f"{what} not found", file=str(path), fix="check the path") from None
        raise from_os_error(exc, path=str(path), action=action) from None


def read_text_bounded(path, limit: int, what: str = "the file", *, action: str,
                      fix: str | None = None) -> str:
    """:func:`read_input_bytes` decoded as UTF-8; bad UTF-8 becomes InputError."""
    raw = read_input_bytes(path, limit, what, action=action, fix=fix)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what} is not UTF-8 text", file=str(path),
                         fix="save it as UTF-8") from None
