"""The ``tail_luck`` diagnostic: did the policy's runs miss the draws' upper tail by design, or
by luck?

Bursty V puts a few runs far above the rest.  A schedule that avoids bursts by design and an
exchangeable policy whose n runs happened to catch none look the same to every mean test at
small n (the study, ``tools/INFERENCE_STUDY.md``: an exchangeable policy on bursty V passes up
to 0.11 at n 20, m 5, about as often as ``(1 - q)^n`` for the draws' burst share q).  The
diagnostic reads the draws only:

* each seed's draws are centred by their median (robust to one burst among >= 3 draws), the
  residuals of all draws pooled; their scale is the MAD (``1.4826 median |r - median r|``);
* a run is in the **upper tail** when its residual exceeds ``TAIL_MADS`` scales;
* ``q``: the share of draws in the tail; ``chance = (1 - q)^n``: that n exchangeable policy
  runs hold none of it; ``more_seeds``: how many more seeds make that chance <= alpha.

``flagged`` when the draws have a tail, the policy's runs hold none and ``chance > alpha``:
the verdict then states the assumption a gain rests on (non-blocking; its words:
:func:`evalkit.document.words.tail_luck_text`).  The audit computes it on a claim's seeds, the
sequential gate on the seeds its decision used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalkit.stats.floored import MAD_TO_SD    # MAD of a normal sample -> its SD

__all__ = ["TAIL_MADS", "TailLuck", "tail_luck", "tail_luck_applies"]

TAIL_MADS = 3.0          # residual scales above the seed's median draw: the upper tail


@dataclass(frozen=True)
class TailLuck:
    """The diagnostic's numbers (``q``, ``chance``, ``more_seeds`` are None without a tail)."""

    n: int                    # independent seeds
    draws: int                # draws in all
    draws_in_tail: int
    policy_in_tail: int
    threshold: float | None   # residual above the seed's median draw that is "tail"
    q: float | None
    chance: float | None
    more_seeds: int | None
    alpha: float
    flagged: bool

    def to_dict(self) -> dict:
        return {"name": "tail_luck", "n": self.n, "draws": self.draws,
                "draws_in_tail": self.draws_in_tail, "policy_in_tail": self.policy_in_tail,
                "threshold": self.threshold, "tail_mads": TAIL_MADS, "q": self.q,
                "chance": self.chance, "more_seeds": self.more_seeds, "alpha": self.alpha,
                "flagged": self.flagged}


def _more_seeds(q: float, n: int, alpha: float) -> int:
    if q >= 1.0:
        return 0
    needed = math.ceil(math.log(alpha) / math.log1p(-q) - 1e-12)
    return max(0, needed - n)


def tail_luck_applies(draws) -> bool:
    """Whether :func:`tail_luck` can run on these seeds' draws: 2 seeds or more, and a seed
    with 2 draws or more (a single draw has no tail to miss).  The audit and the sequential
    gate both ask here."""
    return len(draws) >= 2 and max(np.size(d) for d in draws) >= 2


def tail_luck(policy, draws, alpha: float) -> TailLuck:
    """The diagnostic for n seeds: ``policy`` (n,) V of each seed's policy run, ``draws`` n
    arrays of that seed's draws' V."""
    pol = np.asarray(policy, dtype=float).reshape(-1)
    centres = np.array([float(np.median(d)) for d in draws])
    resid = np.concatenate([np.asarray(d, dtype=float) - c for d, c in zip(draws, centres)])
    n = int(pol.size)
    scale = MAD_TO_SD * float(np.median(np.abs(resid - np.median(resid))))
    if not scale > 0.0:
        return TailLuck(n, int(resid.size), 0, 0, None, None, None, None, float(alpha), False)
    threshold = TAIL_MADS * scale
    in_tail = int(np.count_nonzero(resid > threshold))
    policy_in_tail = int(np.count_nonzero(pol - centres > threshold))
    if in_tail == 0:
        return TailLuck(n, int(resid.size), 0, policy_in_tail, threshold, None, None, None,
                        float(alpha), False)
    q = in_tail / resid.size
    chance = (1.0 - q) ** n
    flagged = policy_in_tail == 0 and chance > alpha
    return TailLuck(n, int(resid.size), in_tail, policy_in_tail, threshold, q, chance,
                    _more_seeds(q, n, alpha), float(alpha), flagged)
