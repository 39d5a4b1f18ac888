"""The merged F_K sampler and randomisation engine reproduce the recorded outputs bit for bit.

The audit's draws_as_planned check regenerates plan draws from their RNG seeds, and the
golden audits hold p-values and CIs: a sample or a p that moves by one ulp is a behaviour
change.  The records (``tests/recorded/stats_outputs.json``) were made from the code before
the merge, except ``edges_seq`` (the sequential sampler): it was recorded again when that
sampler's volume function stopped using ``np.power`` and a BLAS dot product, whose last bits
depend on the CPU (the first record, made on an AVX-512 host, failed on an AVX2 one).
"""

from __future__ import annotations

import functools
import json

import pytest

from tests.recorded import stats_cases as C

RECORDED = json.loads(C.OUTPUTS.read_text())
signflip_outputs = functools.cache(C.signflip_outputs)
permutation_outputs = functools.cache(C.permutation_outputs)


@pytest.mark.parametrize("name", sorted(C.SCHEDULES))
def test_sampled_schedules_are_bit_identical(name):
    assert C.schedule_outputs_one(name) == RECORDED["schedules"][name]


def recorded_fields(fresh: dict, recorded: dict) -> dict:
    """FRESH restricted to the recorded fields (new fields may be added, none may change)."""
    return {k: fresh.get(k, "<missing>") for k in recorded}


@pytest.mark.parametrize("name", sorted(C.SIGNFLIP))
def test_sign_flip_results_are_bit_identical(name):
    recorded = RECORDED["sign_flip"][name]
    assert recorded_fields(signflip_outputs()[name], recorded) == recorded


@pytest.mark.parametrize("name", sorted(C.PERMUTATION))
def test_permutation_results_are_bit_identical(name):
    recorded = RECORDED["permutation"][name]
    assert recorded_fields(permutation_outputs()[name], recorded) == recorded


def test_min_p_and_seeds_needed_are_unchanged():
    assert C.power_outputs() == RECORDED["power"]
