"""Which merge windows of an imported run fall inside the benchmarks they are meant for.

A merge log on the wrong clock (seconds from the benchmark's start read as Unix seconds, or
the reverse) puts every window outside every benchmark: imported as it is, a policy run would
have K = 0 and the audit would compare nothing.  These helpers find such windows so the
importer can say so, name ``--merge-clock``, and refuse a merging run with no window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CLOCK_FLAG", "Span", "clock_hint", "describe_outside", "describe_spans",
           "outside_every_span"]

UNIX_FLOOR_S = 1e8      # below this a "Unix time" is before 1973: the times are relative

CLOCK_FLAG = "--merge-clock"


@dataclass(frozen=True)
class Span:
    label: str          # "benchmark 0 (poisson@2.00)"
    start: float        # on the merge file's clock
    end: float


def outside_every_span(starts, ends, spans: list[Span]) -> np.ndarray:
    """(k,) bool: the window ``[start, end]`` overlaps none of ``spans``.

    starts, ends: (k,) window bounds on the spans' clock."""
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    overlaps = np.zeros(starts.shape, dtype=bool)
    for s in spans:
        overlaps |= (ends > s.start) & (starts < s.end)
    return ~overlaps


def clock_hint(starts, ends, clock: str) -> str:
    """What the window times look like when they do not fit ``clock``, or ''."""
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    if not starts.size:
        return ""
    lo, hi = float(starts.min()), float(ends.max())
    if clock == "absolute" and hi < UNIX_FLOOR_S:
        return (f"the windows ({lo:g}..{hi:g} s) look like seconds from the benchmark's "
                f"start, not Unix seconds: pass {CLOCK_FLAG} relative with --benchmark N")
    if clock == "relative" and lo >= UNIX_FLOOR_S:
        return (f"the windows ({lo:.3f}..{hi:.3f}) look like Unix seconds, not seconds from "
                f"the benchmark's start: pass {CLOCK_FLAG} absolute")
    return ""


def describe_spans(spans: list[Span], clock: str) -> str:
    where = "; ".join(f"{s.label}: {s.start:.3f}..{s.end:.3f}" for s in spans[:4])
    more = f"; +{len(spans) - 4} more" if len(spans) > 4 else ""
    return f"{clock} clock; {where}{more}"


def describe_outside(starts, ends, spans: list[Span], clock: str) -> str:
    """One sentence on the windows outside every span ('' when there are none)."""
    out = outside_every_span(starts, ends, spans)
    n_out, n = int(out.sum()), int(out.size)
    if not n_out:
        return ""
    hint = clock_hint(np.asarray(starts)[out], np.asarray(ends)[out], clock)
    return (f"{n_out} of {n} merge windows fall outside every benchmark's span "
            f"({describe_spans(spans, clock)}) and are not imported"
            + (f"; {hint}" if hint else f"; if their times are on the other clock, pass "
               f"{CLOCK_FLAG} {'relative' if clock == 'absolute' else 'absolute'}"))
