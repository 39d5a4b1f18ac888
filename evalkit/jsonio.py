"""The one JSON normaliser: every JSON file evalkit writes goes through :func:`to_jsonable`.

One NaN policy: NaN and +-inf become ``null`` (strict JSON has neither; every value that can be
non-finite sits beside a text saying why).  The one exception is named: ``infinity=True`` keeps
+-inf as ``Infinity`` / ``-Infinity`` (``evalkit summarize --out json`` writes the latency of a
failed request that way on purpose; NaN is still ``null`` there).

``digits`` rounds every float to that many significant digits (``audit.json`` uses
:data:`FLOAT_DIGITS`, so the document is the same on every platform); a rounded zero is written
``0.0``, never ``-0.0``.

Reading is here too: every JSON input evalkit reads (run.json, plan.json, audit.json, imported
GuideLLM and vLLM results) goes through :func:`read_json` / :func:`loads_json`, the one front
door that refuses special files, bounds the bytes read and the nesting depth (checked on the
text, before the parser can recurse), and refuses duplicate keys and non-finite numbers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from itertools import accumulate
from pathlib import Path, PurePath

from evalkit.errors import InputError
from evalkit.fileread import read_input_bytes
from evalkit.limits import MAX_JSON_NESTING

__all__ = ["FLOAT_DIGITS", "to_jsonable", "dumps", "canonical_json",
           "dump_json", "loads_json", "read_json"]

FLOAT_DIGITS = 10   # significant digits of every float in audit.json


def _float(x: float, digits: int | None, infinity: bool):
    if math.isnan(x) or (math.isinf(x) and not infinity):
        return None
    if digits is None or math.isinf(x):
        return x
    x = float(f"{x:.{digits}g}")
    return 0.0 if x == 0 else x


def _missing(obj) -> bool:
    """pandas' NA / NaT (without importing pandas: `evalkit --help` loads neither pandas nor
    numpy, and this module is imported by the CLI)."""
    cls = type(obj)
    return cls.__module__.startswith("pandas") and cls.__name__ in ("NAType", "NaTType")


def to_jsonable(obj, digits: int | None = None, *, infinity: bool = False,
                strict: bool = False):
    """``obj`` as plain JSON values: dicts (keys as str), lists (from tuples and arrays),
    bool, int, float (NaN/inf -> None unless ``infinity``; rounded to ``digits`` significant
    digits), str, None.  Numpy scalars become Python ones, paths their text, pandas NA/NaT
    None, a dataclass instance its ``to_dict()`` (or its fields).  Anything else becomes
    ``str(obj)``, or a TypeError with ``strict``."""
    def go(v):
        if v is None or isinstance(v, str):
            return v
        if type(v).__module__ == "numpy" and hasattr(v, "tolist"):
            return go(v.tolist())        # numpy scalars and arrays, without importing numpy
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return _float(float(v), digits, infinity)
        if isinstance(v, Mapping):
            return {str(k): go(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [go(x) for x in v]
        if isinstance(v, PurePath):
            return str(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            if hasattr(v, "to_dict"):
                return go(v.to_dict())
            return {f.name: go(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if _missing(v):
            return None
        if strict:
            raise TypeError(f"not JSON serialisable: {type(v).__name__}")
        return str(v)

    return go(obj)


def dumps(obj, digits: int | None = None, *, infinity: bool = False, strict: bool = False,
          sort_keys: bool = True, ensure_ascii: bool = False) -> str:
    """Two-space indented JSON text of ``to_jsonable(obj, ...)`` with a final newline."""
    return json.dumps(to_jsonable(obj, digits, infinity=infinity, strict=strict),
                      sort_keys=sort_keys, indent=2, allow_nan=infinity,
                      ensure_ascii=ensure_ascii) + "\n"


def canonical_json(obj, digits: int | None = FLOAT_DIGITS) -> str:
    """The text of an audit document: sorted keys, floats to ``digits`` significant digits,
    non-finite numbers null, UTF-8 text unescaped."""
    return dumps(obj, digits)


def dump_json(obj, path: str | Path, **options) -> None:
    """Write ``dumps(obj, **options)`` to ``path`` (not atomically: callers that publish a
    file write it into a temporary directory first)."""
    Path(path).write_text(dumps(obj, **options))


# ----------------------------------------------------------------------------- reading

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = tuple(1 if b in b"[{" else -1 for b in range(256))


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text, counted without parsing (so
    without recursion): strings are removed, then the brackets left are summed."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if len(brackets) < 1 << 16:
        return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    import numpy as np      # ten times faster on large files; not loaded for small ones

    steps = np.array(_STEP, dtype=np.int8)[np.frombuffer(brackets, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max())


def _unique_keys(file):
    def pairs_to_dict(pairs):
        out = dict(pairs)
        if len(out) != len(pairs):
            seen = set()
            key = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise InputError(f"the key {key!r} appears twice in one object", file=file,
                             column=key, fix="keep one of the two entries (JSON readers "
                                             "disagree on which one counts)")
        return out
    return pairs_to_dict


def _no_nonfinite(file):
    def refuse(token: str):
        raise InputError(f"the number {token} is not allowed", file=file,
                         fix="write finite numbers (or null) only")

    def finite_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            refuse(text[:40])
        return value
    return refuse, finite_float


def loads_json(raw: bytes | str, *, file=None, what: str = "the file",
               max_depth: int = MAX_JSON_NESTING, nonfinite: bool = False,
               fix: str | None = None):
    """Parsed JSON input; every way it is unusable is an InputError naming ``file``.

    The nesting depth is checked on the text first (a 100,000-deep array never reaches the
    recursive parser); a key twice in one object is refused (readers disagree on which one
    wins); ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) are refused
    unless ``nonfinite`` (files written by tools that emit them, e.g. Python's ``json``).
    """
    file = None if file is None else str(file)
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    depth = nesting_depth(data)
    if depth > max_depth:
        raise InputError(f"JSON nested too deeply to read ({depth:,} levels)", file=file,
                         fix=f"at most {max_depth} levels of nesting")
    options = {"object_pairs_hook": _unique_keys(file)}
    if not nonfinite:
        options["parse_constant"], options["parse_float"] = _no_nonfinite(file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what} is not UTF-8 text", file=file,
                         fix=fix or "save it as UTF-8") from None
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno})", file=file, fix=fix or "repair the JSON") from None
    except RecursionError:      # not reached after the depth check; kept as a last guard
        raise InputError("JSON nested too deeply to read", file=file,
                         fix=f"at most {max_depth} levels of nesting") from None
    except InputError:
        raise
    except ValueError as exc:   # e.g. an integer of more than 4,300 digits
        raise InputError(f"{what} cannot be read as JSON: {str(exc)[:160]}", file=file,
                         fix=fix or "shorten the oversized number") from None


def read_json(path, *, limit: int, what: str = "the file", fix: str | None = None,
              max_depth: int = MAX_JSON_NESTING, nonfinite: bool = False):
    """:func:`loads_json` of the file at ``path``: a regular file (a FIFO or device is refused
    without blocking) of at most ``limit`` bytes read.  A missing or unreadable file is an
    InputError naming the path."""
    raw = read_input_bytes(path, limit, what, action=f"cannot read {what}", fix=fix)
    return loads_json(raw, file=path, what=what, max_depth=max_depth, nonfinite=nonfinite,
                      fix=fix)
