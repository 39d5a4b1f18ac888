"""Keep freed heap memory for reuse while scanning runs (glibc; elsewhere nothing happens).

A scan allocates and frees arrays of a run's length (hundreds of KB each) thousands of
times.  glibc gives such blocks their own memory map, or trims the heap once they are
freed, so every new array pays its page faults again: on the benchmark store that was
about 280,000 faults and a quarter of the scan's time.  Raising the two thresholds once
keeps freed memory in the process for the next run's arrays; the process then holds up
to :data:`TRIM_BYTES` of free heap per allocation arena that it would have returned.
Only the ``evalkit`` command sets it (its process is its own); the library never changes
the heap of a process that imports it.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

M_TRIM_THRESHOLD = -1          # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20          # glibc's largest mmap threshold on 64-bit machines
TRIM_BYTES = 256 << 20

_taken: bool | None = None     # the answer of the first call


def keep_freed_memory() -> bool:
    """Set the thresholds once per process; True when glibc took them."""
    global _taken
    if _taken is None:
        _taken = _set_thresholds()
    return _taken


def _set_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):          # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
