"""Seeds as independent replications: a seed listed twice is one replication counted twice.

The plan reader (:mod:`evalkit.runlog.plan`), the plan builder (:mod:`evalkit.replay.plan`)
and the sequential gate (:mod:`evalkit.audit.sequential`) refuse repeats with this one rule.
"""

from __future__ import annotations

__all__ = ["repeated_seeds"]


def repeated_seeds(seeds) -> list:
    """The values listed more than once in ``seeds`` (sorted; empty when all are distinct)."""
    seen, repeated = set(), set()
    for s in seeds:
        (repeated if s in seen else seen).add(s)
    return sorted(repeated, key=str)
