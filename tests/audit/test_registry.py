"""Oracle status from what a run.json names (evalkit/audit/registry.py:oracle_status): a
registered oracle class, or the run's own word wherever it says it."""

from __future__ import annotations

import pytest

from evalkit.audit.registry import oracle_status


@pytest.mark.parametrize("meta", [
    {"policy": "my_plugin", "oracle": True},
    {"policy": "my_plugin", "settings": {"effective": {"policy": {"name": "my_plugin",
                                                                  "oracle": True}}}},
])
def test_a_run_that_says_it_saw_the_future_is_an_oracle_wherever_it_says_it(meta):
    assert oracle_status(meta) == (True, "the run says it saw future information")


def test_a_run_naming_only_an_unregistered_class_is_unknown():
    oracle, why = oracle_status({"policy": "my_plugin", "settings": {
        "effective": {"policy": {"name": "my_plugin", "oracle": False}}}})
    assert oracle is None and "my_plugin" in why
