"""``evalkit.gate``: the CI gate as a Python call, the same decision ``evalkit gate`` prints.

:func:`gate_document` is the one path from an input to a decision: the CLI calls it and
prints its lines, :func:`gate` calls it and returns a :class:`GateResult` of the claim's
numbers.  A pandas DataFrame is written as a summary table (CSV) into a temporary folder and
gated as that file, its rows in the order given.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from evalkit.audit.gate import (GateDecision, baseline_for, check_fresh, decide,
                                is_audit_document)
from evalkit.audit.protocol import load_protocol
from evalkit.audit.result import audit_campaign, find_claim, read_claims
from evalkit.audit.sequential import protocol_min_effect, sequential_verdicts
from evalkit.document.schema import load_audit
from evalkit.document.words import BETTER, WORSE, gain_state, worse_licensed
from evalkit.errors import InputError
from evalkit.runlog.plan import PLAN_FILE

__all__ = ["GateResult", "gate", "gate_document"]

DEFAULT_TIER = "matched_budget"


@dataclass(frozen=True)
class GateResult:
    """What the gate decided for one claim: ``passed`` (exit 0), the tier the audit reached,
    ``direction`` ("better" / "worse" / "not shown": "worse" only where the decision's false
    "worse" rate is measured <= 1.5 x nominal, so never from today's test), the claim's
    Holm-adjusted ``p_value``, ``effect`` (mean d, a share of requests), its ``ci``, the
    ``exit_code``, for a sequential decision ``seeds_used``, and ``assumptions``: what a gain
    rests on beyond the test, as the verdict states it (the audit's ``tail_luck`` and
    ``level_trend`` diagnostics when flagged, the shape of d: below 20 seeds always, from
    there on by Cochran's rule; a sequential pass computes both diagnostics and the shape of d
    on the seeds it used, with what the floor did at its deciding look); ``lines``: what the
    CLI prints."""

    passed: bool
    tier_reached: str | None
    direction: str
    p_value: float | None
    effect: float | None
    ci: tuple | None
    exit_code: int
    seeds_used: int | None = None
    lines: list = field(default_factory=list)
    assumptions: tuple = ()


def gate_document(input_path, policy: str, regime: str | None = None,
                  tier: str = DEFAULT_TIER, *, protocol=None, alpha=None, seed: int = 0,
                  accept_vouched: bool = False, challenge=None, baseline=None,
                  accept_protocol_change: bool = False, sequential: bool = False,
                  min_effect: float | None = None, verbose: bool = False, notes=None):
    """Audit (or read a fresh audit.json) and decide: returns (protocol, document, claim
    dictionary, :class:`GateDecision`).  ``notes``: a callable receiving the lines a run store
    view excludes (the CLI prints them on stderr)."""
    proto = load_protocol(protocol).with_alpha(alpha).with_accept_vouched(accept_vouched)
    proto.tier(tier)                     # unknown tier -> InputError -> exit 2
    base = (baseline_for(load_audit(baseline), baseline, proto, seed)
            if baseline is not None else None)   # a tier this protocol lacks -> exit 2
    if is_audit_document(input_path) and challenge is not None:
        raise InputError("--challenge is verified against the runs and their plan, which an "
                         "audit.json does not hold", file=str(input_path),
                         column="--challenge", fix="gate the runs directory: evalkit gate "
                                                   "RUNS --challenge CHALLENGE.json")
    # "reached" is the tier the audit reports, not one capped at the required tier; tiers
    # above the required one are evaluated only while the walk goes on
    if is_audit_document(input_path):
        doc = load_audit(input_path)
        check_fresh(doc, input_path, proto, seed, sequential=sequential)
    else:
        # a run store URL needs its client only when one is gated
        from evalkit.runlog.store_url import local_view

        with local_view(input_path) as (local, view):   # a run store URL: its complete runs
            read = read_claims(local, proto)
            find_claim(read[1], policy, regime, options=True)  # unknown: exit 2 first
            doc = audit_campaign(local, protocol=proto, seed=seed, walk_above=tier,
                                 claims_read=read, challenge=challenge).decision_dict()
            for note in view.notes() if view is not None else []:
                if notes is not None:
                    notes(note)
    claim = find_claim(doc["claims"], policy, regime, options=True)
    try:
        decision: GateDecision = decide(doc, claim, proto, tier, base,
                                        accept_protocol_change=accept_protocol_change,
                                        sequential=sequential, min_effect=min_effect,
                                        verbose=verbose)
    except InputError as err:
        raise _design_error_at_its_file(err, input_path) from None
    return proto, doc, claim, decision


def _design_error_at_its_file(err: InputError, input_path) -> InputError:
    """A planned design the sequential gate refuses, named where it is written: the
    audit.json's field, or for a runs directory its plan.json's (whose ``design`` the
    document's ``design.sequential`` copies, and whose campaign seeds its seed order)."""
    column = err.column or ""
    if err.file is not None or not column.startswith("design"):
        return err
    if is_audit_document(input_path):
        return InputError(err.message, file=str(input_path), column=column, fix=err.fix)
    if column.startswith("design.sequential"):
        column = "design" + column[len("design.sequential"):]
    elif column == "design.seed_order":
        column = "campaign.settings.seeds"
    return InputError(err.message, file=str(Path(str(input_path)) / PLAN_FILE), column=column,
                      fix="sweep the campaign again under a plan frozen by evalkit ('evalkit "
                          "plan freeze'), or restore the plan.json its runs carry the sha256 of")


def _direction(claim: dict, alpha: float) -> str:
    state = gain_state(claim.get("mean_diff"), claim.get("p_adjusted"), alpha)
    if state == BETTER:
        return "better"
    if state == WORSE and worse_licensed():
        return "worse"
    return "not shown"


def _number(x):
    return None if x is None or not math.isfinite(float(x)) else float(x)


def gate(source, policy: str, tier: str | None = None, accept_vouched: bool = False,
         sequential: bool = False, protocol=None, *, regime: str | None = None,
         seed: int = 0) -> GateResult:
    """Gate ``policy`` on ``source``: a runs directory, a summary table path (CSV/Parquet), a
    fresh audit.json, or a pandas DataFrame in the summary table's columns.  ``tier``: the
    tier it must reach (default matched_budget); ``protocol``: a bundled name or TOML path.
    Bad input raises :class:`evalkit.errors.InputError` (the CLI's exit 2)."""
    tier = DEFAULT_TIER if tier is None else tier
    kwargs = dict(regime=regime, tier=tier, protocol=protocol, seed=seed,
                  accept_vouched=accept_vouched, sequential=sequential)
    if _is_dataframe(source):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "summary.csv"
            source.to_csv(path, index=False)
            proto, doc, claim, decision = gate_document(path, policy, **kwargs)
    else:
        proto, doc, claim, decision = gate_document(source, policy, **kwargs)
    seeds_used = None
    assumptions = claim.get("assumptions") or ()
    if sequential:
        verdicts = sequential_verdicts(doc, proto, tier, protocol_min_effect(proto))
        mine = next(v for v in verdicts
                    if (v.regime, v.policy) == (claim["regime"], claim["policy"]))
        seeds_used = int(mine.seeds_used)
        assumptions = mine.assumptions
    ci = claim.get("ci")
    return GateResult(
        passed=decision.passed, tier_reached=claim.get("tier"),
        direction=_direction(claim, float(doc.get("alpha", proto.alpha))),
        p_value=_number(claim.get("p_adjusted")), effect=_number(claim.get("mean_diff")),
        ci=None if ci is None else tuple(_number(x) for x in ci),
        exit_code=decision.exit_code, seeds_used=seeds_used, lines=list(decision.lines),
        assumptions=tuple(str(x) for x in assumptions))


def _is_dataframe(source) -> bool:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency of the audit
        return False
    return isinstance(source, pd.DataFrame)
