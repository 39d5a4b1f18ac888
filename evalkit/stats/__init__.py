"""evalkit.stats: the statistical core of the audit (pure functions, result dataclasses).

Every result dataclass carries what a reader needs to check it (statistic, p, null size,
exact or Monte Carlo, method) and has ``to_dict()`` returning JSON-safe values.
"""

from evalkit.stats.bootstrap import BootstrapResult, bootstrap_ci, holm
from evalkit.stats.envelope import (MeasuredEnvelope, PlacementGain, ProxyEnvelope,
                                    matched_random_envelope, placement_gain, proxy_envelope)
from evalkit.stats.exposure import (Exposure, ExposureRegression, exposure,
                                    exposure_regression)
from evalkit.stats.loadmatch import LoadCheck, LoadMatchResult, load_match
from evalkit.stats.overlap import OverlapCost, RequestIndex, cost_curve, overlap_cost
from evalkit.stats.psi import PsiFit, fit_psi
from evalkit.stats.schedules import FeasibleClass, feasible_class, sample_schedules
from evalkit.stats.signflip import (SignFlipResult, min_attainable_p, seeds_needed,
                                    sign_flip_test)
from evalkit.stats.transfer import (CorrelationResult, RhoEstimate, TransferResult,
                                    effect_correlation, effect_size_transfer)

__all__ = [
    "BootstrapResult", "CorrelationResult", "Exposure", "ExposureRegression", "FeasibleClass",
    "LoadCheck", "LoadMatchResult", "MeasuredEnvelope", "OverlapCost", "PlacementGain",
    "ProxyEnvelope", "PsiFit", "RequestIndex", "RhoEstimate", "SignFlipResult",
    "TransferResult", "bootstrap_ci", "cost_curve", "effect_correlation",
    "effect_size_transfer", "exposure", "exposure_regression", "feasible_class", "fit_psi",
    "holm", "load_match", "matched_random_envelope", "min_attainable_p", "overlap_cost",
    "placement_gain", "proxy_envelope", "sample_schedules", "seeds_needed", "sign_flip_test",
]
