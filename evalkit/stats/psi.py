"""Calibration map psi: isotonic (non-decreasing) fit of Vex on Phi, with eps_cal."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evalkit.errors import InputError, NotEstimable
from evalkit.stats._result import ResultMixin, as_finite_1d

__all__ = ["PsiFit", "fit_psi"]


def _pool_ties(phi: np.ndarray, vex: np.ndarray):
    """Unique Phi (u,), weighted mean Vex at each (u,), and the counts as weights (u,)."""
    x, inverse, counts = np.unique(phi, return_inverse=True, return_counts=True)
    y = np.bincount(inverse, weights=vex) / counts
    return x, y, counts.astype(float)


def _isotonic(phi, vex):
    x, y, w = _pool_ties(phi, vex)
    from sklearn.isotonic import IsotonicRegression   # heavy: imported on first use

    model = IsotonicRegression(increasing=True, out_of_bounds="clip")
    fitted = model.fit(x, y, sample_weight=w).predict(x)
    return x, fitted


def _interp(x, y, values):
    """Linear interpolation between fitted points, clipped outside (sklearn's predict)."""
    return np.interp(np.asarray(values, dtype=float), x, y)


@dataclass(frozen=True)
class PsiFit(ResultMixin):
    """Isotonic psi-hat with its calibration error.

    ``x`` (u,) unique Phi values, ``y`` (u,) the fitted non-decreasing Vex there; ``predict``
    interpolates linearly between them and is constant outside ``[x[0], x[-1]]`` (scikit-learn
    ``IsotonicRegression`` semantics).  ``eps_cal`` = max |Vex - psi(Phi)| in-sample;
    ``eps_cal_loso``: the same for each held-out group (seed) predicted by a fit on the other
    groups, maximised over groups; NaN with ``loso_reason`` when it cannot be computed.
    """

    x: np.ndarray
    y: np.ndarray
    eps_cal: float
    eps_cal_loso: float
    loso_reason: str
    mean_abs_residual: float
    residuals: np.ndarray
    n_points: int
    n_groups: int
    loso_per_group: dict = field(default_factory=dict)
    method: str = "isotonic non-decreasing (scikit-learn), ties in Phi pooled with summed weights"

    def predict(self, phi) -> np.ndarray:
        """psi-hat at Phi values of any shape."""
        return _interp(self.x, self.y, phi)


def fit_psi(phi, vex, groups=None) -> PsiFit:
    """Fit psi-hat: (n,) Phi, (n,) Vex, optional (n,) groups (seeds) for leave-one-seed-out.

    Constant Phi raises :class:`NotEstimable` (psi cannot be fitted from one Phi value).
    """
    phi = as_finite_1d(phi, "phi", min_size=2, what="runs")
    vex = as_finite_1d(vex, "vex", min_size=2, what="runs")
    if phi.size != vex.size:
        raise InputError(f"phi has {phi.size} values but vex has {vex.size}", column="vex",
                         fix="pass one Phi and one Vex per run")
    if np.ptp(phi) == 0:
        raise NotEstimable(f"Phi is constant ({phi[0]}) across all {phi.size} runs: psi cannot "
                           "be estimated", column="phi",
                           fix="calibration needs schedules with different overlap (e.g. "
                               "matched-random draws next to the policy)")
    x, y = _isotonic(phi, vex)
    residuals = vex - _interp(x, y, phi)
    eps_loso, reason, per_group, n_groups = math.nan, "", {}, 0
    if groups is None:
        reason = "no groups (seeds) given"
    else:
        groups = np.asarray(groups)
        if groups.shape != phi.shape:
            raise InputError(f"groups has shape {groups.shape}, expected {phi.shape}",
                             column="groups", fix="pass one seed per run")
        labels = np.unique(groups)
        n_groups = labels.size
        if n_groups < 2:
            reason = f"only {n_groups} group (seed): leave-one-seed-out needs at least 2"
        else:
            worst, skipped = 0.0, []
            for g in labels:
                held = groups == g
                if np.ptp(phi[~held]) == 0:
                    skipped.append(g)
                    continue
                xt, yt = _isotonic(phi[~held], vex[~held])
                err = float(np.max(np.abs(vex[held] - _interp(xt, yt, phi[held]))))
                per_group[g.item() if hasattr(g, "item") else g] = err
                worst = max(worst, err)
            if skipped:
                reason = (f"groups {[s.item() if hasattr(s, 'item') else s for s in skipped]} "
                          "leave a constant Phi when held out: leave-one-seed-out not estimable")
            else:
                eps_loso = worst
    return PsiFit(x=x, y=y, eps_cal=float(np.max(np.abs(residuals))), eps_cal_loso=eps_loso,
                  loso_reason=reason, mean_abs_residual=float(np.mean(np.abs(residuals))),
                  residuals=residuals, n_points=int(phi.size), n_groups=int(n_groups),
                  loso_per_group=per_group)
