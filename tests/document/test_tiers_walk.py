"""The tier walk: where it stops, which blocker it names, and when a not-evaluable or vouched
check blocks."""

from __future__ import annotations

from types import SimpleNamespace

from evalkit.audit.checks import core as C
from evalkit.audit.protocol import TierSpec
from evalkit.document.tiers import tier_walk


# ------------------------------------------------------------------------------ tier walk

def _check(name, tier, passed, evaluable=True, vouched=False):
    blocking = passed is False or (not evaluable and not vouched)
    return C.Check(name, tier, passed, evaluable, "e", f"{name} found", "r", blocking, vouched)


def _protocol(skip=("a",)):
    tiers = tuple(TierSpec(n, n, n in skip, (n + "1", n + "2")) for n in ("a", "b", "c"))
    return SimpleNamespace(tiers=tiers)


def test_tier_walk_all_pass():
    cs = [_check(f"{t}{i}", t, True) for t in "abc" for i in (1, 2)]
    reached, status, reason = tier_walk(_protocol(), cs)
    assert reached == "c" and set(status.values()) == {"passed"}
    assert reason == "every tier of the protocol is supported"


def test_tier_walk_failed_stops_and_names_first_blocker():
    cs = [_check("a1", "a", True), _check("a2", "a", True), _check("b1", "b", False),
          _check("b2", "b", False), _check("c1", "c", True), _check("c2", "c", True)]
    reached, status, reason = tier_walk(_protocol(), cs)
    assert reached == "a" and status["b"] == "failed" and status["c"] == "passed"
    assert reason.startswith("stops before b (failed): b1: b1 found") and "(+1 more)" in reason


def test_tier_walk_not_evaluable_skipped_only_when_allowed():
    cs = [_check("a1", "a", None, False), _check("a2", "a", None, False),
          _check("b1", "b", True), _check("b2", "b", True)]
    reached, status, _ = tier_walk(_protocol(skip=("a",)), cs + [_check("c1", "c", True)])
    assert status["a"] == "not_evaluable" and reached == "c"
    reached, status, reason = tier_walk(_protocol(skip=()), cs + [_check("c1", "c", True)])
    assert reached is None and reason.startswith("stops before a (not evaluable): a1")


def test_tier_walk_mixed_tier_with_unevaluable_blocker_fails():
    # one check passed, one could not be evaluated (and is not vouched): the tier failed
    cs = [_check("a1", "a", True), _check("b1", "b", True), _check("b2", "b", None, False),
          _check("c1", "c", True)]
    reached, status, reason = tier_walk(_protocol(skip=("b",)), cs)
    assert status["b"] == "failed" and reached == "a"
    assert "stops before b (failed): b2" in reason and "more" not in reason


def test_tier_walk_vouched_check_does_not_block():
    cs = [_check("a1", "a", True), _check("b1", "b", True),
          _check("b2", "b", None, False, vouched=True), _check("c1", "c", True)]
    reached, status, _ = tier_walk(_protocol(), cs)
    assert status["b"] == "passed" and reached == "c"
    # a tier whose only checks are vouched was not evaluated at all
    cs = [_check("a1", "a", True), _check("b1", "b", None, False, vouched=True),
          _check("c1", "c", True)]
    reached, status, reason = tier_walk(_protocol(), cs)
    assert status["b"] == "not_evaluable" and reached == "a"
    assert reason == "stops before b (not evaluable)"


def test_tier_walk_stops_at_first_gap_even_if_higher_pass():
    cs = [_check("a1", "a", False), _check("b1", "b", True), _check("c1", "c", True)]
    reached, status, reason = tier_walk(_protocol(skip=()), cs)
    assert reached is None and status["b"] == "passed" and reason.startswith("stops before a")
