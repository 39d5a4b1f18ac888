"""Optional libraries (the torch, serve and client extras) in tests, found without importing
them: ``pytest.importorskip`` at module level imports torch, transformers and openai in every
worker while the suite is collected (about 3 s each time), even where no test of the module
runs."""

from __future__ import annotations

import importlib
import importlib.util

import pytest


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):       # a parent package that is absent or broken
        return True


def installed(*names: str) -> pytest.MarkDecorator:
    """Skip, naming what is missing, unless every library in ``names`` is installed."""
    missing = [n for n in names if _missing(n)]
    return pytest.mark.skipif(bool(missing), reason="not installed: " + ", ".join(missing))


class LazyModule:
    """A module imported at its first attribute access (inside a test, not at collection)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)
