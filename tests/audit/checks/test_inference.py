"""Decisions of the inference checks (``enough_seeds``, ``gain_significant``) on a stub
context, at and on both sides of each threshold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evalkit.audit.checks import inference as C

from tests.support.decision_stubs import ctx, spec


def _seeds_ctx(n, needed, dup=(), tied=0):
    # the test reaches alpha = 0.05 (two-sided) from `needed` seeds on
    return ctx(effective_n=n + tied, informative_n=n, seeds_needed=needed,
               pseudo_replicates=list(dup), test_name="sign-flip test",
               design_min_p=0.01 if n >= needed else 0.5)


@pytest.mark.parametrize("n, min_seeds, needed, passed", [
    (5, 5, 5, True), (4, 5, 5, False), (6, 5, 6, True), (5, 5, 6, False), (6, 6, 1, True),
    (5, 6, 1, False)])
def test_enough_seeds_edges(n, min_seeds, needed, passed):
    out = C.enough_seeds(_seeds_ctx(n, needed), spec(min_seeds=min_seeds))
    if not passed:      # the message names the rule that blocks
        floor, p_rule = n < min_seeds, n < needed
        assert ("minimum of" in out.found) is floor
        assert ("the test needs >=" in out.found) is p_rule
    assert out.passed is passed
    if not passed:
        assert out.found.startswith("underpowered")
        assert f">= {max(min_seeds, needed)} seeds" in out.recommendation


def test_enough_seeds_below_two_and_pseudo_replicates():
    out = C.enough_seeds(_seeds_ctx(1, 5), spec(min_seeds=5))
    assert out.passed is False and "no paired test" in out.found
    # two seeds are a paired test, only an underpowered one
    out = C.enough_seeds(_seeds_ctx(2, 5), spec(min_seeds=5))
    assert out.passed is False and out.found.startswith("underpowered")
    assert "no paired test" not in out.found
    out = C.enough_seeds(_seeds_ctx(5, 5, [(7, 3)]), spec(min_seeds=5))
    assert out.passed is True and "7 = 3" in out.found
    # seeds whose runs all tie do not count towards the seeds needed
    out = C.enough_seeds(_seeds_ctx(4, 5, tied=2), spec(min_seeds=5))
    assert out.passed is False and "2 seed(s) whose policy run and draws" in out.found


class _SF(SimpleNamespace):
    pass


def _gain_ctx(p, p_adj, stat=0.02, min_p=1 / 64, n=6, multiplicity="holm"):
    sf = _SF(statistic=stat, ci_low=0.0, ci_high=0.04, n=n, p_value=p, exact=True, min_p=min_p)
    return ctx(effective_n=n, informative_n=n, sign_flip=sf, p_adjusted=p_adj, d=np.full(n, np.sign(stat)),
               protocol=SimpleNamespace(multiplicity=multiplicity, accept_vouched=False),
               test_name="sign-flip test", seeds_needed=6,
               paired=SimpleNamespace(reference="t, 5 df; the draws' variance floor binds"))


@pytest.mark.parametrize("p, p_adj, passed", [
    (0.01, 0.05, True),          # adjusted exactly at alpha
    (0.01, 0.0501, False),       # raw p significant, adjusted not: the decision is adjusted
    (0.06, 0.03, True),          # (adjusted below raw cannot happen with Holm; rule check)
    (0.05, 0.05, True), (0.0501, 0.0501, False)])
def test_gain_significant_decides_on_adjusted_p(p, p_adj, passed):
    out = C.gain_significant(_gain_ctx(p, p_adj), spec(min_effect=0.005))
    assert out.passed is passed
    assert "Holm-adjusted" in out.expected


def test_gain_significant_direction_min_p_and_n():
    # a significant negative gain is "not better": the claim test's measured false "worse"
    # rate (0.092) exceeds 1.5 x nominal, so the side is never named
    out = C.gain_significant(_gain_ctx(0.01, 0.01, stat=-0.02), spec(min_effect=0.005))
    assert out.passed is False and "not better" in out.found and "WORSE" not in out.found
    out = C.gain_significant(_gain_ctx(0.01, 0.01, stat=0.0), spec(min_effect=0.005))
    assert out.passed is False and "not better" in out.found and "WORSE" not in out.found
    out = C.gain_significant(_gain_ctx(0.5, 0.5, stat=0.02), spec(min_effect=0.005))
    assert out.passed is False and "not significant" in out.found
    # min_p exactly at alpha is reachable; above alpha is underpowered
    assert C.gain_significant(_gain_ctx(0.05, 0.05, min_p=0.05), spec(min_effect=0.005)).passed is True
    out = C.gain_significant(_gain_ctx(0.01, 0.01, min_p=0.0625), spec(min_effect=0.005))
    assert out.passed is False and out.found.startswith("underpowered")
    out = C.gain_significant(_gain_ctx(0.01, 0.01, n=1), spec(min_effect=0.005))
    assert out.evaluable is False
    assert C.gain_significant(_gain_ctx(0.01, 0.01, n=2, min_p=0.01), spec(min_effect=0.005)).passed is True
    out = C.gain_significant(_gain_ctx(0.01, 0.01, multiplicity="none"), spec(min_effect=0.005))
    assert "Holm" not in out.expected and "adjusted" not in out.found
