"""A comparison protocol: the claims of `evalkit compare` as data (metrics, directions,
margins, alpha), read from TOML like the audit's protocols.

Keys: ``name``, ``version``, ``alpha`` (family-wise, Holm over the claims), ``power`` (what
"N more paired runs would decide" is computed for), an optional ``[slo]`` table (``e2e_s``,
``ttft_s``, ``tpot_s``) for harness files that carry none, and ``[[claims]]`` with ``metric``,
``direction`` ("lower" | "higher": which is better; it must be the metric's),
``margin`` and the optional ``max_regression`` -- a number in the metric's unit, or a
string "X%" relative to A's mean.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from evalkit.compare.metrics import METRICS
from evalkit.config import ConfigTable, parse_config, read_config
from evalkit.errors import InputError

__all__ = ["Amount", "Claim", "CompareProtocol", "DEFAULT_PROTOCOL", "load_protocol",
           "parse_amount"]

DEFAULT_PROTOCOL = "serving-ab.toml"
TOP_KEYS = ("name", "version", "alpha", "power", "slo", "claims")
CLAIM_KEYS = ("metric", "direction", "margin", "max_regression")
_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*%\s*$")


@dataclass(frozen=True)
class Amount:
    """A margin or an allowed regression: ``value`` in the metric's unit, or ``value`` percent
    of A's mean when ``relative``."""

    value: float
    relative: bool

    def absolute(self, mean_a: float) -> float:
        return self.value / 100.0 * abs(mean_a) if self.relative else self.value

    def text(self) -> str:
        return f"{self.value:g}%" if self.relative else f"{self.value:g}"


def parse_amount(raw, *, what: str) -> Amount:
    """A number >= 0 or "X%"; anything else is an error naming ``what`` (option or key)."""
    if isinstance(raw, str):
        found = _PERCENT.match(raw)
        if found:
            return Amount(float(found.group(1)), True)
        try:
            raw = float(raw)
        except ValueError:
            raise InputError(f"{raw!r} is neither a number nor a percentage", column=what,
                             fix='give a number in the metric\'s unit, or "X%" of A\'s mean'
                             ) from None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) \
            or raw < 0:
        raise InputError(f"{raw!r} must be a finite number >= 0 or a percentage", column=what,
                         fix='give a number in the metric\'s unit, or "X%" of A\'s mean')
    return Amount(float(raw), False)


@dataclass(frozen=True)
class Claim:
    metric: str
    direction: str                     # "lower" | "higher": the better direction
    margin: Amount | None              # None: no equivalence claim
    max_regression: Amount | None      # None: this claim never fails a pipeline


@dataclass(frozen=True)
class CompareProtocol:
    name: str
    version: int
    alpha: float
    power: float
    slo: dict | None
    claims: tuple[Claim, ...]
    file: str
    sha256: str

    def claim(self, metric: str) -> Claim | None:
        return next((c for c in self.claims if c.metric == metric), None)


def _amount(table: ConfigTable, key: str) -> Amount | None:
    if key not in table:
        return None
    try:
        return parse_amount(table.data[key], what=key)
    except InputError as exc:
        raise table.error(key, exc.message, exc.fix) from None


def _claim(table: ConfigTable) -> Claim:
    table.no_unknown(CLAIM_KEYS)
    name = table.get("metric", (str,), choices=tuple(METRICS))
    direction = table.get("direction", (str,), choices=("lower", "higher"))
    natural = METRICS[name].better
    if direction != natural:
        raise table.error("direction", f"{name}: {natural} is better, the claim says "
                          f"{direction}", f'write direction = "{natural}"')
    return Claim(name, direction, _amount(table, "margin"), _amount(table, "max_regression"))


def _slo(table: ConfigTable) -> dict:
    table.no_unknown(("e2e_s", "ttft_s", "tpot_s"))
    out = {"e2e_s": table.number("e2e_s")}
    for key in ("ttft_s", "tpot_s"):
        out[key] = table.number(key, default=None) if key in table else None
    return out


def _parse(doc, file: str, text: str) -> CompareProtocol:
    top = doc.table()
    top.no_unknown(TOP_KEYS)
    name = top.get("name", (str,))
    version = top.number("version", kind=int)
    alpha = top.bounded("alpha", top.number("alpha"), 1e-6, 0.5)
    power = top.bounded("power", top.number("power", default=0.8), 0.5, 0.999)
    slo = _slo(top.sub("slo")) if "slo" in top else None
    raw = top.get("claims", (list,))
    if not raw:
        raise top.error("claims", "the protocol has no claims", "add [[claims]] tables")
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise doc.error(f"claims[{i}]", "a claim must be a table", "write [[claims]] tables")
    claims = tuple(_claim(top.sub("claims", entry, index=i)) for i, entry in enumerate(raw))
    seen = set()
    for i, c in enumerate(claims):
        if c.metric in seen:
            raise doc.error(f"claims[{i}].metric", f"{c.metric} is claimed twice",
                            "keep one claim per metric")
        seen.add(c.metric)
    return CompareProtocol(name, version, alpha, power, slo, claims, file,
                           hashlib.sha256(text.encode()).hexdigest())


def load_protocol(path=None) -> CompareProtocol:
    """The protocol at ``path``, or the packaged default (:data:`DEFAULT_PROTOCOL`)."""
    if path is None:
        text = resources.files("evalkit.compare.protocols").joinpath(
            DEFAULT_PROTOCOL).read_text(encoding="utf-8")
        return _parse(parse_config(text, file=DEFAULT_PROTOCOL), DEFAULT_PROTOCOL, text)
    doc = read_config(Path(path), what="comparison protocol", action="cannot read the protocol",
                      missing_fix="pass an existing TOML file to --protocol")
    return _parse(doc, str(path), doc.text)
