"""No import cycle through evalkit/replay, counting imports inside functions too.

A cycle hidden behind a function-local import still ties the two modules together; this
reads every ``import`` statement of the package (module level or not) from the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "evalkit"


def module_names(root: Path) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def imports_of(name: str, path: Path, known) -> set[str]:
    """Modules of ``known`` that ``path`` imports anywhere (the longest known prefix)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_pkg else name.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name``, mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle_behind_a_local_import(tmp_path):
    pkg = tmp_path / "evalkit"
    (pkg / "replay").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "replay" / "__init__.py").write_text("")
    (pkg / "replay" / "a.py").write_text("from evalkit.replay.b import f\n")
    (pkg / "replay" / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "replay" / "c.py").write_text("from evalkit.replay import a\n")
    known = module_names(pkg)
    edges = {m: imports_of(m, p, known) for m, p in known.items()}
    assert cycles(edges) == [["evalkit.replay.a", "evalkit.replay.b"]]


def test_no_import_cycle_runs_through_the_replay_package():
    known = module_names(PACKAGE)
    edges = {m: imports_of(m, p, known) for m, p in known.items()}
    found = [c for c in cycles(edges)
             if any(m.startswith("evalkit.replay") for m in c)]
    assert found == [], found


@pytest.mark.parametrize("old, new", [
    ("evalkit.replay.backends.sim_model", "evalkit.replay.backends.sim.model"),
    ("evalkit.replay.backends.sim_fit", "evalkit.replay.backends.sim.fit"),
    ("evalkit.replay.backends.sim_fit_check", "evalkit.replay.backends.sim.fit_check"),
    ("evalkit.replay.backends.sim_fit_data", "evalkit.replay.backends.sim.fit_data"),
    ("evalkit.replay.backends.sim_fit_predictive", "evalkit.replay.backends.sim.fit_predictive"),
    ("evalkit.replay.twin", "evalkit.replay.backends.sim.twin"),
])
def test_the_old_sim_module_names_give_the_same_objects(old, new):
    import importlib

    o, n = importlib.import_module(old), importlib.import_module(new)
    public = [k for k, v in vars(n).items()
              if not k.startswith("_") and getattr(v, "__module__", None) == new]
    assert public and all(getattr(o, k) is getattr(n, k) for k in public)
