"""Campaign plans: the design of a campaign fixed before its runs (pre-registration).

``evalkit plan freeze CAMPAIGN.toml`` (and every ``evalkit sweep``, into its runs directory)
writes ``plan.json``::

    {"schema": "evalkit-plan/1",
     "campaign": {"name", "sha256", "fingerprint", "settings": {...}},
     "protocol": {"name", "version", "sha256", "content_sha256"},
     "alpha", "alternative",
     "design": {"kind": "fixed" | "sequential", "alpha", "max_seeds", "batch",
                "spending", "gamma",           # sequential
                "first_look", "futility"},     # only when the campaign sets them
     "corridor": {"min_gap_s", "max_gap_s", "merge_duration_s", "horizon_s", "train_start_s"},
     "runs": [{"run_id", "regime", "policy", "policy_class", "role", "seed", "draw",
               "matched_to", "rng_seed"}, ...],
     "created_at": ISO-8601 UTC,
     "challenge": {"id", "nonce", "issued_at", "campaign_sha256",
                   "protocol_content_sha256", "commitment"}}   # only under a challenge

``rng_seed`` is the seed of the run's policy generator (what ``rng_seeds.policy`` of its
run.json must say): for a matched-random draw it fixes the schedule drawn from F_K once K is
known, so the audit can regenerate every draw and prove it was not selected.
``protocol.sha256`` hashes the protocol file's text, ``protocol.content_sha256`` its rules
(:mod:`evalkit.document.rules`; the hash every report and gate prints).  A plan frozen
before ``content_sha256`` was recorded has ``sha256`` only and stays valid.
:func:`plan_sha256` (sha256 of the canonical JSON) is stamped into every run a sweep writes.
Frozen under a reviewer's challenge (``evalkit plan freeze --challenge``,
:mod:`evalkit.runlog.challenge`), the seed order and every ``rng_seed`` are derived from the
commitment instead.  A plan whose seeds or run ids repeat is refused when read: a seed is one
independent replication and counts once.
This module is the file's format; :mod:`evalkit.replay.plan` builds a plan from a campaign.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from evalkit.errors import InputError, from_os_error
from evalkit.fsutil import atomic_write, fsync_dir, temp_sibling
from evalkit.jsonio import read_json
from evalkit.limits import MAX_PLAN_BYTES
from evalkit.seeds import repeated_seeds

__all__ = ["PLAN_FILE", "SCHEMA", "load_plan", "plan_sha256", "publish_plan", "read_plan",
           "same_campaign", "write_plan"]

PLAN_FILE = "plan.json"
SCHEMA = "evalkit-plan/1"
# what may differ between two freezes of the same campaign (sweep's resume check)
_VOLATILE = ("created_at", "protocol", "alpha", "alternative")


def canonical(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()


def plan_sha256(plan: dict) -> str:
    """sha256 (hex) of the plan's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(canonical(plan)).hexdigest()


def write_plan(plan: dict, path) -> Path:
    """Write ``plan`` to ``path`` atomically (temporary sibling, fsync, rename)."""
    data = json.dumps(plan, indent=2, sort_keys=True).encode() + b"\n"

    def write(tmp):
        with open(tmp, "wb") as fh:
            fh.write(data)

    try:
        return atomic_write(Path(path), write)
    except OSError as exc:
        raise from_os_error(exc, path=str(path), action="cannot write the plan") from None


def write_plan_once(plan: dict, path) -> tuple[dict, bool]:
    """Publish ``plan`` at ``path`` unless a plan is already there (atomic create: a hard
    link of a fully written temporary file).  Returns (the plan on disk, written now)."""
    path = Path(path)
    tmp = temp_sibling(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(plan, indent=2, sort_keys=True).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
            fsync_dir(path.parent)
            return plan, True
        except FileExistsError:
            return load_plan(path), False
    except OSError as exc:
        raise from_os_error(exc, path=str(path), action="cannot write the plan") from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def load_plan(path) -> dict:
    """Read and check a plan file; InputError names the file and what is wrong."""
    path = Path(path)
    try:
        doc = read_json(path, limit=MAX_PLAN_BYTES, what="the plan", nonfinite=True,  # json.dumps
                        fix="restore the plan.json the sweep wrote; never edit it")
    except InputError as exc:
        displaced = sorted(path.parent.glob(f".{path.name}.old-*"))
        if not displaced:
            raise
        # a run directory once took the plan's name (before run ids were checked against the
        # store's reserved names) and moved the plan aside under this hidden name
        keep = displaced[-1].name
        raise InputError(f"cannot read the plan: {exc.message}", file=exc.file, fix=(
            f"the frozen plan was moved aside as {keep} (in {path.parent}): move whatever now "
            f"holds {path.name} elsewhere, then restore the plan: mv {keep} {path.name}")
        ) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise InputError(f"not an evalkit plan (schema {schema!r})",
                         file=path.name, column="schema",
                         fix=f"a plan written by 'evalkit plan freeze' has schema {SCHEMA!r}")
    for key in ("campaign", "protocol", "runs", "created_at", "alpha", "alternative",
                "design", "corridor"):
        if key not in doc:
            raise InputError(f"plan has no {key!r}", file=path.name, column=key,
                             fix="freeze the plan again with 'evalkit plan freeze'")
    if not isinstance(doc["runs"], list) or not all(
            isinstance(r, dict) and {"run_id", "role", "seed", "rng_seed"} <= set(r)
            for r in doc["runs"]):
        raise InputError("plan runs must be a list of planned runs", file=path.name,
                         column="runs", fix="freeze the plan again with 'evalkit plan freeze'")
    _refuse_repeats(doc, path.name)
    return doc


def _refuse_repeats(doc: dict, file: str) -> None:
    settings = (doc.get("campaign") or {}).get("settings") if isinstance(
        doc.get("campaign"), dict) else None
    seeds = settings.get("seeds") if isinstance(settings, dict) else None
    if not isinstance(seeds, list):
        raise InputError("plan campaign.settings.seeds must be a list of seeds", file=file,
                         column="campaign.settings.seeds",
                         fix="freeze the plan again with 'evalkit plan freeze'")
    repeated = repeated_seeds(seeds)
    if repeated:
        raise InputError(f"plan lists seeds {repeated} more than once: a seed is one "
                         "independent replication and counts once", file=file,
                         column="campaign.settings.seeds",
                         fix="freeze the plan again with each seed once ('evalkit plan "
                             "freeze'); a plan is never edited")
    ids = repeated_seeds(str(r["run_id"]) for r in doc["runs"])
    if ids:
        raise InputError(f"plan lists runs {ids[:4]} more than once", file=file,
                         column="runs.run_id", fix="freeze the plan again with 'evalkit plan "
                                                   "freeze'; a plan is never edited")


def read_plan(runs_dir) -> dict | None:
    """The plan of a runs directory (``<runs_dir>/plan.json``), or None when it has none."""
    path = Path(runs_dir) / PLAN_FILE
    if not path.exists():
        return None
    return load_plan(path)


def same_campaign(a: dict, b: dict) -> list[str]:
    """Keys in which two plans of one runs directory differ; created_at and the protocol
    (name, hash, alpha, alternative) may differ: a plan frozen under another protocol with
    ``evalkit plan freeze`` is kept as it is."""
    def core(doc: dict) -> dict:
        out = {k: v for k, v in doc.items() if k not in _VOLATILE}
        out["design"] = {k: v for k, v in (doc.get("design") or {}).items() if k != "alpha"}
        return out

    ca, cb = core(a), core(b)
    return [k for k in sorted(set(ca) | set(cb)) if canonical(ca.get(k)) != canonical(cb.get(k))]


def publish_plan(plan: dict, fresh: bool, runs_dir) -> str:
    """Write a fresh plan into ``runs_dir`` (call with the store locked); a note for the
    sweep's summary.  A plan another sweep published meanwhile is an InputError."""
    sha = plan_sha256(plan)
    if not fresh:
        return f"runs follow the existing {PLAN_FILE} (sha256 {sha[:12]})"
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    on_disk, written = write_plan_once(plan, Path(runs_dir) / PLAN_FILE)
    if not written and plan_sha256(on_disk) != sha:
        raise InputError("another sweep wrote this runs directory's plan at the same time",
                         file=str(Path(runs_dir) / PLAN_FILE),
                         fix="run the sweep again: it follows the plan now there")
    return f"plan {PLAN_FILE} written (sha256 {sha[:12]})"
