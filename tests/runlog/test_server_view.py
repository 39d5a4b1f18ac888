"""The engine's recorded aggregate view (evalkit/runlog/server_view.py): what makes one
usable, and the reason given for each kind of unusable one."""

from __future__ import annotations

import math

import pytest

from evalkit.runlog.server_view import SERVER_VIEW_NUMBERS, server_view_problem

GOOD = {"available": True, "requests": 120, "e2e_sum_s": 33.5, "rig_requests": 4,
        "rig_latency_bound_s": 0.0}


def test_a_view_with_every_number_non_negative_is_usable():
    assert server_view_problem(GOOD) is None
    assert server_view_problem({**GOOD, "requests": 0, "e2e_sum_s": 0}) is None


def test_a_view_the_engine_could_not_record_is_not_a_problem():
    assert server_view_problem({"available": False, "reason": "no /metrics"}) is None


@pytest.mark.parametrize("view, says", [
    ([1, 2], "server_view is list, not an object"),
    ({**GOOD, "available": "yes"}, "server_view.available must be true or false"),
    ({k: v for k, v in GOOD.items() if k != "available"},
     "server_view.available must be true or false"),
])
def test_a_view_that_is_not_a_view_says_what_it_is(view, says):
    assert server_view_problem(view) == says


@pytest.mark.parametrize("key", SERVER_VIEW_NUMBERS)
@pytest.mark.parametrize("value", [None, "12", True, -1, -0.5, math.nan, math.inf])
def test_each_number_must_be_a_finite_non_negative_number(key, value):
    assert server_view_problem({**GOOD, key: value}) == (
        f"server_view.{key} is {value!r}, not a non-negative number")
