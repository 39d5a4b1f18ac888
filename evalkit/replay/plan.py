"""A campaign's plan, built from the campaign (:mod:`evalkit.runlog.plan` is the plan file's
format: hash, write once, read, compare): every planned run with its policy generator's
seed, the campaign's settings and design, the protocol's hash, alpha and the alternative.
Frozen under a reviewer's challenge (:mod:`evalkit.runlog.challenge`), the seed order and
every run's RNG seed come from the commitment, and the sweep follows them
(:func:`follow_plan`)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
from pathlib import Path

from evalkit.errors import InputError
from evalkit.replay.campaign import load_campaign, plan_campaign
from evalkit.policies.context import derived_seed
from evalkit.runlog.challenge import apply_challenge
from evalkit.runlog.plan import PLAN_FILE, SCHEMA, load_plan, same_campaign
from evalkit.seeds import repeated_seeds


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _campaign_settings(camp) -> dict:
    return {"regime": camp.regime, "seeds": list(camp.seeds), "draws": camp.draws,
            "horizon_s": camp.horizon_s, "merge_duration_s": camp.merge_duration_s,
            "inner_step_s": camp.inner_step_s, "h_min": camp.h_min, "h_max": camp.h_max,
            "min_gap_s": camp.min_gap_s, "max_gap_s": camp.max_gap_s, "slo": dict(camp.slo),
            "trace": dict(camp.trace), "backend": camp.backend,
            "backend_config": dict(camp.backend_config),
            "policies": [{"label": p.label, "name": p.name, "params": dict(p.params),
                          "draws": p.draws} for p in camp.policies]}


def planned_runs(camp) -> list[dict]:
    """Every run the campaign plans, with the seed of its policy generator."""
    out = []
    for job in plan_campaign(camp):
        if job.kind == "no_sync":
            label, cls, matched_to = "no_sync", "no_sync", None
        elif job.kind == "policy":
            label, cls, matched_to = job.policy.label, job.policy.name, None
        else:
            label, cls, matched_to = "matched_random", "matched_random", job.policy.label
        # the sweep's policy_seed(spec): derived from (seed, role, matched_to, draw)
        rng_seed = derived_seed(job.seed, "policy", job.kind, matched_to or "", job.draw or 0)
        out.append({"run_id": job.run_id, "regime": camp.regime, "policy": label,
                    "policy_class": cls, "role": job.kind, "seed": int(job.seed),
                    "draw": job.draw, "matched_to": matched_to, "rng_seed": int(rng_seed)})
    return out


def plan_from_campaign(camp, protocol) -> dict:
    """The plan of a loaded campaign (:class:`evalkit.replay.campaign.Campaign`) under a
    loaded protocol.  The replay does not read protocols (that reader belongs to the audit,
    :func:`evalkit.audit.protocol.load_protocol`); its caller passes one in, and only its
    header is read: ``name``, ``version``, ``sha256``, ``content_sha256``, ``alpha`` (also
    the design's alpha) and ``alternative``."""
    header = {"name": protocol.name, "version": int(protocol.version),
              "sha256": protocol.sha256, "content_sha256": protocol.content_sha256}
    return _plan(camp, header, float(protocol.alpha), protocol.alternative)


def _plan(camp, protocol: dict, alpha, alternative) -> dict:
    lo, hi = camp.spec("plan", 0).gaps()
    text = camp.text or ""
    design = dict(getattr(camp, "design", None) or {"kind": "fixed", "max_seeds": None,
                                                    "batch": None})
    design["alpha"] = alpha
    repeated = repeated_seeds(camp.seeds)
    if repeated:
        raise InputError(f"seeds {repeated} are listed more than once: a seed is one "
                         "independent replication, counted once", file=str(camp.path or
                                                                           camp.regime),
                         column="seeds", fix="list each seed once")
    return {
        "schema": SCHEMA,
        "campaign": {"name": camp.regime,
                     "sha256": hashlib.sha256(text.encode()).hexdigest(),
                     "fingerprint": camp.fingerprint(),
                     "settings": _campaign_settings(camp)},
        "protocol": protocol, "alpha": alpha, "alternative": alternative,
        "design": {k: design.get(k) for k in ("kind", "alpha", "max_seeds", "batch")
                   + tuple(k for k in ("first_look", "spending", "gamma", "futility")
                          if k in design)},
        "corridor": {"min_gap_s": float(lo), "max_gap_s": float(hi),
                     "merge_duration_s": float(camp.merge_duration_s),
                     "horizon_s": float(camp.horizon_s), "train_start_s": 0.0},
        "runs": planned_runs(camp),
        "created_at": _now(),
    }


def freeze_plan(campaign_path, protocol, challenge: dict | None = None,
                challenge_file: str | None = None) -> dict:
    """Load a campaign TOML and return its plan document under ``protocol`` (a loaded one,
    read as :func:`plan_from_campaign` says; nothing is written).  ``challenge`` (a loaded
    challenge, read from ``challenge_file``): the plan is frozen under it; the campaign file
    and the protocol must be the ones it was issued for (else an InputError: exit 2)."""
    plan = plan_from_campaign(load_campaign(campaign_path), protocol)
    if challenge is None:
        return plan
    if plan["campaign"]["sha256"] != challenge["campaign_sha256"]:
        raise InputError(f"the challenge was issued for another campaign file (sha256 "
                         f"{challenge['campaign_sha256'][:12]}, this one "
                         f"{plan['campaign']['sha256'][:12]})", file=challenge_file,
                         column="campaign_sha256",
                         fix="freeze the campaign file the challenge was issued for, or ask "
                             "the reviewer for a challenge of this one (a changed campaign "
                             "is another attempt)")
    want = challenge["protocol"]
    if plan["protocol"]["content_sha256"] != want["content_sha256"]:
        raise InputError(f"the challenge was issued for protocol {want['name']} (content "
                         f"sha256 {want['content_sha256'][:12]}), this plan's is "
                         f"{plan['protocol']['name']} ({plan['protocol']['content_sha256'][:12]})",
                         file=challenge_file, column="protocol",
                         fix="pass the protocol the challenge names (--protocol)")
    return apply_challenge(plan, challenge)


def follow_plan(camp, plan: dict):
    """The campaign as its plan fixes it: the plan's seed order and, for a plan frozen under a
    challenge, every run's RNG seed and the commitment its run order derives from (a plain
    plan's seeds and order are the ones the campaign derives)."""
    seeds = [int(s) for s in plan["campaign"]["settings"]["seeds"]]
    policy_seeds = ({r["run_id"]: int(r["rng_seed"]) for r in plan["runs"]}
                    if plan.get("challenge") else None)
    commitment = (plan["challenge"].get("commitment")
                  if isinstance(plan.get("challenge"), dict) else None)
    return dataclasses.replace(camp, seeds=seeds, policy_seeds=policy_seeds,
                               order_commitment=commitment)


def directory_plan(camp, runs_dir, protocol) -> tuple[dict, bool]:
    """The plan ``runs_dir`` follows for campaign ``camp`` (nothing is written): the one there,
    which must plan the same campaign (else an InputError: exit 2), or a fresh one frozen
    under ``protocol`` (a loaded one, read as :func:`plan_from_campaign` says).  ``protocol``
    may be None only where a plan is there already (a resumed sweep).  Returns (plan, fresh)."""
    path = Path(runs_dir) / PLAN_FILE
    if not path.exists():
        if protocol is None:
            raise InputError("no plan in the runs directory and no protocol to freeze one "
                             "under", file=str(path), column="protocol",
                             fix="pass the protocol the campaign will be audited under "
                                 "(protocol=evalkit.load_protocol(None) for the bundled one), "
                                 "or freeze the plan first with 'evalkit plan freeze'")
        return plan_from_campaign(camp, protocol), True
    plan = load_plan(path)
    # same_campaign does not compare the protocol: a resumed sweep may pass none
    fresh = (_plan(camp, plan["protocol"], plan["alpha"], plan["alternative"])
             if protocol is None else plan_from_campaign(camp, protocol))
    if isinstance(plan.get("challenge"), dict) and "nonce" in plan["challenge"]:
        # frozen under a challenge: compare with this campaign frozen under the same one
        block = plan["challenge"]
        fresh = {**fresh, "protocol": plan["protocol"], "alpha": plan["alpha"],
                 "alternative": plan["alternative"],
                 "design": {**fresh["design"], "alpha": (plan.get("design") or {}).get("alpha")}}
        fresh = apply_challenge(fresh, {
            "id": block.get("id"), "nonce": block["nonce"], "issued_at": block.get("issued_at"),
            "campaign_sha256": block.get("campaign_sha256"),
            "protocol": {"content_sha256": block.get("protocol_content_sha256")}})
    diff = same_campaign(plan, fresh)
    if diff:
        raise InputError(f"the runs directory's plan was frozen for another campaign (they "
                         f"differ in: {', '.join(diff)})", file=str(path), column=diff[0],
                         fix="sweep this campaign into a new runs directory; a plan is never "
                             "changed after runs were written under it")
    return plan, False
