"""The audit: which tier of the claim hierarchy each policy's evidence supports, and why.

``run_audit(input_path, out_dir)`` reads a campaign (runs directory or per-run summary
table), evaluates every (regime, policy) claim against a protocol and writes
``report.html``, ``report.md``, ``audit.json`` and the figures into ``out_dir``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evalkit import __version__
from evalkit.audit.campaign import Campaign, assemble_claims, load_campaign
from evalkit.audit.claims import ClaimResult, evaluate_claims
from evalkit.audit.protocol import Protocol, load_protocol
from evalkit.errors import InputError

__all__ = ["AuditResult", "Protocol", "load_protocol", "run_audit", "audit_campaign",
           "canonical_json"]

FLOAT_DIGITS = 10   # significant digits of every float in audit.json


def _normalise(obj):
    """JSON-safe, rounded, platform-stable values (NaN/inf -> None)."""
    if isinstance(obj, dict):
        return {str(k): _normalise(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_normalise(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_normalise(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if not math.isfinite(x):
            return None
        x = float(f"{x:.{FLOAT_DIGITS}g}")
        return 0.0 if x == 0 else x
    if obj is None or isinstance(obj, str):
        return obj
    try:
        import pandas as pd

        if obj is pd.NA or obj is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    return str(obj)


def canonical_json(obj) -> str:
    return json.dumps(_normalise(obj), sort_keys=True, indent=2, allow_nan=False,
                      ensure_ascii=False) + "\n"


@dataclass
class AuditResult:
    protocol: Protocol
    seed: int
    campaign: Campaign
    claims: list[ClaimResult]
    out_dir: Path | None = None
    files: dict = field(default_factory=dict)      # kind -> path relative to out_dir
    figures: dict = field(default_factory=dict)    # figure key -> file name
    published: object = None                       # report.publish.Published after writing

    @property
    def alpha(self) -> float:
        return self.protocol.alpha

    @property
    def verdict(self) -> str:
        """One line: the tier each claim reached."""
        return "; ".join(f"{c.regime}/{c.policy}: {c.tier or 'no tier'}" for c in self.claims)

    def claim(self, policy: str, regime: str | None = None) -> ClaimResult:
        found = [c for c in self.claims if c.policy == policy
                 and (regime is None or c.regime == regime)]
        if not found:
            have = ", ".join(f"{c.regime}/{c.policy}" for c in self.claims)
            raise InputError(f"no claim for policy {policy!r}"
                             + (f" in regime {regime!r}" if regime else ""),
                             column="policy", fix=f"claims in this campaign: {have}")
        if len(found) > 1:
            raise InputError(f"policy {policy!r} has claims in several regimes ("
                             + ", ".join(c.regime for c in found) + ")", column="regime",
                             fix="pick one with --regime")
        return found[0]

    def _scrub(self, text: str) -> str:
        root = self.campaign.runs_dir
        if root is not None:
            text = text.replace(str(root.resolve()), self.campaign.input_name)
            text = text.replace(str(root), self.campaign.input_name)
        return text

    def to_dict(self) -> dict:
        claims = []
        for c in self.claims:
            d = c.to_dict()
            d["figures"] = {k.split("/", 1)[1]: v for k, v in sorted(self.figures.items())
                            if k.startswith(f"{c.regime}\0{c.policy}/")}
            claims.append(d)
        regimes = {}
        for c in self.claims:
            ev = c.ctx.regime_evidence
            if c.regime in regimes:
                continue
            psi = ev.psi
            reg, reg_reason = ev.exposure
            regimes[c.regime] = {
                "psi": None if psi is None else {
                    "eps_cal": psi.eps_cal, "eps_cal_loso": psi.eps_cal_loso,
                    "n_runs": len(ev.phi_table)},
                "psi_reason": ev.psi_reason,
                "exposure_regression": None if reg is None else {
                    "r2": reg.r_squared, "slope": reg.slope, "p_value": reg.p_value,
                    "n_runs": reg.n, "explains_v": bool(reg.explains_v),
                    "threshold": reg.threshold},
                "exposure_reason": reg_reason,
            }
        transfer = {}
        for name, spec in sorted(self.protocol.checks.items()):
            if "mechanism" in spec.params and self.claims:
                try:
                    got = self.claims[0].ctx.transfer(spec)
                except Exception as exc:  # reported, and the transfer checks fail on it too
                    got = f"failed: {type(exc).__name__}: {exc}"
                transfer[spec["mechanism"]] = got
        out = {
            "transfer": transfer,
            "evalkit_version": __version__,
            "protocol": self.protocol.to_dict(),
            "alpha": self.protocol.alpha,
            "alternative": self.protocol.alternative,
            "seed": self.seed,
            "input": {"name": self.campaign.input_name, "kind": self.campaign.source,
                      "n_runs": int(len(self.campaign.runs)),
                      "excluded": self.campaign.excluded},
            "notes": self.campaign.notes,
            "pre_registration": _pre_registration(self.campaign),
            "regimes": regimes,
            "claims": claims,
        }
        return json.loads(self._scrub(json.dumps(_normalise(out))))

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


def _pre_registration(campaign) -> dict:
    """Whether the runs follow a campaign plan (the plan checks verify it) and its hash."""
    from evalkit.audit.plan_checks import NOT_PRE_REGISTERED, campaign_plan
    from evalkit.runlog.plan import plan_sha256

    plan = campaign_plan(campaign)
    if plan is None:
        return {"pre_registered": False, "plan_sha256": None, "text": NOT_PRE_REGISTERED}
    sha = plan_sha256(plan)
    return {"pre_registered": True, "plan_sha256": sha,
            "text": f"pre-registered (plan {sha[:12]}, created {plan['created_at']})"}


def audit_campaign(input_path, protocol=None, alpha=None, seed: int = 0,
                   max_tier: str | None = None, walk_above: str | None = None) -> AuditResult:
    """Evaluate a campaign without writing anything (``max_tier``, ``walk_above``: see
    evaluate_claims)."""
    proto = protocol if isinstance(protocol, Protocol) else load_protocol(protocol)
    proto = proto.with_alpha(alpha)
    campaign = load_campaign(input_path)
    baselines = sorted({pol for spec in proto.checks.values()
                        if spec.name in ("fixed_cadence_baseline", "deferral_baseline")
                        for pol in spec["policies"]})
    claims = assemble_claims(campaign, baseline_policies=baselines)
    return AuditResult(protocol=proto, seed=int(seed), campaign=campaign,
                       claims=evaluate_claims(campaign, claims, proto, seed=int(seed),
                                              max_tier=max_tier, walk_above=walk_above))


def run_audit(input_path, out_dir, protocol=None, alpha=None, seed: int = 0) -> AuditResult:
    """Audit ``input_path`` and publish report.html, report.md, audit.json and figures into
    ``out_dir`` atomically, leaving files evalkit did not write in place."""
    from evalkit.report.render import write_reports

    result = audit_campaign(input_path, protocol=protocol, alpha=alpha, seed=seed)
    # built in a temporary directory beside out_dir, then swapped in (report/publish.py)
    result.published = write_reports(result, Path(out_dir))
    result.out_dir = Path(out_dir)
    return result
