"""A reviewer's challenge, the commitment a plan is frozen under, and the ledger of attempts.

Everything in ``plan.json`` is written by the party whose scheduler is judged, so with a
deterministic simulator every free choice in it (draw seeds, a label they derive from, the
seed order, when to restart) can be tried offline and the lucky one kept.  The randomness
that matters therefore comes from a value that party does not choose:

* ``evalkit plan challenge CAMPAIGN.toml --out challenge.json`` (run by the reviewer, kept
  where the judged party cannot rewrite it: the CI baseline, the reviewer's repository)
  writes::

      {"schema": "evalkit-challenge/1", "id", "nonce", "issued_at",
       "campaign_sha256", "protocol": {"name", "content_sha256"}}

  The campaign file and the protocol are fixed when the nonce is issued, so nothing the
  plan hashes can be varied once the nonce is known.
* ``evalkit plan freeze --challenge challenge.json`` computes the **commitment**
  (:func:`commitment`: sha256 over the nonce and the plan's content, with its seeds sorted and
  without its creation time or any derived value) and derives from it every run's RNG seed and
  the seed order (:func:`derive`).  The plan records ``challenge``: the challenge's id, nonce,
  issue time, the bound hashes and the commitment.
* Every freeze appends an entry to ``ledger.jsonl`` beside the challenge file
  (:func:`append_attempt`): the plan's sha256, its commitment, regime, policies, protocol and
  time, each entry hash-chained to the one before (an edited or removed entry breaks the
  chain).  The audit counts a claim's attempts there (:func:`claim_attempts`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import secrets
from pathlib import Path

from evalkit.errors import InputError, from_os_error
from evalkit.fsutil import atomic_write
from evalkit.jsonio import read_json
from evalkit.limits import MAX_PLAN_BYTES

__all__ = ["CHALLENGE_SCHEMA", "LEDGER_FILE", "append_attempt", "apply_challenge",
           "claim_attempts", "commitment", "derivation_faults", "derive", "issue_challenge",
           "ledger_path", "load_challenge", "read_given", "read_ledger", "write_challenge"]

CHALLENGE_SCHEMA = "evalkit-challenge/1"
LEDGER_FILE = "ledger.jsonl"
_GENESIS = "0" * 64
_HEX64 = frozenset("0123456789abcdef")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _canonical(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------- the challenge

def issue_challenge(campaign_sha256: str, protocol_name: str,
                    protocol_content_sha256: str) -> dict:
    """A fresh challenge for one campaign file and protocol (a 256-bit random nonce)."""
    return {"schema": CHALLENGE_SCHEMA, "id": secrets.token_hex(8),
            "nonce": secrets.token_hex(32), "issued_at": _now(),
            "campaign_sha256": str(campaign_sha256),
            "protocol": {"name": str(protocol_name),
                         "content_sha256": str(protocol_content_sha256)}}


def write_challenge(doc: dict, path) -> Path:
    """Write a challenge file; an existing file is never overwritten (InputError)."""
    path = Path(path)
    if path.exists():
        raise InputError("the challenge file exists already", file=str(path),
                         fix="a challenge is issued once: write it to a new path")
    data = json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"

    def write(tmp):
        with open(tmp, "wb") as fh:
            fh.write(data)

    try:
        return atomic_write(path, write)
    except OSError as exc:
        raise from_os_error(exc, path=str(path), action="cannot write the challenge") from None


def _hex_field(doc: dict, key: str, length: int, file: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or len(value) != length or not set(value) <= _HEX64:
        raise InputError(f"challenge {key} must be {length} lowercase hex digits, got "
                         f"{value!r}", file=file, column=key,
                         fix="use the challenge file 'evalkit plan challenge' wrote, unedited")
    return value


def load_challenge(path) -> dict:
    """Read and check a challenge file; InputError names the file and the field."""
    path = Path(path)
    doc = read_json(path, limit=MAX_PLAN_BYTES, what="the challenge",
                    fix="pass the challenge file 'evalkit plan challenge' wrote")
    file = str(path)
    if not isinstance(doc, dict) or doc.get("schema") != CHALLENGE_SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise InputError(f"not an evalkit challenge (schema {schema!r})", file=file,
                         column="schema", fix=f"a challenge written by 'evalkit plan "
                                              f"challenge' has schema {CHALLENGE_SCHEMA!r}")
    _hex_field(doc, "id", 16, file)
    _hex_field(doc, "nonce", 64, file)
    _hex_field(doc, "campaign_sha256", 64, file)
    proto = doc.get("protocol")
    if not isinstance(proto, dict) or not isinstance(proto.get("name"), str):
        raise InputError("challenge protocol must be {name, content_sha256}", file=file,
                         column="protocol", fix="use the challenge file 'evalkit plan "
                                                "challenge' wrote, unedited")
    _hex_field(proto, "content_sha256", 64, file)
    if not isinstance(doc.get("issued_at"), str):
        raise InputError("challenge has no issue time", file=file, column="issued_at",
                         fix="use the challenge file 'evalkit plan challenge' wrote, unedited")
    return doc


# ----------------------------------------------------------------------------- commitment

def _committed_content(plan: dict) -> dict:
    """The plan's content the commitment covers: every key but its creation time and the
    challenge block; seeds sorted, runs sorted and without their RNG seeds (both derived)."""
    doc = {k: v for k, v in plan.items() if k not in ("created_at", "challenge")}
    campaign = dict(doc.get("campaign") or {})
    settings = dict(campaign.get("settings") or {})
    settings["seeds"] = sorted(int(s) for s in settings.get("seeds", []))
    campaign["settings"] = settings
    doc["campaign"] = campaign
    doc["runs"] = sorted(({k: v for k, v in r.items() if k != "rng_seed"}
                          for r in doc.get("runs", [])),
                         key=lambda r: (int(r["seed"]), str(r["run_id"])))
    return doc


def commitment(nonce: str, plan: dict) -> str:
    """sha256 (hex) over the challenge's nonce and the plan's committed content."""
    return _sha(b"evalkit-commitment/1\n" + str(nonce).encode() + b"\n"
                + _canonical(_committed_content(plan)))


def _run_key(run: dict) -> str:
    return "|".join(str(run.get(k)) for k in ("regime", "role", "policy", "matched_to",
                                              "seed", "draw"))


def derive(commit: str, seeds, runs) -> tuple[list[int], dict[str, int]]:
    """(the seed order, {run_id: RNG seed}) the commitment fixes: seeds ordered by
    sha256(commitment, seed); each run's 63-bit seed from sha256(commitment, its identity)."""
    order = sorted({int(s) for s in seeds},
                   key=lambda s: _sha(f"{commit}:order:{s}".encode()))
    rng = {str(r["run_id"]): int(_sha(f"{commit}:rng:{_run_key(r)}".encode())[:16], 16)
           & ((1 << 63) - 1) for r in runs}
    return order, rng


def apply_challenge(plan: dict, challenge: dict) -> dict:
    """``plan`` frozen under ``challenge``: its seeds and runs in the derived seed order,
    every run's RNG seed derived, and the challenge block recorded."""
    commit = commitment(challenge["nonce"], plan)
    settings = plan["campaign"]["settings"]
    order, rng = derive(commit, settings["seeds"], plan["runs"])
    rank = {s: i for i, s in enumerate(order)}
    runs = sorted(plan["runs"], key=lambda r: rank[int(r["seed"])])   # stable within a seed
    out = dict(plan)
    out["campaign"] = {**plan["campaign"], "settings": {**settings, "seeds": order}}
    out["runs"] = [{**r, "rng_seed": rng[str(r["run_id"])]} for r in runs]
    out["challenge"] = {"id": challenge["id"], "nonce": challenge["nonce"],
                        "issued_at": challenge["issued_at"],
                        "campaign_sha256": challenge["campaign_sha256"],
                        "protocol_content_sha256": challenge["protocol"]["content_sha256"],
                        "commitment": commit}
    return out


def derivation_faults(plan: dict) -> list[str]:
    """What in a plan frozen under a challenge does not follow from its commitment (empty
    when everything does)."""
    block = plan.get("challenge")
    if not isinstance(block, dict) or not isinstance(block.get("nonce"), str):
        return ["the plan records no challenge nonce"]
    faults = []
    commit = commitment(block["nonce"], plan)
    if block.get("commitment") != commit:
        faults.append(f"the recorded commitment {str(block.get('commitment'))[:12]} is not "
                      f"sha256(nonce, plan content) = {commit[:12]}")
    if plan["campaign"].get("sha256") != block.get("campaign_sha256"):
        faults.append("the plan's campaign file is not the one the challenge was issued for")
    if (plan.get("protocol") or {}).get("content_sha256") != block.get(
            "protocol_content_sha256"):
        faults.append("the plan's protocol is not the one the challenge was issued for")
    seeds = plan["campaign"]["settings"].get("seeds", [])
    order, rng = derive(commit, seeds, plan["runs"])
    if [int(s) for s in seeds] != order:
        faults.append(f"seed order {list(seeds)[:6]} is not the derived order {order[:6]}")
    run_seeds = [int(r["seed"]) for r in plan["runs"]]
    if [s for s in dict.fromkeys(run_seeds)] != [s for s in order if s in set(run_seeds)]:
        faults.append("the planned runs are not in the derived seed order")
    wrong = [r["run_id"] for r in plan["runs"] if r.get("rng_seed") != rng[str(r["run_id"])]]
    if wrong:
        faults.append(f"{len(wrong)} run(s) have an RNG seed the commitment does not derive "
                      f"(first: {wrong[0]})")
    return faults


# ----------------------------------------------------------------------------- the ledger

def ledger_path(challenge_path) -> Path:
    """The ledger of a challenge file: ``ledger.jsonl`` in the same folder."""
    return Path(challenge_path).parent / LEDGER_FILE


def _entry_sha(entry: dict) -> str:
    return _sha(_canonical({k: v for k, v in entry.items() if k != "sha256"}))


def read_ledger(challenge_path) -> list[dict]:
    """The ledger's entries (none when it does not exist); InputError naming the line when
    one is unreadable or the hash chain is broken (an entry edited, removed or reordered)."""
    path = ledger_path(challenge_path)
    if not path.exists():
        return []
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the ledger: {exc}", file=str(path),
                         fix="restore the ledger from the reviewer's repository") from None
    entries, prev = [], _GENESIS
    for i, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            raise InputError(f"ledger line {i} is not a JSON object", file=str(path),
                             column=f"line {i}", fix="restore the ledger from the reviewer's "
                                                     "repository; it is append-only")
        if entry.get("prev") != prev or entry.get("sha256") != _entry_sha(entry):
            raise InputError(f"ledger line {i} breaks the hash chain (an entry was edited, "
                             "removed or reordered)", file=str(path), column=f"line {i}",
                             fix="restore the ledger from the reviewer's repository; it is "
                                 "append-only")
        entries.append(entry)
        prev = entry["sha256"]
    return entries


def append_attempt(challenge_path, plan: dict, plan_sha256: str) -> dict:
    """Append the freeze of ``plan`` to the challenge's ledger; returns the entry."""
    entries = read_ledger(challenge_path)
    settings = plan["campaign"]["settings"]
    entry = {"seq": len(entries) + 1, "challenge_id": plan["challenge"]["id"],
             "time": _now(), "plan_sha256": plan_sha256,
             "commitment": plan["challenge"]["commitment"],
             "regime": settings.get("regime"),
             "policies": sorted({str(p["label"]) for p in settings.get("policies", [])}),
             "protocol": {"name": plan["protocol"].get("name"),
                          "content_sha256": plan["protocol"].get("content_sha256")},
             "prev": entries[-1]["sha256"] if entries else _GENESIS}
    entry["sha256"] = _entry_sha(entry)
    path = ledger_path(challenge_path)
    try:
        with open(path, "ab") as fh:
            fh.write(_canonical(entry) + b"\n")
    except OSError as exc:
        raise from_os_error(exc, path=str(path), action="cannot append to the ledger") from None
    return entry


def claim_attempts(entries: list[dict], regime: str, policy: str) -> list[dict]:
    """The ledger's attempts at claim (regime, policy), in the order they were frozen (every
    protocol: an attempt under another protocol is another try at the same claim)."""
    return [e for e in entries if e.get("regime") == regime and policy in (e.get("policies")
                                                                           or [])]


def read_given(path) -> dict:
    """A challenge file the reviewer hands the audit, with its ledger:
    ``{"file", "challenge", "ledger"}`` (InputError, exit 2, when either is malformed)."""
    return {"file": str(path), "challenge": load_challenge(path), "ledger": read_ledger(path)}
