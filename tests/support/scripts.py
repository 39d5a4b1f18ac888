"""The repository's scripts (tools/, examples/, fixtures/) loaded as modules for their tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load_script(path: Path, name: str):
    """The module that ``path`` defines, under ``name``, without putting its folder on the
    import path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
