"""The audit document's layout and its readers: ``evalkit report AUDIT.json``, ``evalkit diff``
and ``evalkit gate`` (an audit.json, or the baseline).

The file is read through the one JSON front door (a regular file, bounded in bytes and depth,
no duplicate keys, no NaN) and then checked against :data:`DOCUMENT`, the shape of the audit
document as :mod:`evalkit.audit.result` writes it, before any of it is used: a forged or edited
document is an InputError naming the field path (``claims[0].checks[1]``), never a crash in
the code that draws it.  Keys are optional here (``diff`` reads small documents); each one
present must have its shape.  :func:`read_document` also requires what the report draws.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from types import SimpleNamespace

from evalkit.document import tiers as T
from evalkit.document.rules import content_sha256
from evalkit.errors import InputError
from evalkit.jsonio import read_json
from evalkit.limits import MAX_DOCUMENT_BYTES

__all__ = ["AUDIT_SCHEMA", "DIAGNOSTICS", "DOCUMENT", "REWRITE", "check_derived", "check_shape",
           "load_audit", "read_document", "shape_problem"]

# The layout of the audit document (audit.json): the audit writes only this one, and the
# report, the diff and the gate read only this one.
AUDIT_SCHEMA = "evalkit-audit/1"

REWRITE = "re-run 'evalkit audit RUNS --out DIR' to write the audit.json again"
_CLAIM_KEYS = ("figures", "figure_data", "load_match", "per_seed", "checks", "tier_status")
_DOCUMENT_KEYS = ("regimes", "provenance", "transfer", "input")
_REPORT_FILES = ("report.html", "report.md", "audit.json", ".evalkit-report.json")


# ------------------------------------------------------------------------------ shapes
# A shape is one of: a tuple of scalar types (None in it: null allowed; bool is never an int
# or a float unless listed), Obj (an object with known keys, ``required`` ones the report
# cannot draw without), ListOf, MapOf (any keys, one shape of value), OneOf (a text from a
# fixed set), FIGURE (a path inside the report), ANY.

class Obj:
    def __init__(self, keys: dict, nullable: bool = False, required: tuple = ()):
        self.keys, self.nullable, self.required = keys, nullable, required


class ListOf:
    def __init__(self, item, nullable: bool = False):
        self.item, self.nullable = item, nullable


class MapOf:
    def __init__(self, value, nullable: bool = False):
        self.value, self.nullable = value, nullable


class OneOf:
    def __init__(self, *values, nullable: bool = False):
        self.values, self.nullable = values, nullable


ANY = object()
FIGURE = object()
STR, INT, BOOL = (str,), (int,), (bool,)
NUM = (int, float, type(None))        # non-finite numbers are written as null
OPT_STR, OPT_INT, OPT_BOOL = (str, type(None)), (int, type(None)), (bool, type(None))
SCALAR = (str, int, float, bool, type(None))

TIER_STATES = (T.PASSED, T.FAILED, T.NOT_EVALUABLE, T.MISSING_RUNS, T.NOT_RUN)
LADDER_STATES = (T.PASSED, T.FAILED, T.NOT_EVALUABLE, T.SKIPPED, T.NOT_RUN)
# evalkit.audit.checks.core.Status, which this layer may not import (a test keeps them equal)
CHECK_STATES = ("passed", "failed", "underpowered", "negligible", "not_evaluable", "vouched")
CLAIM_STATES = (T.SUPPORTED, T.NOT_SUPPORTED, T.UNDERPOWERED, "")   # "": written before status

_RATES = Obj({k: NUM for k in ("any", "e2e", "ttft", "tpot", "failed")}, nullable=True)
_CHECK = Obj({"name": STR, "tier": STR, "passed": OPT_BOOL, "evaluable": BOOL,
              "expected": STR, "found": STR, "recommendation": STR, "blocking": BOOL,
              "vouched": BOOL, "status": OneOf(*CHECK_STATES), "values": MapOf(ANY)})
_LOAD_ROW = Obj({"passed": BOOL, "seed": OPT_INT, "run_id": OPT_STR, "role": OPT_STR,
                 "check": OPT_STR, "status": OPT_STR, "reason": OPT_STR, "expected": NUM,
                 "found": NUM, "tolerance": NUM}, required=("passed",))
# A claim's non-blocking diagnostics: the audit records each (null where it cannot run) and
# states its sentence when flagged; a sequential pass states them too.
DIAGNOSTICS = ("tail_luck", "level_trend")
_DIAGNOSTIC = Obj({"flagged": BOOL, "sentence": STR, "blocking": BOOL}, nullable=True,
                  required=("flagged", "sentence"))
CLAIM = Obj({
    "regime": STR, "policy": STR, "baseline": STR, "n_seeds": INT, "seeds": ListOf(INT),
    "effective_n": OPT_INT, "pseudo_replicates": ListOf(MapOf(SCALAR)), "test": OPT_STR,
    "draws_per_seed": ListOf(INT), "design_min_p": NUM, "null_size": OPT_INT,
    "method": OPT_STR, "vouched": ListOf(STR), "exclusions": ListOf(MapOf(ANY)),
    "wins": INT, "mean_diff": NUM, "ci": ListOf(NUM, nullable=True), "ci_method": OPT_STR,
    "p_one_sided": NUM, "p_two_sided": NUM, "p_adjusted": NUM, "exact": OPT_BOOL,
    "floor": MapOf(ANY, nullable=True), "min_p": NUM, "seeds_needed": OPT_INT,
    "power": Obj({"min_p": NUM, "min_seeds": OPT_INT, "n": OPT_INT, "rule": OPT_STR,
                  "seeds_needed": OPT_INT, "text": OPT_STR}, nullable=True),
    "tier": OPT_STR, "tier_status": MapOf(OneOf(*TIER_STATES)), "stop_reason": OPT_STR,
    "verdict": STR, "claim_status": OneOf(*CLAIM_STATES),
    "ladder": ListOf(Obj({"tier": STR, "state": OneOf(*LADDER_STATES), "reached": BOOL,
                          "beyond": BOOL}, required=("tier", "state", "reached", "beyond"))),
    "stop": Obj({"tier": STR, "state": OneOf(*LADDER_STATES), "checks": ListOf(STR)},
                nullable=True, required=("tier", "state")),
    "oracle": BOOL, "underpowered": BOOL, "pre_registered": BOOL,
    "checks": ListOf(_CHECK), "notes": ListOf(STR),
    **{key: _DIAGNOSTIC for key in DIAGNOSTICS}, "assumptions": ListOf(STR),
    "per_seed": ListOf(Obj({"seed": INT, "d": NUM, "n_draws": OPT_INT, "policy_run": OPT_STR,
                            **{k: NUM for k in ("exposure_mr", "exposure_policy", "k_policy",
                                                "v_mr_max", "v_mr_mean", "v_mr_min",
                                                "v_no_sync", "v_policy", "vex_policy")}})),
    "slo_breakdown": Obj({"policy": _RATES, "matched_random": _RATES, "configured": _RATES,
                          "text": STR}, nullable=True, required=("text",)),
    "load_match": Obj({"reason": OPT_STR, "summary": OPT_STR, "rows": ListOf(_LOAD_ROW)},
                      nullable=True, required=("reason", "rows")),
    "units": ListOf(Obj({"seed": INT, "v_policy": NUM, "v_draws": ListOf(NUM)},
                        required=("seed", "v_policy", "v_draws"))),
    "figures": MapOf(FIGURE), "figure_data": MapOf(MapOf(ANY, nullable=True)),
})
DOCUMENT = Obj({
    "schema": STR, "evalkit_version": STR, "alpha": NUM, "alternative": STR, "seed": INT,
    "notes": ListOf(STR),
    "protocol": Obj({"name": STR, "version": INT, "alpha": NUM, "alternative": STR,
                     "multiplicity": STR, "accept_vouched": BOOL, "source": OPT_STR,
                     "sha256": STR, "content_sha256": STR,
                     "checks": MapOf(MapOf(ANY)),
                     "tiers": ListOf(Obj({"name": STR, "checks": ListOf(STR), "claim": STR,
                                          "skip_if_not_evaluable": BOOL}))}),
    "input": Obj({"name": STR, "kind": STR, "n_runs": INT, "excluded": ListOf(MapOf(ANY))}),
    "pre_registration": Obj({"pre_registered": BOOL, "plan_sha256": OPT_STR, "text": STR}),
    "design": Obj({"sequential": Obj({"kind": STR, "alpha": NUM, "max_seeds": OPT_INT,
                                      "batch": OPT_INT, "first_look": OPT_INT,
                                      "spending": OPT_STR, "gamma": NUM,
                                      "futility": STR,
                                      "planned_claims": ListOf(ListOf(STR))},
                                     nullable=True,
                                     required=("kind", "alpha", "planned_claims")),
                   "seed_order": ListOf(INT), "why_not": STR},
                  required=("sequential", "seed_order", "why_not")),
    "provenance": MapOf(SCALAR),
    "transfer": MapOf(ANY),
    "transfer_figure": FIGURE,
    "regimes": MapOf(Obj({"psi": MapOf(NUM, nullable=True), "psi_reason": OPT_STR,
                          "exposure_regression": MapOf(SCALAR, nullable=True),
                          "exposure_reason": OPT_STR,
                          "figure_data": MapOf(MapOf(ANY, nullable=True))})),
    "claims": ListOf(CLAIM),
})


def _type_name(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), "?")


def _wanted(shape) -> str:
    if isinstance(shape, tuple):
        names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
                 type(None): "null"}
        return " or ".join(dict.fromkeys(names[t] for t in shape))
    if shape is FIGURE:
        return "a file name inside the report directory (figures/NAME.png)"
    if isinstance(shape, OneOf):
        return "one of " + ", ".join(repr(v) for v in shape.values)
    kind = "an object" if isinstance(shape, (Obj, MapOf)) else "an array"
    return kind + (" or null" if shape.nullable else "")


def _figure_ok(value) -> bool:
    if not isinstance(value, str) or not value or "\\" in value or "\x00" in value:
        return False
    parts = PurePosixPath(value).parts
    return not PurePosixPath(value).is_absolute() and ".." not in parts \
        and "." not in value.split("/") and value not in _REPORT_FILES


def shape_problem(value, shape, where: str) -> tuple[str, str] | None:
    """(field path, what is wrong) for the first part of ``value`` that does not have
    ``shape``, else None."""
    stack = [(value, shape, where)]
    while stack:
        v, s, at = stack.pop()
        if s is ANY:
            continue
        if s is FIGURE:
            if not _figure_ok(v):
                return at, f"is {v!r:.80}, expected {_wanted(s)}"
            continue
        if isinstance(s, tuple):
            if isinstance(v, bool) and bool not in s or not isinstance(v, s):
                return at, f"is {_type_name(v)}, expected {_wanted(s)}"
            continue
        if v is None and s.nullable:
            continue
        if isinstance(s, OneOf):
            if not isinstance(v, str) or v not in s.values:
                return at, f"is {v!r:.80}, expected {_wanted(s)}"
            continue
        container = list if isinstance(s, ListOf) else dict
        if not isinstance(v, container):
            return at, f"is {_type_name(v)}, expected {_wanted(s)}"
        if isinstance(s, ListOf):
            inner = [(x, s.item, f"{at}[{i}]") for i, x in enumerate(v)]
        elif isinstance(s, MapOf):
            inner = [(x, s.value, f"{at}.{k}") for k, x in v.items()]
        else:
            missing = next((k for k in s.required if k not in v), None)
            if missing is not None:
                return f"{at}.{missing}", "is missing"
            inner = [(v[k], sub, f"{at}.{k}" if at else k)
                     for k, sub in s.keys.items() if k in v]
        stack.extend(reversed(inner))           # the first problem in document order
    return None


def check_shape(doc, file: str) -> None:
    """Raise an InputError naming the first field of ``doc`` that does not have the
    document's shape (:data:`DOCUMENT`)."""
    if not isinstance(doc, dict):
        raise InputError(f"not an evalkit audit (the file holds {_type_name(doc)}, not an "
                         "object)", file=file, fix="pass the audit.json written by "
                                                   "'evalkit audit'")
    found = shape_problem(doc, DOCUMENT, "")
    if found is not None:
        where, what = found
        raise InputError(f"wrong shape: the field {what}", file=file, column=where,
                         fix=f"pass an unmodified audit.json ({REWRITE})")


def _is_share(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0


def _check_unit_shares(units: list, column: str, file: str, fix: str) -> None:
    """Each unit holds draws, and its V (its policy run's and its draws') is a share of
    requests in [0, 1], as every input table's V: the sequential gate computes d and the
    diagnostics from them."""
    for j, unit in enumerate(units):
        if not unit.get("v_draws"):
            raise InputError("the seed's unit holds no draw (a seed is paired with its "
                             "matched-random draws)", file=file,
                             column=f"{column}[{j}].v_draws", fix=fix)
        values = [("v_policy", unit.get("v_policy"))] + [
            (f"v_draws[{k}]", v) for k, v in enumerate(unit.get("v_draws") or [])]
        bad = next(((key, v) for key, v in values if not _is_share(v)), None)
        if bad is not None:
            raise InputError(f"{bad[1]!r} is not a violation rate in [0, 1]", file=file,
                             column=f"{column}[{j}].{bad[0]}", fix=fix)


def _check_units(claim: dict, column: str, file: str, fix: str) -> None:
    """A claim's units (the independent seeds the sequential gate decides on) as the audit
    writes them: shares in [0, 1] (:func:`_check_unit_shares`), as many as its
    ``effective_n``, each a seed of its ``seeds``, with the draws its ``draws_per_seed``
    says.  A unit dropped or a draw dropped would change the sequential decision."""
    units = claim.get("units")
    if units is None:
        return
    _check_unit_shares(units, column, file, fix)
    who = f"claim {claim.get('regime')}/{claim.get('policy')}"
    effective = claim.get("effective_n")
    if effective is not None and len(units) != effective:
        raise InputError(f"{who}: {len(units)} units, its effective_n says {effective}",
                         file=file, column=column, fix=fix)
    seeds = claim.get("seeds")
    stray = [u.get("seed") for u in units if u.get("seed") not in (seeds or [])]
    if seeds is not None and stray:
        raise InputError(f"{who}: units of seeds {stray} that its seeds do not list",
                         file=file, column=column, fix=fix)
    counts = claim.get("draws_per_seed")
    held = [len(u.get("v_draws") or []) for u in units]
    if counts is not None and held != list(counts):
        # the sequential gate's draws' floor reads the units: dropping draws would drop it
        raise InputError(f"{who}: its units hold {held} draws per seed, its draws_per_seed "
                         f"says {list(counts)}", file=file, column=column, fix=fix)


def check_derived(doc: dict, file: str) -> None:
    """Raise an InputError naming the first recorded value of ``doc`` that does not follow
    from the rest of it: the protocol's ``content_sha256`` (recomputed from its rules), a
    claim's ``tier`` and ``tier_status`` (the tier walk of its checks under the document's
    own tiers), its units' V (shares in [0, 1]) and draws per seed.  A document is verified on
    read, never taken on its word."""
    edited = f"pass the audit.json evalkit audit wrote, unedited ({REWRITE})"
    protocol = doc.get("protocol") or {}
    recorded = protocol.get("content_sha256")
    if recorded is not None and recorded != content_sha256(protocol):
        raise InputError(f"protocol.content_sha256 {str(recorded)[:12]}... is not the hash of "
                         f"the protocol's rules in the document ({content_sha256(protocol)[:12]}"
                         "...): the hash or the rules were edited", file=file,
                         column="protocol.content_sha256", fix=edited)
    tiers = protocol.get("tiers")
    for i, claim in enumerate(doc.get("claims") or []):
        _check_units(claim, f"claims[{i}].units", file, edited)
        checks = claim.get("checks")
        if checks is None:
            continue
        if not tiers or "tier" not in claim:
            continue
        for j, c in enumerate(checks):
            missing = next((k for k in ("name", "tier", "blocking", "evaluable")
                            if k not in c), None)
            if missing is not None:
                raise InputError("the check has no field the tier walk reads", file=file,
                                 column=f"claims[{i}].checks[{j}].{missing}", fix=edited)
        view = [SimpleNamespace(**{"values": {}, **c}) for c in checks]
        walk = SimpleNamespace(tiers=[SimpleNamespace(**t) for t in tiers])
        tier, status, _ = T.tier_walk(walk, view)
        said = claim.get("tier_status")
        if tier != claim["tier"] or (said is not None and T.filled_status(tiers, status)
                                     != T.filled_status(tiers, said)):
            raise InputError(f"claim {claim.get('regime')}/{claim.get('policy')} records tier "
                             f"{claim['tier']!r}, but its checks reach {tier!r} under the "
                             "document's tier walk", file=file, column=f"claims[{i}].tier",
                             fix=edited)


# ------------------------------------------------------------------------------ readers

def load_audit(path) -> dict:
    """An ``audit.json`` (or a report directory holding one), checked to be an evalkit audit
    whose every field present has the document's shape."""
    p = Path(path)
    if p.is_dir():
        p = p / "audit.json"
    if not p.exists():
        raise InputError("no such audit file", file=str(p),
                         fix="pass the audit.json an 'evalkit audit --out DIR' wrote "
                             "(or DIR itself)")
    audit = read_json(p, limit=MAX_DOCUMENT_BYTES, what="the audit",
                      fix="pass the audit.json written by 'evalkit audit'")
    if not isinstance(audit, dict) or not isinstance(audit.get("claims"), list) \
            or not isinstance(audit.get("protocol"), dict):
        raise InputError("not an evalkit audit (no 'claims' list or 'protocol')", file=str(p),
                         column="claims", fix="pass the audit.json written by 'evalkit audit'")
    for i, c in enumerate(audit["claims"]):
        if not isinstance(c, dict) or "policy" not in c or "regime" not in c:
            raise InputError(f"claim {i} has no policy/regime", file=str(p),
                             column=f"claims[{i}]", fix="pass an unmodified audit.json")
    check_shape(audit, str(p))
    check_derived(audit, str(p))
    return audit


def read_document(path) -> dict:
    """The audit document at ``path`` (an audit.json, or the report directory holding one);
    an InputError naming the file, the key and the fix when it is not one this version of
    evalkit renders."""
    doc = load_audit(path)           # JSON of the document's shape, with claims and protocol
    where = str(path)
    schema = doc.get("schema")
    if schema != AUDIT_SCHEMA:
        found = "no 'schema' key (written by an evalkit before documents were versioned)" \
            if schema is None else f"schema {schema!r}"
        raise InputError(f"{found}; this evalkit renders {AUDIT_SCHEMA!r}", file=where,
                         column="schema", fix=REWRITE)
    for key in _DOCUMENT_KEYS:
        if not isinstance(doc.get(key), dict):
            raise InputError(f"the document has no {key!r} object", file=where, column=key,
                             fix=REWRITE)
    for i, claim in enumerate(doc["claims"]):
        for key in _CLAIM_KEYS:
            if key not in claim:
                raise InputError(f"claim {i} ({claim['regime']}/{claim['policy']}) has no "
                                 f"{key!r}", file=where, column=f"claims[{i}].{key}",
                                 fix=REWRITE)
        if claim["regime"] not in doc["regimes"] or \
                "figure_data" not in doc["regimes"][claim["regime"]]:
            raise InputError(f"regime {claim['regime']!r} of claim {i} has no figure data",
                             file=where, column=f"regimes.{claim['regime']}", fix=REWRITE)
    return doc
