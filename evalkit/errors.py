"""Errors that describe bad input in terms a user can act on.

Every error raised for bad input is an :class:`InputError`: it names the file (or
run), the column or key at fault (a ``column`` that starts with ``--`` is a command-line
option, and is named as one), and a fix.  The CLI turns it into exit code 2, as it
does an ``OSError`` (permission, read-only file system, full disk, a name too long): see
:func:`from_os_error` and the exit codes below.
"""

from __future__ import annotations

import errno
import os

__all__ = ["EXIT_BAD_INPUT", "EXIT_CONTINUE", "EXIT_INTERNAL", "EXIT_INTERRUPTED",
           "EXIT_NOT_REACHED", "EXIT_OK", "InputError", "NotEstimable", "StoreLocked",
           "from_os_error"]

# Exit codes of every `evalkit` command: one meaning each.
EXIT_OK = 0              # success; for `gate`: the claim reaches the tier
EXIT_NOT_REACHED = 1     # `gate` only: the claim does not reach the tier
EXIT_BAD_INPUT = 2       # bad input or environment: the message names the path and the fix
EXIT_INTERNAL = 3        # a bug in evalkit: the traceback is in a log file
EXIT_CONTINUE = 4        # `gate --sequential` only: not decided yet, run more seeds
EXIT_INTERRUPTED = 130   # Ctrl-C (128 + SIGINT)


class InputError(ValueError):
    """Bad user input: a file, column or parameter that cannot be used as given."""

    def __init__(self, message: str, *, file: str | None = None, column: str | None = None,
                 fix: str | None = None):
        self.message = message
        self.file = None if file is None else str(file)
        self.column = column
        self.fix = fix
        super().__init__(self.format())

    def format(self) -> str:
        parts = []
        if self.file:
            parts.append(f"{self.file}")
        if self.column:
            parts.append(f"option {self.column}" if self.column.startswith("--")
                         else f"column/key '{self.column}'")
        where = (": ".join(parts) + ": ") if parts else ""
        text = f"{where}{self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class NotEstimable(InputError):
    """A quantity cannot be estimated from the data given (e.g. constant Φ for ψ)."""


class StoreLocked(InputError):
    """Another process holds the lock on a runs directory."""


_OS_FIXES = {
    errno.EACCES: "check the permissions: the user running evalkit needs read access to its "
                  "inputs and write access to --out (chmod/chown), or choose another path",
    errno.EPERM: "check the permissions and ownership of the path, or choose another path",
    errno.EROFS: "the file system is read-only: write to another --out",
    errno.ENOSPC: "the disk is full: free space or write to another --out",
    errno.EDQUOT: "the disk quota is exhausted: free space or write to another --out",
    errno.ENAMETOOLONG: "a file name is too long: use a shorter path or shorter names",
    errno.ENOENT: "check that the path exists",
    errno.ENOTDIR: "a part of the path is a file, not a directory: choose another path",
    errno.EISDIR: "the path is a directory: pass a file",
    errno.EEXIST: "the path already exists and is in the way: choose another path",
    errno.ELOOP: "the path has a symbolic-link loop: fix the links",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
    errno.ENFILE: "too many open files system-wide: retry later",
    errno.EXDEV: "the path crosses file systems: keep --out on one file system",
    errno.EIO: "an I/O error from the device: check the disk",
    errno.EPIPE: "the output was closed early (broken pipe)",
}


def from_os_error(exc: OSError, *, path=None, action: str | None = None) -> InputError:
    """An :class:`InputError` for an ``OSError``: what failed, on which path, and the fix."""
    where = path or exc.filename
    text = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename2 is not None and where == exc.filename:
        text += f" (-> {exc.filename2})"
    if action:
        text = f"{action}: {text}"
    code = exc.errno
    name = errno.errorcode.get(code, "") if code is not None else ""
    fix = _OS_FIXES.get(code, "check the path, its permissions and the file system")
    err = InputError(text + (f" [{name}]" if name else ""),
                     file=None if where is None else os.fsdecode(where), fix=fix)
    err.__cause__ = exc
    return err
