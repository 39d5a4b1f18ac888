"""evalkit.stats: the statistical core of the audit (pure functions, result dataclasses).

Every result dataclass carries what a reader needs to check it (statistic, p, null size,
exact or Monte Carlo, method) and has ``to_dict()`` returning JSON-safe values.

Names are loaded on first access (PEP 562 ``__getattr__``): ``from evalkit.stats import
sign_flip_test`` imports only :mod:`evalkit.stats.randomisation`, so commands that never fit
psi or an OLS do not pay for scikit-learn, statsmodels and scipy.stats (~2-3 s of imports).
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it
_SOURCES = {
    "bootstrap": ("BootstrapResult", "bootstrap_ci", "holm"),
    "explained": ("ExplainedGain", "explained_gain"),
    "exposure": ("ExposureRegression", "exposure_regression"),
    "fk": ("FeasibleClass", "feasible_class", "sample_schedules"),
    "floored": ("FlooredTestResult", "floored_mean_test"),
    "loadmatch": ("LoadCheck", "LoadMatchResult", "load_match"),
    "overlap": ("OverlapCost", "RequestIndex", "cost_curve", "overlap_cost"),
    "psi": ("PsiFit", "fit_psi"),
    "randomisation": ("PermutationResult", "RandomisationResult", "SignFlipResult",
                      "min_attainable_p", "seeds_needed", "sign_flip_test",
                      "within_seed_permutation_test"),
    "transfer": ("DrainBin", "RhoSide", "TransferComparison", "fallback_rho",
                 "guard_band_transfer", "paired_rho", "paired_transfer"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"evalkit.stats.{module}"), name)
    globals()[name] = value          # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
