"""``RegimeEvidence``: the reason it gives without run logs."""

from __future__ import annotations

import pandas as pd


def test_regime_evidence_reason_without_logs(tmp_path):
    from evalkit.audit.runset import load_runset
    from evalkit.audit.evidence import RegimeEvidence

    rows = [{"policy": p, "seed": s, "violation_rate": v} for s in range(3)
            for p, v in (("wa", 0.1), ("matched_random", 0.2), ("no_sync", 0.05))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    runset = load_runset(path)
    ev = RegimeEvidence(runset, runset.runs.regime.iloc[0])
    assert ev.psi is None and ev.phi_table is None
    assert ev.psi_reason.startswith("not evaluable") and "request/merge logs" in ev.psi_reason
