"""The one reader of evalkit's TOML files: protocols, campaigns and simulator twins.

:func:`read_config` reads a file within :mod:`evalkit.limits`' bounds (size, nesting, string
length, 64-bit integers) and returns a :class:`ConfigDoc`: the parsed data with its text.
The typed getters of :class:`ConfigTable` and :meth:`ConfigDoc.error` raise an
:class:`~evalkit.errors.InputError` that names the file, the dotted key, the key's line and
a fix.  A syntax error names the line tomllib reports.

Keys are dotted paths (``tiers.harness.checks``); the n-th table of an array of tables is
``policies[n]`` (0-based), so ``policies[2].name`` points at the third ``[[policies]]``.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from evalkit.errors import InputError
from evalkit.fileread import read_text_bounded
from evalkit.limits import MAX_CONFIG_BYTES, loads_toml, range_fix

__all__ = ["ConfigDoc", "ConfigTable", "find_key_line", "parse_config", "read_config"]

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")
_INDEX = re.compile(r"\[\d+\]$")


def _split(dotted: str) -> list[str]:
    return [p.strip().strip('"\'') for p in dotted.split(".")]


def _plain(parts: list[str]) -> list[str]:
    return [_INDEX.sub("", p) for p in parts]


def find_key_line(text: str, dotted: str) -> int | None:
    """1-based line where the dotted key is defined, else the line of the inline table or
    table that holds it, else None.  ``name[i]`` selects the i-th ``[[name]]`` table; a key
    without an index matches its first definition."""
    parts = _split(dotted)
    indexed = any(_INDEX.search(p) for p in parts)
    current: list[str] = []
    seen: dict[str, int] = {}            # array-of-tables header -> tables seen so far
    best = None

    def same(full: list[str]) -> bool:
        return full == parts if indexed else _plain(full) == parts

    def holds(full: list[str]) -> bool:
        n = len(full)
        return n < len(parts) and (full == parts[:n] if indexed
                                   else _plain(full) == parts[:n])

    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            current = _split(header.group(2))
            if header.group(1) == "[[":
                name = ".".join(current)
                seen[name] = seen.get(name, -1) + 1
                current[-1] = f"{current[-1]}[{seen[name]}]"
            if same(current):
                return lineno
            continue
        key = _KEY.match(line)
        if not key:
            continue
        full = current + _split(key.group(1))
        if same(full):
            return lineno
        if best is None and holds(full):
            best = lineno                # an inline table that holds the key
    if best is not None:
        return best
    if len(parts) > 1:                   # the table the missing key belongs in
        return find_key_line(text, ".".join(parts[:-1]))
    return None


def _type_names(types) -> str:
    return "/".join(t.__name__ for t in types)


@dataclass(frozen=True)
class ConfigDoc:
    """One TOML document: ``data`` as parsed, ``text`` for key lines, ``file`` for messages."""

    data: dict
    text: str
    file: str | None

    def line(self, dotted: str) -> int | None:
        return find_key_line(self.text, dotted) if self.text else None

    def error(self, key: str, message: str, fix: str, *, line_key: str | None = None
              ) -> InputError:
        """An InputError for ``key`` (the column it names), pointing at the line of
        ``line_key`` (default ``key``): ``FILE:LINE``, and ``(line N)`` in the message."""
        line = self.line(line_key or key)
        where = f"{self.file}:{line}" if line and self.file else self.file
        return InputError(message + (f" (line {line})" if line else ""), file=where,
                          column=key, fix=fix)

    def table(self, prefix: str = "", data: dict | None = None, *,
              line_prefix: str | None = None) -> "ConfigTable":
        return ConfigTable(self, self.data if data is None else data, prefix,
                           prefix if line_prefix is None else line_prefix)


@dataclass(frozen=True)
class ConfigTable:
    """A table of a :class:`ConfigDoc` at the dotted ``prefix`` (``""``: the top level).

    ``line_prefix`` is where its keys are looked up in the text (``policies[2]`` for the
    third policy, whose errors still name the column ``policies.KEY``)."""

    doc: ConfigDoc
    data: dict
    prefix: str
    line_prefix: str

    def dotted(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def _line_key(self, key: str) -> str:
        return f"{self.line_prefix}.{key}" if self.line_prefix else key

    def error(self, key: str, message: str, fix: str) -> InputError:
        return self.doc.error(self.dotted(key), message, fix, line_key=self._line_key(key))

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def sub(self, key: str, data: dict | None = None, *, index: int | None = None
            ) -> "ConfigTable":
        """The table under ``key`` (``data``: that table's dict; ``index``: the entry of an
        array of tables)."""
        value = self.data[key] if data is None else data
        line = self._line_key(key) + (f"[{index}]" if index is not None else "")
        return ConfigTable(self.doc, value, self.dotted(key), line)

    def get(self, key: str, types, default=..., choices=None):
        """``data[key]`` if it has one of ``types`` (a bool is not an int unless ``bool`` is
        listed) and is among ``choices``; ``default`` when absent (``...``: required)."""
        if key not in self.data:
            if default is ...:
                raise self.error(key, "required key is missing", f"add '{key} = ...'")
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in types:
            raise self.error(key, f"expected {_type_names(types)}, got a boolean",
                             "give a value of the right type")
        if not isinstance(value, types):
            raise self.error(key, f"expected {_type_names(types)}, got "
                             f"{type(value).__name__}", "give a value of the right type")
        if choices is not None and value not in choices:
            raise self.error(key, f"invalid value {value!r}", "use one of: " + ", ".join(choices))
        return value

    def number(self, key: str, *, kind=float, default=None, positive: bool = True):
        """A finite number (``kind=int``: integral), ``> 0`` when ``positive``; ``default``
        when absent (None: required)."""
        if key not in self.data:
            if default is None:
                raise self.error(key, f"missing required key {key!r}", f"add {key} = <number>")
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                kind is int and not float(v).is_integer()):
            raise self.error(key, f"{key} must be {'an integer' if kind is int else 'a number'}"
                             f", got {v!r}", f"write {key} = <number>")
        if not math.isfinite(v):
            raise self.error(key, f"{key} must be a finite number, got {v}",
                             f"write {key} = <number>")
        if positive and not v > 0:
            raise self.error(key, f"{key} must be > 0, got {v}", f"use {key} > 0")
        return kind(v)

    def bounded(self, key: str, value, lo, hi):
        """``value`` within ``[lo, hi]``, else an error naming the key and the range."""
        if not lo <= value <= hi:
            raise self.error(key, f"{key} = {value:,} is out of range", range_fix(lo, hi))
        return value

    def no_unknown(self, allowed, *, message=None, fix=None) -> None:
        """Every key of the table is in ``allowed``.  ``message(key)`` / ``fix(valid)`` word
        the error (default: "unknown key", "remove it or use one of: ...")."""
        for key in self.data:
            if key not in allowed:
                valid = sorted(allowed)
                raise self.error(key, message(key) if message else "unknown key",
                                 fix(valid) if fix else "remove it or use one of: "
                                 + ", ".join(valid))


def parse_config(text: str, *, file: str | None, syntax_message: str = "not valid TOML",
                 syntax_fix: str = "repair the TOML syntax at that line") -> ConfigDoc:
    """Parse TOML ``text`` within the limits; a syntax error names tomllib's line
    (``FILE:LINE``)."""
    try:
        data = loads_toml(text, file=file)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        where = f"{file}:{line.group(1)}" if line and file else file
        raise InputError(f"{syntax_message}: {exc}", file=where, fix=syntax_fix) from None
    return ConfigDoc(data=data, text=text, file=file)


def read_config(path, *, what: str, action: str, missing_fix: str,
                syntax_message: str = "not valid TOML",
                syntax_fix: str = "repair the TOML syntax at that line") -> ConfigDoc:
    """Read and parse the TOML file ``path`` (``what``: "campaign file", ...): a missing
    file, a FIFO or device, more than :data:`~evalkit.limits.MAX_CONFIG_BYTES` bytes, bytes
    that are not UTF-8 or bad TOML end in an InputError naming the file."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what} not found", file=str(path), fix=missing_fix)
    text = read_text_bounded(path, MAX_CONFIG_BYTES, what, action=action,
                             fix=f"{what}s are limited to {MAX_CONFIG_BYTES:,} bytes")
    return parse_config(text, file=str(path), syntax_message=syntax_message,
                        syntax_fix=syntax_fix)
