"""Every registered check has a decision test (in tests/audit/checks/ or where named)."""

from __future__ import annotations

from evalkit.audit.checks import core as C


def test_every_registered_check_has_a_decision_test():
    tested = {"fixed_cadence_baseline", "deferral_baseline", "transfer_ci_excludes_one",
              "transfer_paired", "matched_random_present", "k_match", "pairing_real",
              "policy_runs_complete", "schedules_in_corridor", "merge_durations_match",
              "open_loop_sending", "enough_seeds", "gain_significant", "no_sync_present",
              "load_match", "psi_fit", "gain_explained_by_overlap", "not_oracle",
              "real_sidecar",
              "execution_drift"}           # its decisions: tests/audit/checks/test_drift.py
    # like for like and the plan checks: tests/audit/test_package_soundness_ii.py,
    # tests/audit/checks/test_plan.py, tests/audit/checks/test_plan_challenge.py
    tested |= {"like_for_like", "plan_complete", "draws_as_planned", "plan_rules",
               "draws_phi_uniform", "pre_registered", "registration"}
    assert set(C.CHECKS) == tested
