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
