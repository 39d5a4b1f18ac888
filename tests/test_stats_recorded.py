"""The merged F_K sampler and randomisation engine reproduce the recorded outputs bit for bit.

The audit's draws_as_planned check regenerates plan draws from their RNG seeds, and the
golden audits hold p-values and CIs: a sample or a p that moves by one ulp is a behaviour
change.  The records (``tests/recorded/stats_outputs.json``) were made from the code before
the merge.
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


@pytest.mark.parametrize("name", sorted(C.SIGNFLIP))
def test_sign_flip_results_are_bit_identical(name):
    assert signflip_outputs()[name] == RECORDED["sign_flip"][name]


@pytest.mark.parametrize("name", sorted(C.PERMUTATION))
def test_permutation_results_are_bit_identical(name):
    assert permutation_outputs()[name] == RECORDED["permutation"][name]


def test_min_p_and_seeds_needed_are_unchanged():
    assert C.power_outputs() == RECORDED["power"]
