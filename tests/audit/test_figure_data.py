"""What the regime figures draw (evalkit/audit/figure_data.py), on small stand-in evidence:
each figure only when there is something to draw, from the evidence's own numbers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.figure_data import PSI_GRID_POINTS, regime_figure_data


class _Psi:
    eps_cal = 0.004

    @staticmethod
    def predict(phi):
        return 0.05 + 0.1 * np.asarray(phi, dtype=float)


def _evidence(n_phi: int, exposure=(3.0, np.nan), psi=_Psi()):
    phi = pd.DataFrame({"run_id": [f"r{i}" for i in range(n_phi)],
                        "phi": np.linspace(0.1, 0.4, n_phi), "vex": np.full(n_phi, 0.01)})
    runs = pd.DataFrame({"run_id": ["ns", "p", "d"], "role": ["no_sync", "policy",
                                                            "matched_random"],
                         "policy": ["no_sync", "wa", "wa"],
                         "exposure_requests": [np.nan, *exposure],
                         "violation_rate": [0.05, 0.06, 0.07]})
    return SimpleNamespace(psi=psi, phi_table=phi, runs=runs,
                           exposure=(SimpleNamespace(r_squared=0.25),))


def test_one_run_of_phi_is_enough_for_the_psi_figure():
    out = regime_figure_data(_evidence(1))
    assert out["psi"]["run_id"] == ["r0"] and out["psi"]["phi"].tolist() == [0.1]
    grid = out["psi"]["grid_phi"]
    assert len(grid) == PSI_GRID_POINTS and grid[0] == 0.0
    assert grid[-1] == pytest.approx(0.1 * 1.05 + 1e-9)
    assert out["psi"]["grid_psi"] == pytest.approx(0.05 + 0.1 * grid)
    assert out["psi"]["eps_cal"] == 0.004


def test_no_psi_figure_without_a_fit_or_without_phi_rows():
    assert "psi" not in regime_figure_data(_evidence(0))
    assert "psi" not in regime_figure_data(_evidence(3, psi=None))


def test_the_exposure_figure_leaves_out_no_sync_and_needs_one_finite_exposure():
    out = regime_figure_data(_evidence(2))
    assert out["exposure"]["run_id"] == ["p", "d"] and out["exposure"]["r2"] == 0.25
    assert out["exposure"]["violation_rate"].tolist() == [0.06, 0.07]
    assert "exposure" not in regime_figure_data(_evidence(2, exposure=(np.nan, np.nan)))
