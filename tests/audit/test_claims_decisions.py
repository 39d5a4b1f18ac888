"""``ClaimResult``: the sign-flip line from the effective seeds and the oracle claim's bound
note."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from tests.support.decision_stubs import claim


@pytest.mark.parametrize("effective_n, shown", [(1, False), (2, True), (5, True)])
def test_claim_result_sign_flip_from_two_effective_seeds(effective_n, shown):
    from evalkit.audit.claims import ClaimResult

    sf = object()
    fake = SimpleNamespace(ctx=SimpleNamespace(effective_n=effective_n, sign_flip=sf))
    assert (ClaimResult.sign_flip.fget(fake) is sf) is shown


def test_oracle_claim_carries_the_bound_note(tmp_path):
    from evalkit.audit import audit_campaign

    rows = [{"policy": p, "seed": s, "violation_rate": v, "oracle": p == "wa"}
            for s in range(6) for p, v in (("wa", 0.1), ("matched_random", 0.2),
                                           ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    claim = audit_campaign(path).claim("wa")
    assert claim.data.oracle is True
    assert any(n.startswith("oracle policy: a bound") for n in claim.notes), claim.notes
