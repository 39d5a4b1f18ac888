"""The report built from the small bursty fixture campaign, shared by the report tests."""

from __future__ import annotations

import pytest

from evalkit.compose import run_audit
from tests.conftest import REPO


@pytest.fixture(scope="session")
def bursty_report(tmp_path_factory):
    """(AuditResult, report directory) of 'evalkit audit' on fixtures/campaigns/sim_bursty with
    seed 3, built once a session: the tests read the files, none writes into the directory."""
    out = tmp_path_factory.mktemp("report") / "out"
    result = run_audit(REPO / "fixtures" / "campaigns" / "sim_bursty", out, seed=3)
    return result, out
