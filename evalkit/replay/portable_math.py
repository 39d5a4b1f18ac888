"""The exponential the simulator records, the same to the last bit on every CPU.

numpy's ``np.exp`` (and ``log``, ``power``, ``sin``, ...) picks a loop by CPU: its own AVX-512
code on hosts that have it, the C library's elsewhere, and the C library picks again between
an FMA build and a plain one.  These differ in the last bit, so a run log recorded on one
machine did not match the same seed's on another.  :func:`exp` below uses only operations
IEEE 754 rounds exactly (``+``, ``-``, ``*``, ``/``, ``rint``, ``ldexp``), each a separate
numpy call in a fixed order, so every CPU gives the same bits.  It is within about one unit
in the last place of the exact value: a simulated quantity, not a reference exponential.
"""

from __future__ import annotations

import math

import numpy as np

# ln 2 split in two: LN2_HI keeps 32 significant bits, so ``k * LN2_HI`` is exact for the
# |k| <= 1100 that finite results need, and LN2_LO carries the rest.
LN2_HI = float.fromhex("0x1.62e42feep-1")
LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
# exp(r) for |r| <= ln(2)/2 as its Taylor polynomial of degree 13 (the next term is below
# 2**-57 there); 1/i! is one correctly rounded division of exact integers
TAYLOR = tuple(1.0 / math.factorial(i) for i in range(14))
# beyond these, exp overflows to inf or underflows to 0 in double precision
OVERFLOW_ABOVE = 709.782712893384
UNDERFLOW_BELOW = -745.1332191019412


def exp(x):
    """``e ** x`` elementwise (an array or a float), bit-identical on every IEEE 754 CPU."""
    arr = np.asarray(x, dtype=float)
    finite = (arr >= UNDERFLOW_BELOW) & (arr <= OVERFLOW_ABOVE)
    xs = np.where(finite, arr, 0.0)
    k = np.rint(xs * INV_LN2)
    r = (xs - k * LN2_HI) - k * LN2_LO
    p = np.full_like(r, TAYLOR[-1])
    for c in TAYLOR[-2::-1]:
        p = p * r + c
    out = np.ldexp(p, k.astype(np.int64))
    out = np.where(finite, out, np.where(arr > OVERFLOW_ABOVE, np.inf, 0.0))
    out = np.where(np.isnan(arr), np.nan, out)
    return float(out) if out.ndim == 0 else out
