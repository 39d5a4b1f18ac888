"""Protocol files: the claim hierarchy and its thresholds as TOML data.

A protocol names the tiers in order, the checks each tier requires, and every threshold
(alpha, alternative, seeds, load-match tolerances, the eps_cal rule, ...).  The bundled
``diloco-slo`` protocol ships as package data (``evalkit/audit/protocols/``) and, for
readers of the repository, as ``protocols/diloco-slo.toml``.

A malformed file raises :class:`~evalkit.errors.InputError` naming the key and its line
(read through :mod:`evalkit.config`): tomllib reports the line of a syntax error; for a
semantic error the key is looked up in the text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from evalkit.audit.checks.core import CHECK_CHOICES, CHECK_PARAMS, CHECKS
from evalkit.config import ConfigDoc, parse_config
from evalkit.errors import InputError
from evalkit.fileread import read_text_bounded
from evalkit.limits import MAX_CONFIG_BYTES, RESAMPLES_RANGE, range_fix
from evalkit.stats._result import check_alpha
from evalkit.document.rules import content_sha256

__all__ = ["BUILTIN_PACKAGE", "CheckSpec", "Protocol", "TierSpec", "load_protocol",
           "parse_protocol"]

BUILTIN_PACKAGE = "evalkit.audit.protocols"
DEFAULT_PROTOCOL = "diloco-slo"
KNOWN_TIERS = ("harness", "sidecar_transfer", "matched_budget", "placement_gain",
               "calibrated", "deployable")
ALTERNATIVES = ("greater", "two-sided")
MULTIPLICITY = ("holm", "none")

_LIST = (list,)
_NUM = (int, float)


@dataclass(frozen=True)
class TierSpec:
    name: str
    claim: str
    skip_if_not_evaluable: bool
    checks: tuple[str, ...]


@dataclass(frozen=True)
class CheckSpec:
    name: str
    description: str
    on_not_evaluable: str            # "block" | "vouch"
    params: dict = field(default_factory=dict)

    def __getitem__(self, key):
        return self.params[key]


@dataclass(frozen=True)
class Protocol:
    name: str
    version: int
    description: str
    alpha: float
    alternative: str
    multiplicity: str
    n_resamples: int
    bootstrap_resamples: int
    accept_vouched: bool
    tiers: tuple[TierSpec, ...]
    checks: dict
    source: str                      # "builtin:<name>" or the file's base name
    sha256: str
    # set on a protocol cut short by :meth:`up_to`: the content hash of the whole one, which
    # stays its identity (a plan froze the whole protocol, not the tiers a gate asks about)
    cut_from_sha256: str | None = field(default=None, compare=False, repr=False)

    def tier(self, name: str) -> TierSpec:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise InputError(f"tier '{name}' is not in protocol '{self.name}'", column="tier",
                         fix="use one of: " + ", ".join(t.name for t in self.tiers))

    @property
    def tier_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tiers)

    def with_alpha(self, alpha: float | None) -> "Protocol":
        if alpha is None:
            return self
        return replace(self, alpha=check_alpha(alpha, fix="pass e.g. --alpha 0.05"))

    def up_to(self, tier: str) -> "Protocol":
        """The protocol without the tiers above ``tier``; its content sha256 stays the whole
        protocol's."""
        keep = self.tier_names[:self.tier_names.index(self.tier(tier).name) + 1]
        return replace(self, tiers=tuple(t for t in self.tiers if t.name in keep),
                       cut_from_sha256=self.content_sha256)

    def with_accept_vouched(self, accept: bool) -> "Protocol":
        """``--accept-vouched``: checks the input cannot evaluate no longer block."""
        return replace(self, accept_vouched=True) if accept else self

    @property
    def content_sha256(self) -> str:
        """Hash of the rules alone (:mod:`evalkit.document.rules`): a changed check,
        threshold, alpha or ``accept_vouched`` changes it, a changed comment or name does not."""
        return self.cut_from_sha256 or content_sha256(self._as_dict())

    def to_dict(self) -> dict:
        out = self._as_dict()
        out["content_sha256"] = self.content_sha256
        return out

    def _as_dict(self) -> dict:
        return {
            "name": self.name, "version": self.version, "source": self.source,
            "sha256": self.sha256, "alpha": self.alpha, "alternative": self.alternative,
            "multiplicity": self.multiplicity, "accept_vouched": self.accept_vouched,
            "tiers": [{"name": t.name, "claim": t.claim, "checks": list(t.checks),
                       "skip_if_not_evaluable": t.skip_if_not_evaluable} for t in self.tiers],
            "checks": {n: {"description": c.description, "on_not_evaluable": c.on_not_evaluable,
                           **c.params} for n, c in sorted(self.checks.items())},
        }


def builtin_protocols() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(BUILTIN_PACKAGE).iterdir()
                  if p.name.endswith(".toml"))


def load_protocol(spec: str | Path | None = None) -> Protocol:
    """Load a protocol by bundled name (``diloco-slo``) or by path to a TOML file."""
    spec = DEFAULT_PROTOCOL if spec is None else spec
    path = Path(spec)
    if path.suffix == ".toml" or path.exists():
        if not path.exists() or path.is_dir():
            raise InputError("protocol file does not exist", file=str(path),
                             fix="pass a TOML protocol file or a bundled name: "
                             + ", ".join(builtin_protocols()))
        text = read_text_bounded(path, MAX_CONFIG_BYTES, "protocol file",
                                 action="cannot read the protocol")
        return parse_protocol(text, source=path.name, file=str(path))
    name = str(spec)
    if name not in builtin_protocols():
        raise InputError(f"unknown protocol '{name}'", column="protocol",
                         fix="use a bundled name (" + ", ".join(builtin_protocols())
                         + ") or a path to a .toml file")
    text = resources.files(BUILTIN_PACKAGE).joinpath(f"{name}.toml").read_text()
    return parse_protocol(text, source=f"builtin:{name}", file=f"{name}.toml")


class _Parser:
    """parse_protocol's view of a :class:`~evalkit.config.ConfigDoc`: getters by table and
    dotted prefix."""

    def __init__(self, doc: ConfigDoc):
        self.doc = doc

    def fail(self, key: str, message: str, fix: str):
        raise self.doc.error(key, message, fix)

    def get(self, table: dict, prefix: str, key: str, types, default=..., choices=None):
        return self.doc.table(prefix, table).get(key, types, default, choices)

    def no_unknown(self, table: dict, prefix: str, allowed):
        self.doc.table(prefix, table).no_unknown(allowed)


def parse_protocol(text: str, *, source: str, file: str) -> Protocol:
    """Validate protocol TOML text and build a :class:`Protocol`."""
    doc = parse_config(text, file=file)   # with evalkit.limits' bounds
    data = doc.data
    p = _Parser(doc)
    p.no_unknown(data, "", ("protocol", "tiers", "checks"))
    head = p.get(data, "", "protocol", (dict,))
    p.no_unknown(head, "protocol", ("name", "version", "description", "alpha", "alternative",
                                    "multiplicity", "n_resamples", "bootstrap_resamples",
                                    "accept_vouched",
                                    "tier_order"))
    alpha = float(p.get(head, "protocol", "alpha", _NUM))
    try:
        check_alpha(alpha)
    except InputError as exc:
        p.fail("protocol.alpha", exc.message, "e.g. alpha = 0.05")
    n_resamples = p.get(head, "protocol", "n_resamples", (int,), 20000)
    if not RESAMPLES_RANGE[0] <= n_resamples <= RESAMPLES_RANGE[1]:
        p.fail("protocol.n_resamples", "n_resamples is out of range",
               range_fix(*RESAMPLES_RANGE) + ", e.g. 20000")
    boot = p.get(head, "protocol", "bootstrap_resamples", (int,), 2000)
    if not RESAMPLES_RANGE[0] <= boot <= RESAMPLES_RANGE[1]:
        p.fail("protocol.bootstrap_resamples", "bootstrap_resamples is out of range",
               range_fix(*RESAMPLES_RANGE) + ", e.g. 2000")
    order = p.get(head, "protocol", "tier_order", _LIST)
    tiers_table = p.get(data, "", "tiers", (dict,))
    checks_table = p.get(data, "", "checks", (dict,))
    positions = [KNOWN_TIERS.index(t) if t in KNOWN_TIERS else -1 for t in order]
    for name, pos in zip(order, positions):
        if pos < 0:
            p.fail("protocol.tier_order", f"unknown tier {name!r}",
                   "tiers are: " + ", ".join(KNOWN_TIERS))
    if positions != sorted(set(positions)) or not order:
        p.fail("protocol.tier_order", "tiers must be distinct, non-empty and in hierarchy order",
               "order: " + ", ".join(KNOWN_TIERS))
    p.no_unknown(tiers_table, "tiers", order)
    tiers = []
    used_checks: list[str] = []
    for name in order:
        prefix = f"tiers.{name}"
        tier = p.get(tiers_table, "tiers", name, (dict,))
        p.no_unknown(tier, prefix, ("claim", "skip_if_not_evaluable", "checks"))
        checks = p.get(tier, prefix, "checks", _LIST)
        for check in checks:
            if check not in CHECKS:
                p.fail(f"{prefix}.checks", f"unknown check {check!r}",
                       "checks are: " + ", ".join(sorted(CHECKS)))
            if check in used_checks:
                p.fail(f"{prefix}.checks", f"check {check!r} is listed in two tiers",
                       "list each check once")
            used_checks.append(check)
        tiers.append(TierSpec(name=name, claim=p.get(tier, prefix, "claim", (str,)),
                              skip_if_not_evaluable=p.get(tier, prefix, "skip_if_not_evaluable",
                                                          (bool,), False),
                              checks=tuple(checks)))
    p.no_unknown(checks_table, "checks", used_checks)
    checks = {}
    for name in used_checks:
        prefix = f"checks.{name}"
        table = checks_table.get(name, {})
        if not isinstance(table, dict):
            p.fail(prefix, "expected a table", f"write [checks.{name}]")
        params_spec = CHECK_PARAMS.get(name, {})     # the @check registry
        p.no_unknown(table, prefix, ("description", "on_not_evaluable", *params_spec))
        params = {}
        for key, (types, default) in params_spec.items():
            params[key] = p.get(table, prefix, key, types, default,
                                choices=CHECK_CHOICES.get((name, key)))
        if name == "gain_significant" and params["min_effect"] < 0:
            p.fail(f"{prefix}.min_effect", "the smallest effect of interest must be >= 0",
                   "e.g. min_effect = 0.005 (0.5 percentage points of V)")
        if name == "load_match":
            for tol_name, tol in params["tolerances"].items():
                if isinstance(tol, bool) or not isinstance(tol, _NUM) or tol < 0:
                    p.fail(f"{prefix}.tolerances.{tol_name}",
                           "tolerance must be a non-negative number", "e.g. 0.02")
        if name == "real_sidecar":
            if params["server_time_allowance_s"] < 0:
                p.fail(f"{prefix}.server_time_allowance_s", "the allowance must be a "
                       "non-negative number of seconds", "e.g. server_time_allowance_s = 0.05")
            share = params["server_time_min_share"]
            if not 0 < share <= 1:
                p.fail(f"{prefix}.server_time_min_share", "the share must be in (0, 1]",
                       "e.g. server_time_min_share = 0.99")
        checks[name] = CheckSpec(
            name=name, description=p.get(table, prefix, "description", (str,), name),
            on_not_evaluable={"note": "vouch"}.get(v := p.get(
                table, prefix, "on_not_evaluable", (str,), "block",
                choices=("block", "vouch", "note")), v),
            params=params)
    return Protocol(
        name=p.get(head, "protocol", "name", (str,)),
        version=p.get(head, "protocol", "version", (int,), 1),
        description=p.get(head, "protocol", "description", (str,), ""),
        alpha=alpha,
        alternative=p.get(head, "protocol", "alternative", (str,), "two-sided",
                          choices=ALTERNATIVES),
        multiplicity=p.get(head, "protocol", "multiplicity", (str,), "holm",
                           choices=MULTIPLICITY),
        n_resamples=n_resamples, bootstrap_resamples=boot,
        accept_vouched=p.get(head, "protocol", "accept_vouched", (bool,), False),
        tiers=tuple(tiers), checks=checks,
        source=source, sha256=hashlib.sha256(text.encode()).hexdigest())
