"""A hang in an in-process test fails that test instead of stalling the suite."""

from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def alarm_after(seconds: int, why: str):
    """Raise TimeoutError(``why``) in the main thread if the block runs past ``seconds``."""
    def expired(*_):
        raise TimeoutError(why)

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
