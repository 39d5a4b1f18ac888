"""The one JSON normaliser: every JSON file evalkit writes goes through :func:`to_jsonable`.

One NaN policy: NaN and +-inf become ``null`` (strict JSON has neither; every value that can be
non-finite sits beside a text saying why).  The one exception is named: ``infinity=True`` keeps
+-inf as ``Infinity`` / ``-Infinity`` (``evalkit summarize --out json`` writes the latency of a
failed request that way on purpose; NaN is still ``null`` there).

``digits`` rounds every float to that many significant digits (``audit.json`` uses
:data:`FLOAT_DIGITS`, so the document is the same on every platform); a rounded zero is written
``0.0``, never ``-0.0``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path, PurePath

__all__ = ["AUDIT_SCHEMA", "FLOAT_DIGITS", "to_jsonable", "dumps", "canonical_json",
           "dump_json"]

FLOAT_DIGITS = 10   # significant digits of every float in audit.json
# The layout of the audit document (audit.json), written by evalkit.audit.result and read by
# evalkit.report: here, below both, so that neither imports the other for it.
AUDIT_SCHEMA = "evalkit-audit/1"


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
