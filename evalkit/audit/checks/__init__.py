"""Named checks, MLPerf-checker style: a tier passes when all of its checks pass.

One module per tier family (:mod:`.harness`, :mod:`.transfer`, :mod:`.design`,
:mod:`.inference`, :mod:`.placement`, :mod:`.calibrated`, :mod:`.deployable`; the campaign-plan,
like-for-like and drift checks live in :mod:`evalkit.audit.plan_checks`,
:mod:`evalkit.audit.like_for_like` and :mod:`evalkit.audit.drift`).  Each check registers itself
and its parameters with the :func:`check` decorator (:mod:`.core`); importing this package
imports every family, so :data:`CHECKS` and :data:`CHECK_PARAMS` hold all of them.
:func:`run_check` turns an exception inside a check into a failed check naming the exception,
and a :class:`~evalkit.errors.NotEstimable` into a check that is not evaluable; each check
carries a :class:`Status` beside its ``expected`` / ``found`` text.
"""

from evalkit.audit.checks.core import (CHECK_CHOICES, CHECK_PARAMS, CHECK_TIERS, CHECKS,
                                       FAILURES, Check, Outcome, Status, _fmt, _listing, _seeds,
                                       check, derived_status, not_evaluable, run_check)
from evalkit.audit.checks.harness import deferral_baseline, fixed_cadence_baseline
from evalkit.audit.checks.transfer import transfer_ci_excludes_one, transfer_paired
from evalkit.audit.checks.design import (k_match, matched_random_present,
                                         merge_durations_match, open_loop_sending,
                                         pairing_real, policy_runs_complete,
                                         schedules_in_corridor)
from evalkit.audit.checks.inference import enough_seeds, gain_significant
from evalkit.audit.drift import execution_drift
from evalkit.audit.like_for_like import like_for_like
from evalkit.audit.plan_checks import (draws_as_planned, draws_phi_uniform, plan_complete,
                                       plan_rules, pre_registered)
from evalkit.audit.checks.placement import load_match, no_sync_present
from evalkit.audit.checks.calibrated import gain_explained_by_overlap, psi_fit
from evalkit.audit.checks.deployable import not_oracle, real_sidecar

__all__ = [
    "CHECKS", "CHECK_CHOICES", "CHECK_PARAMS", "CHECK_TIERS", "FAILURES", "Check", "Outcome",
    "Status", "check", "derived_status", "not_evaluable", "run_check",
    "fixed_cadence_baseline", "deferral_baseline", "transfer_ci_excludes_one",
    "transfer_paired", "matched_random_present", "k_match", "pairing_real",
    "policy_runs_complete", "schedules_in_corridor", "merge_durations_match",
    "open_loop_sending", "enough_seeds", "gain_significant", "execution_drift",
    "like_for_like", "plan_complete", "draws_as_planned", "plan_rules", "draws_phi_uniform",
    "pre_registered", "no_sync_present", "load_match", "psi_fit",
    "gain_explained_by_overlap", "not_oracle", "real_sidecar",
]
