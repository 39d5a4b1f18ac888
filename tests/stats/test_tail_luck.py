"""The tail_luck diagnostic (evalkit/stats/tail_luck.py) on hand-made seeds: the tail, the
chance that exchangeable runs miss it, and when the verdict states it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.document.words import tail_luck_text
from evalkit.stats.floored import MAD_TO_SD
from evalkit.stats.tail_luck import TAIL_MADS, tail_luck, tail_luck_applies


def _draws(n_seeds: int, burst_at=()):
    """Each seed's draws are 1, 2, 3 around the median 2 (residuals -1, 0, 1: MAD 1); a seed in
    ``burst_at`` has two more, one at the median and one ``burst_at[seed]`` above it."""
    out = []
    for s in range(n_seeds):
        d = [1.0, 2.0, 3.0]
        if s in burst_at:
            d += [2.0, 2.0 + burst_at[s]]
        out.append(np.array(d))
    return out


def test_a_draw_exactly_at_the_threshold_is_not_in_the_tail_and_one_above_it_is():
    threshold = TAIL_MADS * (MAD_TO_SD * 1.0)
    at = tail_luck([2.0] * 10, _draws(10, {0: threshold}), 0.05)
    assert at.threshold == threshold and at.draws_in_tail == 0 and at.q is None
    above = tail_luck([2.0] * 10, _draws(10, {0: math.nextafter(threshold, math.inf)}), 0.05)
    assert above.draws_in_tail == 1
    # the policy's run by the same rule: at the threshold above its seed's median, not in it
    at_policy = tail_luck([2.0 + threshold] + [2.0] * 9, _draws(10, {0: 20.0}), 0.05)
    assert at_policy.threshold == threshold and at_policy.policy_in_tail == 0
    past = tail_luck([2.0 + math.nextafter(threshold, math.inf)] + [2.0] * 9,
                     _draws(10, {0: 20.0}), 0.05)
    assert past.policy_in_tail == 1


def test_chance_is_that_n_exchangeable_runs_miss_the_tail_and_more_seeds_bring_it_below_alpha():
    res = tail_luck([2.0] * 10, _draws(10, {0: 20.0, 1: 20.0}), 0.05)
    q = 2 / 34
    assert res.q == pytest.approx(q) and res.chance == pytest.approx((1 - q) ** 10)
    assert res.flagged and res.policy_in_tail == 0
    assert res.more_seeds == math.ceil(math.log(0.05) / math.log(1 - q)) - 10
    assert (1 - q) ** (10 + res.more_seeds) <= 0.05 < (1 - q) ** (9 + res.more_seeds)
    assert f"about {res.more_seeds} more seeds" in tail_luck_text(res)


def test_a_policy_run_in_the_tail_or_a_chance_below_alpha_is_not_flagged():
    caught = tail_luck([2.0] * 9 + [30.0], _draws(10, {0: 20.0, 1: 20.0}), 0.05)
    assert caught.policy_in_tail == 1 and not caught.flagged
    assert "1 of the policy's 10 runs lie in the draws' tail" in tail_luck_text(caught)
    many = tail_luck([2.0] * 20, _draws(20, {s: 20.0 for s in range(20)}), 0.05)
    assert many.chance == pytest.approx((1 - 20 / 100) ** 20) and many.chance <= 0.05
    assert many.more_seeds == 0 and not many.flagged
    assert "<= alpha = 0.05" in tail_luck_text(many)


def test_no_tail_or_no_spread_states_nothing():
    assert tail_luck_text(tail_luck([2.0] * 5, _draws(5), 0.05)) == ""
    flat = tail_luck([1.0] * 5, [np.ones(3)] * 5, 0.05)
    assert flat.threshold is None and not flat.flagged and tail_luck_text(flat) == ""
    assert flat.draws_in_tail == 0 and flat.policy_in_tail == 0 and flat.draws == 15


def test_more_seeds_is_0_when_the_seeds_there_are_reach_alpha_exactly():
    # 3 seeds, one burst among 11 draws: (1 - q)^3 is alpha itself, and log(alpha) /
    # log(1 - q) lands a hair above 3 in floating point; the seeds there are suffice
    res = tail_luck([2.0] * 3, _draws(3, {0: 20.0}), (1 - 1 / 11) ** 3)
    assert res.q == pytest.approx(1 / 11) and res.chance == res.alpha
    assert not res.flagged and res.more_seeds == 0


def test_tail_luck_applies_from_two_seeds_with_a_seed_of_two_draws():
    assert tail_luck_applies([[0.05, 0.06], [0.07]])
    assert tail_luck_applies([np.array([0.05, 0.06, 0.07]), np.array([0.04, 0.05])])
    assert not tail_luck_applies([[0.05, 0.06, 0.07]])            # one seed
    assert not tail_luck_applies([[0.05], [0.06], [0.07]])         # single draws: no tail
    assert not tail_luck_applies([])
