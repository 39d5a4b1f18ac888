"""Text helpers of the report: Markdown escaping and safe names (the number formats are
:mod:`evalkit.document.words`).

Every string that comes from an input (policy, regime, run id, protocol and campaign names,
check texts quoting them) passes through :func:`md` before it reaches ``report.md``: the
characters with an inline meaning in GitHub Markdown are backslash-escaped (CommonMark renders
``\\*`` as ``*``), so a name cannot open a link, an image, emphasis, code, math, a table cell,
an entity or raw HTML, and no HTML entity is ever written.  :func:`md_line`, for a string
that starts a line, also escapes a leading list, heading or quote marker.  In the report.md
template every other value (numbers, versions, counts read from a possibly forged audit.json)
is escaped on its way out by :func:`md_output`, the Markdown environment's ``finalize``: what
the template prints is escaped unless it already is (:class:`Md`).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["md", "md_line", "md_name", "md_output", "shorten"]

MD_NAME_LIMIT = 120       # characters of a user string shown in report.md / page headings

_MD_SPECIAL = frozenset("\\`*_{}[]()<>#!|~&$@")
# bidi overrides / isolates and zero-width characters that can disguise text
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


class Md(str):
    """Text already escaped for Markdown (by :func:`md`): printed as it is."""


def md_output(value) -> str:
    """Every value a Markdown template prints: escaped by :func:`md` unless it is already
    :class:`Md`."""
    return value if isinstance(value, Md) else md(value)


def plain(text) -> str:
    """One line of printable text: control characters and bidi/zero-width marks removed."""
    s = "" if text is None else str(text)
    s = _INVISIBLE.sub("", s)
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in s)


def shorten(text, limit: int = MD_NAME_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, keeping its start and end around an ellipsis."""
    s = plain(text)
    if len(s) <= limit:
        return s
    tail = max(8, limit // 5)
    return s[:limit - tail - 1] + "\u2026" + s[-tail:]


def md(text, limit: int | None = None) -> Md:
    """Inline Markdown that renders as exactly ``text`` (optionally shortened)."""
    s = plain(text) if limit is None else shorten(text, limit)
    return Md("".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s))


def md_line(text, limit: int | None = None) -> Md:
    """:func:`md` for a string that starts a line: a list, heading or quote marker escaped."""
    s = md(text, limit)
    if s[:1] in ("-", "+", "=", ">"):
        return Md("\\" + s)
    return Md(re.sub(r"^(\d+)([.)])", r"\1\\\2", s))


def md_name(text) -> Md:
    return md(text, MD_NAME_LIMIT)
