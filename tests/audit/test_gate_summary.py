"""The gate's one-screen summary (evalkit/audit/gate.py:summary_lines): how many blocking
checks it lists and how it counts the rest."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalkit.audit.checks.core import Check
from evalkit.audit.gate import SUMMARY_CHECKS, summary_lines
from evalkit.audit.protocol import load_protocol


@pytest.mark.parametrize("n_blocking", [SUMMARY_CHECKS - 1, SUMMARY_CHECKS, SUMMARY_CHECKS + 2])
def test_the_summary_lists_five_blocking_checks_and_counts_the_rest(n_blocking):
    checks = [Check(f"check_{i}", "harness", False, True, "e", f"found {i}", "", True)
              for i in range(n_blocking)]
    out = summary_lines(SimpleNamespace(checks=checks), "harness", load_protocol("diloco-slo"))
    listed = [x for x in out if x.startswith("  [FAIL] harness/check_")]
    assert len(listed) == min(n_blocking, SUMMARY_CHECKS)
    more = [x for x in out if "more blocking checks" in x]
    assert more == ([f"  (+{n_blocking - SUMMARY_CHECKS} more blocking checks)"]
                    if n_blocking > SUMMARY_CHECKS else [])


@pytest.mark.parametrize("multiplicity, n_tested, said", [
    ("holm", 2, "(Holm-adjusted over 2 claims)"),
    ("holm", 1, "(unadjusted: one claim)"),
    ("none", 3, "(unadjusted over 3 claims: the protocol's multiplicity is none)"),
    ("none", 1, "(unadjusted: one claim)"),
])
def test_the_effect_line_says_whether_its_p_was_adjusted(multiplicity, n_tested, said):
    from evalkit.audit.gate import effect_line

    claim = {"mean_diff": 0.012, "ci": [0.004, 0.02], "p_adjusted": 0.031, "wins": 8,
             "n_seeds": 10}
    line = effect_line(claim, multiplicity, n_tested)
    assert line.startswith("  G = +1.20 pp") and f"p = 0.031 {said}" in line
