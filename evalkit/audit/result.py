"""The audit document (``audit.json``): what every claim reached and why, complete enough to
present without the runs.

:class:`AuditResult` holds the live evaluation; :meth:`AuditResult.to_dict` is the document,
the one thing that crosses from deciding to presenting.  Besides the claims, checks and tiers
it holds the provenance (computed here, where the runs were read), the data every figure draws
(:mod:`evalkit.audit.figure_data`) with the figure file names, and each claim's load-match
rows.  ``schema`` names its version (:data:`evalkit.document.schema.AUDIT_SCHEMA`); a reader
refuses any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from evalkit.version import __version__
from evalkit.audit.checks.plan import (NOT_PRE_REGISTERED, campaign_plan,
                                       registration_summary)
from evalkit.audit.claims import ClaimResult, evaluate_claims
from evalkit.audit.design import planned_design
from evalkit.audit.figure_data import (claim_figure_data, figure_paths, load_match_rows,
                                       regime_figure_data)
from evalkit.audit.protocol import Protocol, load_protocol
from evalkit.audit.provenance import provenance
from evalkit.audit.runset import RunSet, assemble_claims, load_runset
from evalkit.errors import InputError
from evalkit.document.schema import AUDIT_SCHEMA
from evalkit.jsonio import FLOAT_DIGITS, canonical_json, to_jsonable
from evalkit.progress import step
from evalkit.runlog.challenge import read_given
from evalkit.runlog.plan import plan_sha256

__all__ = ["AuditResult", "audit_campaign", "document_files", "find_claim", "read_claims"]


@dataclass
class AuditResult:
    protocol: Protocol
    seed: int
    runset: RunSet
    claims: list[ClaimResult]
    out_dir: Path | None = None
    document: dict | None = None     # to_dict() as published (set when the report is written)
    published: object = None         # report.publish.Published after writing

    @property
    def alpha(self) -> float:
        return self.protocol.alpha

    @property
    def verdict(self) -> str:
        """One line: the tier each claim reached."""
        return "; ".join(f"{c.regime}/{c.policy}: {c.tier or 'no tier'}" for c in self.claims)

    def claim(self, policy: str, regime: str | None = None) -> ClaimResult:
        return find_claim(self.claims, policy, regime)

    def _scrub(self, text: str) -> str:
        root = self.runset.runs_dir
        if root is not None:
            text = text.replace(str(root.resolve()), self.runset.input_name)
            text = text.replace(str(root), self.runset.input_name)
        return text

    def to_dict(self) -> dict:
        """The audit document: plain JSON values, floats to FLOAT_DIGITS significant digits
        (the figure data unrounded), the runs directory's path replaced by the input's
        name."""
        claims, drawn = [], {"claims": [], "regimes": {}}
        for c in self.claims:
            d = c.to_dict()
            d["load_match"] = load_match_rows(c, self.protocol)
            claims.append(d)
            drawn["claims"].append(claim_figure_data(c, self.seed))
        regimes = {}
        for c in self.claims:
            if c.regime not in regimes:
                regimes[c.regime] = _regime_dict(c.ctx.regime_evidence)
                drawn["regimes"][c.regime] = regime_figure_data(c.ctx.regime_evidence)
        transfer = {}
        for name, spec in sorted(self.protocol.checks.items()):
            if "mechanism" in spec.params and self.claims:
                try:
                    got = self.claims[0].ctx.transfer(spec)
                except Exception as exc:  # reported, and the transfer checks fail on it too
                    got = f"failed: {type(exc).__name__}: {exc}"
                transfer[spec["mechanism"]] = got
        out = {
            **self._head(),
            "transfer": transfer,
            "pre_registration": _pre_registration(self.runset),
            "provenance": provenance(self.runset, self.protocol),
            "regimes": regimes,
            "claims": claims,
        }
        out = self._plain(out, FLOAT_DIGITS)
        # figure data unrounded: a drawing moves with the last bits of its coordinates, and a
        # re-rendered report must draw the same pixels as the first
        drawn = self._plain(drawn, None)
        for d, data in zip(out["claims"], drawn["claims"]):
            d["figure_data"] = data
        for regime, data in drawn["regimes"].items():
            out["regimes"][regime]["figure_data"] = data
        _name_figures(out)
        return out

    def decision_dict(self) -> dict:
        """The part of the audit document a decision reads, as :meth:`to_dict` writes it: the
        layout, version, protocol, seed, input (with the excluded runs), notes, the planned
        design and every claim; without the regimes' fits, the transfer summary, the
        load-match rows and the figure data, which only the report draws (so a gate whose walk
        stopped below a tier never fits what that tier needs)."""
        return self._plain({**self._head(), "claims": [c.to_dict() for c in self.claims]},
                           FLOAT_DIGITS)

    def _head(self) -> dict:
        return {
            "schema": AUDIT_SCHEMA,
            "evalkit_version": __version__,
            "protocol": self.protocol.to_dict(),
            "alpha": self.protocol.alpha,
            "alternative": self.protocol.alternative,
            "seed": self.seed,
            "input": {"name": self.runset.input_name, "kind": self.runset.source,
                      "n_runs": int(len(self.runset.runs)),
                      "excluded": self.runset.excluded},
            "notes": self.runset.notes,
            "design": planned_design(self.runset),
        }

    def _plain(self, obj, digits):
        return json.loads(self._scrub(json.dumps(to_jsonable(obj, digits))))

    def to_json(self) -> str:
        # rounded already where the document rounds (its figure data on purpose not)
        return canonical_json(self.to_dict(), digits=None)


    @property
    def files(self) -> dict:
        """The report's files, relative to out_dir: ``{html, md, json, figures: [paths]}``."""
        return document_files(self.document if self.document is not None else self.to_dict())


def find_claim(claims, policy: str, regime: str | None = None, *, options: bool = False):
    """The one claim of ``claims`` (objects or audit.json dictionaries with ``policy`` and
    ``regime``) for ``policy``; InputError listing the claims there are when none or several
    match.  ``options``: the policy and regime came from the command line's ``--policy`` and
    ``--regime``, and the error names those options."""
    def field(c, key):
        return c[key] if isinstance(c, dict) else getattr(c, key)
    dashes = "--" if options else ""
    found = [c for c in claims if field(c, "policy") == policy
             and (regime is None or field(c, "regime") == regime)]
    if not found:
        have = ", ".join(f"{field(c, 'regime')}/{field(c, 'policy')}" for c in claims)
        raise InputError(f"no claim for policy {policy!r}"
                         + (f" in regime {regime!r}" if regime else ""),
                         column=f"{dashes}policy", fix=f"claims in this campaign: {have or 'none'}")
    if len(found) > 1:
        raise InputError(f"policy {policy!r} has claims in several regimes ("
                         + ", ".join(field(c, "regime") for c in found) + ")",
                         column=f"{dashes}regime", fix="pick one with --regime")
    return found[0]


def document_files(doc: dict) -> dict:
    """The files a report of the document consists of, relative to its directory."""
    figures = {p for c in doc["claims"] for p in c["figures"].values()}
    if doc.get("transfer_figure"):
        figures.add(doc["transfer_figure"])
    return {"html": "report.html", "md": "report.md", "json": "audit.json",
            "figures": sorted(figures)}


def _regime_dict(ev) -> dict:
    psi = ev.psi
    reg, reg_reason = ev.exposure
    return {
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


def _name_figures(doc: dict) -> None:
    """Set each claim's ``figures`` ({kind: path}, its regime's figures included) and
    ``transfer_figure`` from the figure data the document holds."""
    mechanisms = any(isinstance(t, dict) for t in doc["transfer"].values())
    per_claim, per_regime, transfer = figure_paths(doc["claims"], doc["regimes"], mechanisms)
    for c, paths in zip(doc["claims"], per_claim):
        c["figures"] = dict(sorted({**paths, **per_regime[c["regime"]]}.items()))
    if transfer is not None:
        doc["transfer_figure"] = transfer


def _pre_registration(runset) -> dict:
    """Whether the runs follow a campaign plan (the plan checks verify it) and its hash."""
    plan = campaign_plan(runset)
    if plan is None:
        return {"pre_registered": False, "plan_sha256": None, "text": NOT_PRE_REGISTERED,
                "registration": registration_summary(runset)}
    sha = plan_sha256(plan)
    return {"pre_registered": True, "plan_sha256": sha,
            "text": f"pre-registered (plan {sha[:12]}, created {plan['created_at']})",
            "registration": registration_summary(runset)}


def harness_baselines(protocol: Protocol) -> list[str]:
    """The policies the protocol's harness checks replay as baselines (not claims)."""
    return sorted({pol for spec in protocol.checks.values()
                   if spec.name in ("fixed_cadence_baseline", "deferral_baseline")
                   for pol in spec["policies"]})


def read_claims(input_path, protocol: Protocol) -> tuple[RunSet, list]:
    """The campaign and its claims (ClaimData), before any evidence is computed."""
    with step(f"audit: reading {Path(str(input_path)).resolve().name}"):
        runset = load_runset(input_path)
    return runset, assemble_claims(runset, baseline_policies=harness_baselines(protocol))


def audit_campaign(input_path, protocol=None, alpha=None, seed: int = 0,
                   max_tier: str | None = None, walk_above: str | None = None,
                   claims_read: tuple[RunSet, list] | None = None,
                   challenge=None) -> AuditResult:
    """Evaluate a campaign without writing anything (``max_tier``, ``walk_above``: see
    evaluate_claims; ``claims_read``: what :func:`read_claims` returned for the same input
    and protocol, not read again; ``challenge``: the reviewer's challenge file the plan must
    have been frozen under, :mod:`evalkit.runlog.challenge`)."""
    proto = protocol if isinstance(protocol, Protocol) else load_protocol(protocol)
    proto = proto.with_alpha(alpha)
    given = read_given(challenge) if challenge is not None else None   # bad file: exit 2
    runset, claims = claims_read if claims_read is not None else read_claims(input_path,
                                                                                proto)
    if given is not None:
        runset._cache["challenge"] = given
    with step(f"audit: checking {len(claims)} claim(s) against protocol {proto.name}"):
        evaluated = evaluate_claims(runset, claims, proto, seed=int(seed),
                                    max_tier=max_tier, walk_above=walk_above)
    return AuditResult(protocol=proto, seed=int(seed), runset=runset, claims=evaluated)
