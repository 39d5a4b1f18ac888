"""evaluate_claims computes each check of a claim from the claim's context alone: one check
run by itself (tests/support/one_check.py, what attack tests use) is the check the full audit
computes (the golden documents hold the full audits), whatever else ran before it."""

from __future__ import annotations

import json

import pytest

from evalkit.audit.protocol import load_protocol
from tests.conftest import REPO
from tests.golden.compare import golden_path
from tests.support.one_check import audit_check, audit_checks, NEEDS_THE_FAMILY


@pytest.mark.parametrize("fixture, policy", [("real_oracle", "ewma"),
                                             ("real_oracle", "calibrated_offline"),
                                             ("sim_missing_no_sync", "wa")])
def test_each_check_alone_is_the_full_audits(fixture, policy):
    doc = json.loads(golden_path(fixture).read_text())
    claim = next(c for c in doc["claims"] if c["policy"] == policy)
    names = [c["name"] for c in claim["checks"] if c["name"] not in NEEDS_THE_FAMILY]
    alone = audit_checks(REPO / "fixtures" / "campaigns" / fixture, policy, names)
    full = {c["name"]: c for c in claim["checks"]}
    assert len(names) >= 15
    for name in names:
        assert (alone[name].passed, alone[name].found) == \
            (full[name]["passed"], full[name]["found"]), name


def test_the_gains_test_needs_the_whole_family_and_a_claim_must_be_named_once():
    camp = REPO / "fixtures" / "campaigns" / "sim_underpowered"
    with pytest.raises(ValueError, match="family"):
        audit_check(camp, "wa", "gain_significant")
    with pytest.raises(ValueError, match="0 claims"):
        audit_check(camp, "nobody", "like_for_like")
    assert audit_check(camp, "wa", "like_for_like", protocol=load_protocol()).passed is True
