"""Status lines on stderr for steps that take a while, on a terminal or not (a CI log).

:func:`step` names a step once it has run for :data:`AFTER_S` seconds, then again every
:data:`EVERY_S` seconds with the time so far; a step that ends sooner prints nothing, so quick
commands stay quiet.  :class:`Ticker` counts the units of a long step (a sweep's runs) where
no progress bar is drawn (stderr is not a terminal): a line every :data:`EVERY_S` seconds and
one at the end when it wrote any.  Both write only to a stream backed by a file descriptor (a
terminal, a pipe, a CI log file): a program that captures stderr in memory (``click``'s test
runner, ``contextlib.redirect_stderr``) parses what the command says, not status lines.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

__all__ = ["AFTER_S", "EVERY_S", "Ticker", "has_descriptor", "step"]

AFTER_S = 2.0        # a step that ends within this prints nothing
EVERY_S = 10.0       # then a line this often


def has_descriptor(stream) -> bool:
    """Whether ``stream`` writes to a file descriptor (not an in-memory capture)."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _say(stream, text: str) -> None:
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError):       # a closed or broken stderr never fails the work
        pass


@contextmanager
def step(label: str, stream=None):
    """Say ``label`` on stderr while the block runs longer than AFTER_S, every EVERY_S."""
    out = stream if stream is not None else sys.stderr
    if not has_descriptor(out):
        yield
        return
    start = time.monotonic()
    done = threading.Event()

    def watch():
        wait = AFTER_S
        while not done.wait(wait):
            _say(out, f"{label} ({time.monotonic() - start:.0f} s so far)")
            wait = EVERY_S

    watcher = threading.Thread(target=watch, name="evalkit-step", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


class Ticker:
    """``done of total`` lines for a long step without a progress bar."""

    def __init__(self, label: str, total: int, unit: str, stream=None):
        self.label, self.total, self.unit = label, int(total), unit
        self.out = stream if stream is not None else sys.stderr
        self.quiet = not has_descriptor(self.out)
        self.done = 0
        self.start = self.last = time.monotonic()
        self.wrote = False

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if not self.quiet and now - self.last >= EVERY_S:
            self.last = now
            self._line(now)

    def close(self) -> None:
        if self.wrote:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        self.wrote = True
        _say(self.out, f"{self.label}: {self.done} of {self.total} {self.unit}s "
                       f"({now - self.start:.0f} s)")
