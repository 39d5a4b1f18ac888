"""One check of one claim, computed as the full audit computes it, without the claim's other
checks or the other claims.

An attack on one check (a lying run.json, an edited table) needs that check's outcome: the
claim's context here is the one :func:`evalkit.audit.claims.evaluate_claims` builds (the same
run set, regime and transfer evidence, protocol parameters and seed), and the check runs
through the same :func:`evalkit.audit.checks.core.run_check`.  Checks that read the
family's adjusted p-value (the gain's) are not for this: the multiplicity correction needs
every claim.  tests/audit/test_claims_one_check.py holds this to the full audit's checks.
"""

from __future__ import annotations

from evalkit.audit.checks.core import Check, run_check
from evalkit.audit.context import ClaimContext
from evalkit.audit.evidence import RegimeEvidence
from evalkit.audit.protocol import load_protocol, Protocol
from evalkit.audit.result import read_claims
from evalkit.audit.transfer_evidence import TransferEvidence
from evalkit.runlog.challenge import read_given

NEEDS_THE_FAMILY = ("gain_significant",)


def audit_checks(path, policy: str, names, regime: str | None = None,
                 protocol=None, seed: int = 0, challenge=None) -> dict[str, Check]:
    """``{name: Check}`` for the checks ``names`` of ``policy``'s claim (in ``regime`` when
    the campaign has several) on the campaign at ``path``; ``challenge``: the reviewer's
    challenge file, as :func:`evalkit.audit.audit_campaign` takes it."""
    names = [names] if isinstance(names, str) else list(names)
    bad = [n for n in names if n in NEEDS_THE_FAMILY]
    if bad:
        raise ValueError(f"{bad} read the family's adjusted p: run the whole audit")
    proto = protocol if isinstance(protocol, Protocol) else load_protocol(protocol)
    runset, claims = read_claims(path, proto)
    if challenge is not None:
        runset._cache["challenge"] = read_given(challenge)
    claim = [c for c in claims if c.policy == policy and regime in (None, c.regime)]
    if len(claim) != 1:
        raise ValueError(f"{len(claim)} claims of policy {policy!r} in regime {regime!r}")
    claim = claim[0]
    ctx = ClaimContext(claim, runset, proto, RegimeEvidence(runset, claim.regime),
                       TransferEvidence(runset, seed, proto.bootstrap_resamples), seed)
    tier_of = {name: tier.name for tier in proto.tiers for name in tier.checks}
    return {name: run_check(name, tier_of[name], ctx, proto.checks[name]) for name in names}


def audit_check(path, policy: str, name: str, **kwargs) -> Check:
    """:func:`audit_checks` for one check."""
    return audit_checks(path, policy, [name], **kwargs)[name]
