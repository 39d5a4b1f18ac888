"""The check machinery: outcomes, the check status, the registry and :func:`run_check`.

A check is a function ``(ctx, spec) -> Outcome`` registered with :func:`check`, which records
the function, the parameters the protocol may set for it and the tier family it belongs to in
one place; the protocol reader (:mod:`evalkit.audit.protocol`) validates a protocol's
``[checks.NAME]`` tables against :data:`CHECK_PARAMS`.  ``ctx`` is a
:class:`evalkit.audit.context.ClaimContext` and ``spec`` the check's
:class:`~evalkit.audit.protocol.CheckSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

import numpy as np

from evalkit.audit.table_word import FIX as TABLE_WORD_FIX
from evalkit.audit.table_word import TABLE_WORD_CHECKS, table_says
from evalkit.errors import NotEstimable

__all__ = ["CHECKS", "CHECK_CHOICES", "CHECK_PARAMS", "CHECK_TIERS", "Check", "Outcome", "Status",
           "check", "needs_real_backend", "needs_runs", "not_evaluable",
           "run_check"]


class Status(str, Enum):
    """What a check found, as data (the prose is in ``found``)."""

    PASSED = "passed"
    FAILED = "failed"
    UNDERPOWERED = "underpowered"     # failed: too few seeds for the test to reach alpha
    NEGLIGIBLE = "negligible"         # failed: significant, below the smallest effect of interest
    NOT_EVALUABLE = "not_evaluable"
    VOUCHED = "vouched"               # not evaluable; passes only because the user vouches


FAILURES = (Status.FAILED, Status.UNDERPOWERED, Status.NEGLIGIBLE)


@dataclass(frozen=True)
class Outcome:
    passed: bool | None          # None when not evaluable
    expected: str
    found: str
    recommendation: str = ""
    evaluable: bool = True
    status: Status | None = None     # a failure's kind (UNDERPOWERED, NEGLIGIBLE); else derived
    values: dict = field(default_factory=dict)   # the numbers behind ``found``

    def __post_init__(self):
        if self.status is not None and (self.passed is not False
                                        or self.status not in FAILURES):
            raise ValueError(f"an outcome's status {self.status} names a kind of failure; "
                             f"passed = {self.passed}")


@dataclass(frozen=True)
class Check:
    name: str
    tier: str
    passed: bool | None
    evaluable: bool
    expected: str
    found: str
    recommendation: str
    blocking: bool               # fails its tier (failed, or not evaluable and not vouched)
    vouched: bool = False        # not evaluable; passes only because the user vouches
    status: Status | None = None     # derived from the fields above when not given
    values: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status is None:
            object.__setattr__(self, "status", derived_status(self.passed, self.evaluable,
                                                              self.vouched))

    def to_dict(self) -> dict:
        return {"name": self.name, "tier": self.tier, "passed": self.passed,
                "evaluable": self.evaluable, "expected": self.expected, "found": self.found,
                "recommendation": self.recommendation, "blocking": self.blocking,
                "vouched": self.vouched, "status": self.status.value,
                "values": dict(self.values)}


def derived_status(passed: bool | None, evaluable: bool, vouched: bool,
                   failure: Status | None = None) -> Status:
    if vouched:
        return Status.VOUCHED
    if not evaluable:
        return Status.NOT_EVALUABLE
    if passed:
        return Status.PASSED
    return failure or Status.FAILED


def not_evaluable(expected: str, found: str, recommendation: str = "",
                  values: dict | None = None) -> Outcome:
    return Outcome(passed=None, expected=expected, found=found, recommendation=recommendation,
                   evaluable=False, values=dict(values or {}))


def needs_runs(expected: str, found: str, policy: str, alternatives=()) -> Outcome:
    """Not evaluable because the campaign has no runs of ``policy`` (or ``alternatives``): the
    check's tier is *not evaluable* (the walk stops there; nothing failed), and the
    recommendation and ``values["campaign_toml"]`` give the campaign lines that add them."""
    toml = campaign_toml(policy, alternatives)
    either = f" (or {' or '.join(alternatives)})" if alternatives else ""
    return not_evaluable(expected, found, f'add a [[policies]] table with name = "{policy}"'
                         f"{either} and draws = 0 (a baseline needs no matched-random draws) "
                         "to the campaign file, then sweep again",
                         values={"missing_policies": [policy, *alternatives],
                                 "campaign_toml": toml})


def campaign_toml(policy: str, alternatives=()) -> str:
    """The ``[[policies]]`` table that adds ``policy`` as a baseline (no draws of its own)."""
    name = f'name = "{policy}"'
    if alternatives:
        name += "    # or " + ", ".join(f'"{a}"' for a in alternatives)
    return "\n".join(["[[policies]]", name, "draws = 0"])


REAL_BACKEND_STEP = ("replace the campaign's [backend] table and its [backend.config] with "
                     "these lines, then sweep into a new runs directory:")


def needs_real_backend(expected: str, found: str, backends) -> Outcome:
    """Not evaluable because the campaign replayed the claim on the simulator only, never on
    one of ``backends`` (real serving): the check's tier is *not evaluable* (the walk stops
    there; nothing failed), and ``values["campaign_toml"]`` gives the ``[backend]`` table that
    replays the campaign on the first of them (``values["campaign_step"]`` says how)."""
    first, rest = backends[0], list(backends[1:])
    either = f" (or {' or '.join(rest)})" if rest else ""
    name = f'name = "{first}"' + ("    # or " + ", ".join(f'"{b}"' for b in rest)
                                  if rest else "")
    return not_evaluable(expected, found, f'replay the claim on a real serving sidecar: set '
                         f'[backend] name = "{first}"{either} with its settings in '
                         "[backend.config], in place of the simulator's, then sweep into a new "
                         "runs directory (or give the file a regime of its own to keep the sim "
                         "runs beside it)",
                         values={"missing_backends": [first, *rest],
                                 "campaign_toml": "\n".join(["[backend]", name]),
                                 "campaign_step": REAL_BACKEND_STEP})


# ----------------------------------------------------------------------------- registry

# name -> check function; name -> {param: (python types, default)}; (name, param) -> choices;
# name -> the tier family the check belongs to.  Every check also takes ``description`` (str)
# and ``on_not_evaluable``: "block" (default), or "vouch" (older name "note"): a check the
# input cannot evaluate blocks its tier unless ``accept_vouched`` / ``--accept-vouched`` says
# the user vouches for it; the report then marks the claim as vouched.
CHECKS: dict[str, Callable] = {}
CHECK_PARAMS: dict[str, dict[str, tuple[tuple[type, ...], object]]] = {}
CHECK_CHOICES: dict[tuple[str, str], tuple] = {}
CHECK_TIERS: dict[str, str | None] = {}


def check(name: str, params: dict | None = None, tier: str | None = None,
          choices: dict | None = None):
    """Register the decorated ``(ctx, spec) -> Outcome`` function as check ``name``, with the
    parameters a protocol may give it (``{param: (types, default)}``), the allowed values of
    some of them (``{param: (value, ...)}``) and its tier family."""
    def register(fn):
        old = CHECKS.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__,
                                                                       fn.__qualname__):
            raise ValueError(f"check {name!r} is registered twice ({old.__module__} and "
                             f"{fn.__module__})")
        CHECKS[name] = fn
        CHECK_PARAMS[name] = dict(params or {})
        CHECK_TIERS[name] = tier
        for key, allowed in (choices or {}).items():
            CHECK_CHOICES[(name, key)] = tuple(allowed)
        return fn
    return register


def run_check(name: str, tier: str, ctx, spec) -> Check:
    """Run one check; a :class:`~evalkit.errors.NotEstimable` makes it not evaluable.  Any
    other exception propagates: an InputError is bad input (exit 2 naming it), anything else
    a bug (exit 3, traceback logged), never shown as a failed check."""
    try:
        out = CHECKS[name](ctx, spec)
    except NotEstimable as exc:
        out = not_evaluable(spec.description, f"cannot be estimated: {exc.message}",
                            exc.fix or "")
    accept = bool(getattr(getattr(ctx, "protocol", None), "accept_vouched", False))
    vouchable = spec.on_not_evaluable == "vouch"
    if name in TABLE_WORD_CHECKS and out.passed is True and (where := table_says(ctx)):
        # a table's design columns are its word: passing on them is vouching, not checking
        out = Outcome(None, out.expected, f"the table's word, not verified ({where}): "
                      f"{out.found}", TABLE_WORD_FIX, evaluable=False, values=out.values)
        vouchable = True
    vouched = not out.evaluable and vouchable and accept
    blocking = out.passed is False or (not out.evaluable and not vouched)
    rec = out.recommendation
    if not out.evaluable and vouchable and not accept and rec != TABLE_WORD_FIX:
        rec = (rec + "; " if rec else "") + ("or vouch for it: --accept-vouched (the report "
                                             "marks the claim as vouched)")
    return Check(name=name, tier=tier, passed=out.passed, evaluable=out.evaluable,
                 expected=out.expected, found=out.found, recommendation=rec,
                 blocking=blocking, vouched=vouched,
                 status=derived_status(out.passed, out.evaluable, vouched, out.status),
                 values=dict(out.values))


# ------------------------------------------------------------------------ text helpers

def _seeds(seeds) -> str:
    return ", ".join(str(s) for s in sorted(seeds))


def _listing(items: list[str], limit: int = 6) -> str:
    """The first ``limit`` items joined, and how many more there are."""
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}"
