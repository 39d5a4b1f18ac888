"""Typed readers of one JSON request field, each raising vLLM's 400 on a wrong value.

``typed`` checks the JSON type (a boolean is never a number), ``number`` also finiteness,
``int_in`` a range, ``check_ids`` token ids against the vocabulary, ``json_object`` the body.
"""

from __future__ import annotations

import math

from .openai_errors import APIError, schema_error, value_error


def typed(body: dict, key: str, types, what: str, default=None):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise schema_error(key, f"Input should be {what}, got a boolean")
    if not isinstance(v, types):
        raise schema_error(key, f"Input should be {what}, got {type(v).__name__}")
    return v


def number(body: dict, key: str, default: float) -> float:
    """A finite JSON number (an int too large for a float is not one)."""
    v = typed(body, key, (int, float), "a valid number", default)
    try:
        f = float(v)
    except OverflowError:
        f = float("inf")
    if not math.isfinite(f):
        raise value_error(key, f"{key} must be a finite number, got {v}.")
    return f


def int_in(body: dict, key: str, default, lo=None, hi=None, msg=None):
    v = typed(body, key, int, "a valid integer", default)
    if v is not None and ((lo is not None and v < lo) or (hi is not None and v > hi)):
        above = hi is not None and v > hi
        raise value_error(key, msg.format(v=v) if msg else
                          f"{key}: Input should be {'less' if above else 'greater'}"
                          f" than or equal to {hi if above else lo}")
    return v


def check_ids(ids: list, vocab: int, param: str) -> list:
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int):
            raise schema_error(param, "token ids must be integers")
        if not 0 <= t < vocab:
            raise value_error(param, f"token id {t} is out of vocabulary [0, {vocab})")
    return list(ids)


def json_object(body) -> dict:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body
