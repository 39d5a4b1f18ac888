"""The tree's layering, read from the source (every import statement, module level or local):
no import cycle anywhere in the package, and no import against the layers of the data path

    run store --runlog--> run table --audit (uses stats)--> AuditDocument --report--> files

with replay (traces, policies, backends) beside the audit feeding the same format, interop
importing into it, and the CLI and the composition (``evalkit``, ``evalkit.compose``) on top.
"""

from __future__ import annotations

import ast

import pytest

from tests.support.imports import PACKAGE, cycles, import_graph

BASE = "base"           # errors, limits, fsutil, jsonio, config, names, fileread, ...
TOP = "top"             # the composition: evalkit/__init__.py, evalkit/compose.py, the CLI

# layer -> the layers it may import (besides itself)
ALLOWED = {
    BASE: set(),
    "runlog": {BASE},
    "stats": {BASE},
    "policies": {BASE, "runlog", "stats"},
    "audit": {BASE, "runlog", "stats", "policies"},
    "report": {BASE, "document"},
    "replay": {BASE, "runlog", "stats", "policies", "protocol"},
    "interop": {BASE, "runlog"},
    TOP: None,          # anything
}
# single modules that a lower layer may read: the tier semantics and protocol rules a report
# needs to present a document, and the protocol a campaign plan is frozen under
NARROW = {"evalkit.audit.tiers": "document", "evalkit.audit.protocol_rules": "document",
          "evalkit.audit.wording": "document", "evalkit.audit.protocol": "protocol"}


def layer(module: str) -> str:
    parts = module.split(".")
    if module == "evalkit" or parts[1:2] in (["cli"], ["compose"]):
        return TOP
    if parts[1:3] == ["replay", "policies"]:
        return "policies"
    if len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return BASE


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for mod, targets in sorted(graph.items()):
        here = layer(mod)
        allowed = ALLOWED[here]
        if allowed is None:
            continue
        for t in sorted(targets):
            there = layer(t)
            if there == here or there in allowed or NARROW.get(t) in allowed:
                continue
            out.append(f"{mod} ({here}) imports {t} ({there})")
    return out


def test_no_import_cycle_anywhere_in_the_package():
    found = cycles(import_graph())
    assert found == [], found


def test_no_import_runs_against_the_layers():
    bad = upward_imports(import_graph())
    assert bad == [], "\n".join(bad)


def test_the_layer_check_finds_an_upward_import(tmp_path):
    pkg = tmp_path / "evalkit"
    for sub in ("runlog", "audit", "report"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "runlog" / "io.py").write_text("def f():\n    from evalkit.audit import x\n")
    (pkg / "audit" / "x.py").write_text("from evalkit.runlog import io\n")
    (pkg / "audit" / "tiers.py").write_text("")
    (pkg / "report" / "render.py").write_text("from evalkit.audit import tiers\n")
    bad = upward_imports(import_graph(pkg))
    assert bad == ["evalkit.runlog.io (runlog) imports evalkit.audit.x (audit)"]


@pytest.mark.parametrize("module, expected", [
    ("evalkit.errors", BASE), ("evalkit.runlog.io", "runlog"), ("evalkit.cli.main", TOP),
    ("evalkit.replay.policies.base", "policies"), ("evalkit.replay.sweep", "replay"),
    ("evalkit", TOP), ("evalkit.compose.until_decided", TOP)])
def test_layers_of_modules(module, expected):
    assert layer(module) == expected
    assert PACKAGE.name == "evalkit"


def uncommented_local_imports(root=PACKAGE) -> list[str]:
    """Function-local imports of the package's own modules with no comment saying why, outside
    the CLI (whose commands import their implementation when run, so `evalkit --help` stays
    fast): with no cycle left to hide, a local import is only for start-up time, and says so."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if rel.parts[1:2] == ("cli",):
            continue
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for sub in ast.walk(node):
                if not isinstance(sub, ast.ImportFrom) or not (sub.module or "").startswith(
                        root.name) or sub.level:
                    continue
                text = lines[sub.lineno - 2:sub.end_lineno]
                if not any("#" in line for line in text):
                    out.append(f"{rel}:{sub.lineno}: {lines[sub.lineno - 1].strip()}")
    return sorted(set(out))


def test_local_imports_of_the_package_say_why():
    bad = uncommented_local_imports()
    assert bad == [], "\n".join(bad)


def test_the_local_import_rule_finds_an_uncommented_one(tmp_path):
    pkg = tmp_path / "evalkit"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "a.py").write_text("def f():\n    from evalkit.b import x\n\n\n"
                              "def g():\n    from evalkit.b import y  # scipy: start-up time\n")
    (pkg / "cli" / "c.py").write_text("def h():\n    from evalkit.b import z\n")
    assert uncommented_local_imports(pkg) == ["evalkit/a.py:2: from evalkit.b import x"]
