"""Pair the runs of A with the runs of B: by seed, else trace, else repetition index.

A key pairs two sides when every run on each side has it, no value repeats on a side, and
both sides hold the same values.  Runs that share a key value are one pair; a key held by
every run but with values missing on one side is an error naming them (run them, or compare
unpaired on purpose with ``--pair-by none``).  When no key can pair the sides the comparison
is unpaired, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.compare.sources import Unit
from evalkit.errors import InputError

__all__ = ["KEYS", "Pairing", "pair_units"]

KEYS = ("seed", "trace", "repetition")
CHOICES = ("auto", *KEYS, "none")


@dataclass
class Pairing:
    key: str | None                          # the key that paired them; None: unpaired
    pairs: list[tuple[Unit, Unit]]           # (A run, B run), in key order
    a: list[Unit]
    b: list[Unit]
    reason: str                              # why this key (or why unpaired)

    @property
    def paired(self) -> bool:
        return self.key is not None


def _why_not(key: str, a: list[Unit], b: list[Unit]) -> str | None:
    """None when ``key`` pairs the sides; else the reason it cannot."""
    for side, units in (("A", a), ("B", b)):
        values = [u.key(key) for u in units]
        missing = [u.label for u, v in zip(units, values) if v is None]
        if missing:
            return f"{len(missing)} run(s) of {side} have no {key} (e.g. {missing[0]})"
        if len(set(values)) < len(values):
            seen, twice = set(), None
            for u, v in zip(units, values):
                if v in seen:
                    twice = (u.label, v)
                    break
                seen.add(v)
            return f"{key} {_show(twice[1])} occurs more than once on {side} ({twice[0]})"
    return None


def _show(value) -> str:
    return value[:12] if isinstance(value, str) else str(value)


def _unmatched(key: str, a: list[Unit], b: list[Unit]) -> InputError | None:
    va, vb = {u.key(key) for u in a}, {u.key(key) for u in b}
    if va == vb:
        return None
    only_a = sorted(va - vb, key=str)
    only_b = sorted(vb - va, key=str)
    if not va & vb:
        return None        # nothing in common: this key does not describe a pairing here
    parts = []
    if only_a:
        parts.append(f"A only: {', '.join(_show(v) for v in only_a[:10])}")
    if only_b:
        parts.append(f"B only: {', '.join(_show(v) for v in only_b[:10])}")
    return InputError(f"runs pair by {key} but not every {key} is on both sides "
                      f"({'; '.join(parts)})", column="--pair-by",
                      fix=f"run the missing {key}s on the other side, remove the unmatched "
                          "runs, or compare unpaired on purpose with --pair-by none")


def pair_units(a: list[Unit], b: list[Unit], *, pair_by: str = "auto") -> Pairing:
    """Pair ``a`` with ``b`` by ``pair_by`` ("auto": the first of :data:`KEYS` that can)."""
    if pair_by not in CHOICES:
        raise InputError(f"unknown pairing {pair_by!r}", column="--pair-by",
                         fix="use one of: " + ", ".join(CHOICES))
    if pair_by == "none":
        return Pairing(None, [], a, b, "unpaired on request (--pair-by none)")
    tried = []
    for key in (KEYS if pair_by == "auto" else (pair_by,)):
        why = _why_not(key, a, b)
        if why is None:
            problem = _unmatched(key, a, b)
            if problem is not None:
                raise problem
            va = {u.key(key) for u in a}
            if va == {u.key(key) for u in b}:
                by_b = {u.key(key): u for u in b}
                pairs = [(u, by_b[u.key(key)]) for u in sorted(a, key=lambda u: str(u.key(key))
                                                               if key == "trace" else u.key(key))]
                return Pairing(key, pairs, a, b, f"every run of A and B has a distinct {key} "
                                                 "and both sides hold the same ones")
            why = f"A and B have no {key} in common"
        if pair_by != "auto":
            raise InputError(f"cannot pair by {key}: {why}", column="--pair-by",
                             fix="use --pair-by auto, or --pair-by none to compare unpaired")
        tried.append(f"{key}: {why}")
    return Pairing(None, [], a, b, "no key pairs the runs (" + "; ".join(tried) + ")")
