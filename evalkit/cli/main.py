"""The ``evalkit`` entry point.  Command modules add themselves via ``register(cli)``.

One handler (:func:`exit_code_for`) maps every outcome to an exit code with one meaning:
0 success, 1 claim not reached (``gate`` only), 2 bad input or environment (message names
the path and the fix), 3 internal error (traceback in a log file, not on the terminal),
4 not decided yet (``gate --sequential`` only: run more seeds), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import os
import platform
import sys
import tempfile
import traceback
from pathlib import Path

import click

from evalkit.heap import keep_freed_memory
from evalkit.version import __version__
from evalkit.errors import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK,
                            InputError, from_os_error)

COMMAND_MODULES = ("runs", "trace", "replay", "audit", "report", "imports", "serve", "sim",
                   "policies", "plan", "compare")
LOG_DIR_ENV = "EVALKIT_LOG_DIR"

EXIT_CODES_HELP = """\b
Exit codes (every command):
  0  success (gate: the claim reaches the tier)
  1  gate: the claim does not reach the tier (or, with --baseline, a tier
     dropped or the protocol's rules changed); diff --fail-on-protocol-change:
     the protocol's rules changed; compare --max-regression: B is
     significantly worse beyond the allowed regression
  2  bad input or environment: unreadable or invalid file, permission,
     read-only or invalid --out, a limit exceeded, a locked runs
     directory, runs that failed; the message names the path and the fix
  3  internal error (a bug): the traceback is written to a log file
     (EVALKIT_LOG_DIR, else ~/.local/state/evalkit/logs), not the terminal
  4  not decided yet (gate --sequential, compare --plan-file): run the next block
  130 interrupted (Ctrl-C)"""


def crash_log_dir() -> Path:
    """Where tracebacks of internal errors go: $EVALKIT_LOG_DIR, else the user's state dir."""
    if os.environ.get(LOG_DIR_ENV):
        return Path(os.environ[LOG_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"),
                                                              ".local", "state")
    return Path(state) / "evalkit" / "logs"


def write_crash_log(exc: BaseException, argv) -> Path | None:
    """Write the traceback and context to a new log file; None if no location is writable."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    text = (f"evalkit {__version__} internal error at {stamp}\n"
            f"command: evalkit {' '.join(map(str, argv or []))}\n"
            f"python {platform.python_version()} on {platform.platform()}\n\n"
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    for folder in (crash_log_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"evalkit-crash-{stamp}-{os.getpid()}.log"
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(text)
            return path
        except OSError:
            continue
    return None


def _echo_err(text: str) -> None:
    with contextlib.suppress(OSError):  # stderr itself is gone: nothing more to say
        click.echo(text, err=True)


def _silence_stdout() -> None:
    """After a broken pipe: send further output (and the final flush) to /dev/null."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def exit_code_for(exc: BaseException, argv=None) -> int:
    """Report ``exc`` on stderr and return the exit code it maps to."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or isinstance(code, int):
            return code or EXIT_OK
        _echo_err(str(code))
        return EXIT_BAD_INPUT
    if isinstance(exc, (KeyboardInterrupt, click.Abort)):
        _echo_err("\ninterrupted")
        return EXIT_INTERRUPTED
    if isinstance(exc, click.ClickException):        # usage errors, bad option values
        exc.show()
        return EXIT_BAD_INPUT
    if isinstance(exc, InputError):
        _echo_err(f"error: {exc.format()}")
        return EXIT_BAD_INPUT
    if isinstance(exc, BrokenPipeError):
        _silence_stdout()
        _echo_err("error: the output was closed early (broken pipe)")
        return EXIT_BAD_INPUT
    if isinstance(exc, OSError):
        _echo_err(f"error: {from_os_error(exc).format()}")
        return EXIT_BAD_INPUT
    if isinstance(exc, MemoryError):
        _echo_err("error: out of memory (fix: free memory, or reduce the input -- fewer runs, "
                  "seeds or resamples)")
        return EXIT_BAD_INPUT
    log = write_crash_log(exc, argv)
    what = f"{type(exc).__name__}: {str(exc)[:300]}"
    where = (f"the traceback is in {log}" if log is not None else
             "no log file could be written (set EVALKIT_LOG_DIR to a writable directory)")
    _echo_err(f"internal error (a bug in evalkit, not in your input): {what}\n"
              f"  {where}; please report it with that file")
    return EXIT_INTERNAL


class _Group(click.Group):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rv = super().main(args=argv, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else EXIT_OK
        except BaseException as exc:      # noqa: BLE001 - the one place that maps them all
            code = exit_code_for(exc, argv)
        if not standalone_mode:
            return code
        sys.exit(code)


@click.group(cls=_Group, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="evalkit")
def cli():
    """Audit whether a claimed serving-SLO improvement is real."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"evalkit.cli.{_name}").register(cli)


def main(argv=None):
    # the evalkit process owns its heap: a scan's run-sized arrays reuse freed memory
    # instead of faulting it in again (evalkit.heap); a library caller's process is left alone
    keep_freed_memory()
    cli.main(args=argv, prog_name="evalkit")


if __name__ == "__main__":
    main()
