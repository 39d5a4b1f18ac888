"""Brute-force helpers of the within-seed permutation tests, shared by the randomisation and
inversion tests."""

from __future__ import annotations

from functools import partial

from evalkit.stats import randomisation as pm

# These tests pin the raw-mean engine, kept as statistic="mean"; the studentized default
# is checked against its own brute force in tests/stats/test_randomisation_permutation.py.
_raw_perm = partial(pm.within_seed_permutation_test, statistic="mean")


# --------------------------------------------------------------------------------------------
# within-seed permutation: brute force over label sets
# --------------------------------------------------------------------------------------------

def _label_value(v, j):
    """d_s when run j of the seed's runs v (policy first) is labelled the policy."""
    others = [x for i, x in enumerate(v) if i != j]
    return sum(others) / len(others) - v[j]
