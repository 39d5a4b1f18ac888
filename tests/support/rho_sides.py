"""Hand-made transfer-estimator sides (``RhoSide``) for the transfer comparison tests."""

from __future__ import annotations

import numpy as np

from evalkit.stats import transfer as tp


# ------------------------------------------------------------------ comparison


def _side(method=tp.PAIRED, rho=1.5, ci=(1.2, 1.8), gm=1.4, nb=10, reps=None, gm_reps=None):
    reps = np.linspace(ci[0], ci[1], 101) if reps is None else reps
    gm_reps = np.linspace(1.2, 1.6, 101) if gm_reps is None else gm_reps
    return tp.RhoSide(method, rho, ci[0], ci[1], gm, 1.2, 1.6, 10, 10, 0, 2, 2, nb,
                      30.0, 101, 0, [], 0.0, [], True, False, "m", reps, gm_reps)
