"""Named checks, MLPerf-checker style: a tier passes when all of its checks pass.

One module per tier family (:mod:`.harness`, :mod:`.transfer`, :mod:`.design`,
:mod:`.inference`, :mod:`.drift`, :mod:`.like_for_like`, :mod:`.plan` (the campaign's plan),
:mod:`.placement`, :mod:`.calibrated`, :mod:`.deployable`).  Each check registers itself and its
parameters with the :func:`check` decorator (:mod:`.core`); importing this package
imports every family, so :data:`CHECKS` and :data:`CHECK_PARAMS` hold all of them.
:func:`run_check` turns an exception inside a check into a failed check naming the exception,
and a :class:`~evalkit.errors.NotEstimable` into a check that is not evaluable; each check
carries a :class:`Status` beside its ``expected`` / ``found`` text.
"""

# importing a family registers its checks (in this order: the order of CHECKS)
from evalkit.audit.checks import core, harness, transfer, design, inference  # noqa: F401
from evalkit.audit.checks import drift, like_for_like, plan  # noqa: F401
from evalkit.audit.checks import placement, calibrated, deployable  # noqa: F401

__all__ = ["calibrated", "core", "deployable", "design", "drift", "harness", "inference",
           "like_for_like", "placement", "plan", "transfer"]
