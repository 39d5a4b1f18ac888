"""``ClaimContext``: the exact permutation limit, seeds needed from the fewest draws, arrival
fingerprints, units and informative seeds."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.support.decision_stubs import claim, pair


@pytest.mark.parametrize("n_seeds, exact", [(11, True), (12, False)])
def test_claim_context_exact_permutation_limit(n_seeds, exact):
    # 3 draws per seed: 4^n label sets; the studentized statistic is not additive, so
    # exact means enumerating all of them: up to 2^22 = 4^11
    from evalkit.audit.context import ClaimContext

    fake = SimpleNamespace(draws_per_seed=np.full(n_seeds, 3.0))
    assert ClaimContext._exact_ok.fget(fake) is exact


@pytest.mark.parametrize("m, alternative, needed", [
    ([1, 3, 2], "two-sided", 6),        # the fewest draws decide: 2 * 2^-n <= 0.05 from n = 6
    ([3, 3, 3], "two-sided", 3),        # 2 * 4^-n <= 0.05 from n = 3
    ([3, 1], "greater", 5),             # 2^-n <= 0.05 from n = 5
    ([], "two-sided", 6),               # no draws known: one per seed
])
def test_claim_context_seeds_needed_from_the_fewest_draws(m, alternative, needed):
    from evalkit.audit.context import ClaimContext

    fake = SimpleNamespace(draws_per_seed=np.array(m, dtype=int), alpha=0.05,
                           alternative=alternative)
    assert ClaimContext.seeds_needed.func(fake) == needed


# --------------------------------------------------------------- the claim's design facts

def _design(pairs, runs=None, source="runs"):
    from evalkit.audit.context import ClaimContext

    c = ClaimContext.__new__(ClaimContext)
    c.claim = claim(pairs)
    c.campaign = SimpleNamespace(runs=runs if runs is not None else pd.DataFrame(
        {"run_id": [p.policy_run for p in pairs]}), source=source)
    c.alpha, c.alternative = 0.05, "two-sided"
    return c


def test_fingerprints_read_from_the_runs_table():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"],
                         "arrival_fingerprint": ["f1", "", None, "f2"],
                         "n_requests": [10, 5, 5, np.nan]})
    assert _design([pair(0)], runs).fingerprints == {"a": ("f1", 10), "d": ("f2", None)}
    assert _design([pair(0)], pd.DataFrame({"run_id": ["a"]})).fingerprints == {}


def test_units_merge_seeds_that_replayed_the_same_requests():
    pairs = [pair(s) for s in range(4)]
    runs = pd.DataFrame({"run_id": [p.policy_run for p in pairs],
                         "arrival_fingerprint": ["x", "y", "x", "x"],
                         "n_requests": [10, 10, 10, 11]})   # seed 3: same hash, other count
    c = _design(pairs, runs)
    assert [p.seed for p in c.units] == [0, 1, 3] and c.pseudo_replicates == [(2, 0)]
    assert c.effective_n == 3
    # without fingerprints every paired seed is its own unit
    assert _design(pairs).effective_n == 4 and _design(pairs).pseudo_replicates == []


def test_informative_seeds_are_those_whose_runs_differ():
    pairs = [pair(0, ks=(3, 3), vs=[0.1, 0.1], v_policy=0.1),          # all equal: no info
             pair(1, ks=(3, 3), vs=[0.1, 0.1 + 1e-9], v_policy=0.1),   # tiny but real
             pair(2, ks=(3,), vs=[0.3], v_policy=0.1),
             pair(3, ks=(3,), vs=[0.0], v_policy=0.0)]                 # zeros: no info
    c = _design(pairs)
    assert c.effective_n == 4 and c.informative_n == 2
    assert c.averaged_draws is True and list(c.draws_per_seed) == [2, 2, 1, 1]
    assert c.test_name == "studentized within-seed permutation test"
    assert c.design_min_p == pytest.approx(2 / (3 * 3 * 2 * 2))
    one = _design([pair(0), pair(1)])
    assert one.averaged_draws is False and one.test_name == "sign-flip test"
    table = _design([pair(0), pair(1)], source="summary")
    assert table.test_name.startswith("sign-flip test (one baseline row per seed")
    assert _design([]).design_min_p == 1.0 and _design([]).averaged_draws is False
