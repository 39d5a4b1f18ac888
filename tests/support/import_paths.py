"""Where each imported name comes from, read from the source: a name is imported from the
module that defines it (a ``def``, ``class`` or assignment there, or a submodule of a package),
never through a module that only imports it in turn (a re-export path), except through the
documented package namespaces (:data:`NAMESPACES`)."""

from __future__ import annotations

import ast
import importlib
import subprocess
from pathlib import Path

from tests.support.imports import PACKAGE, module_names

REPO = PACKAGE.parent
# the package, the tests and the developer scripts and examples that import it
IMPORTERS = ("evalkit", "tests", "tools", "examples")
# package __init__ modules that ARE the documented Python API (README: evalkit.run_audit,
# evalkit.audit.audit_campaign, the evalkit.stats functions, evalkit.policies.Policy
# for plugins; the traces package's own doctest): importing a name through them is the point
NAMESPACES = frozenset({"evalkit", "evalkit.audit", "evalkit.stats", "evalkit.policies",
                        "evalkit.replay.traces"})


def _targets(node) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _targets(elt)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


def defined_names(tree: ast.Module) -> set[str]:
    """The names a module binds itself at module level (imports do not count)."""
    out = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(n for t in node.targets for n in _targets(t))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            out.update(_targets(node.target))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            out.update(_targets(node.target))
            body += node.body + node.orelse
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            out.update(n for item in node.items for n in _targets(item.optional_vars))
            body += node.body
        elif isinstance(node, (ast.If, ast.While)):
            body += node.body + node.orelse
        elif isinstance(node, ast.Try):
            body += node.body + node.orelse + node.finalbody
            body += [n for h in node.handlers for n in h.body]
    return out


def _source_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _import_froms(body):
    """The ``from ... import`` statements among ``body``, at any depth of statements (imports
    are statements: the expressions, most of a tree, need no visit)."""
    for node in body:
        if isinstance(node, ast.ImportFrom):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _import_froms(getattr(node, field, ()))


def _python_files(repo: Path):
    for top in IMPORTERS:
        yield from sorted(p for p in (repo / top).rglob("*.py") if "__pycache__" not in p.parts)


def reexport_imports(repo: Path = REPO, namespaces=NAMESPACES) -> list[str]:
    """``file:line: from M import name`` for every import (module level or local) of a name
    that module M of the package, the tests or the tools does not define itself."""
    known = {}
    for top in IMPORTERS:
        if (repo / top).is_dir():
            known.update(module_names(repo / top))
    names_of = {}                   # module -> the names it defines
    out = []
    by_path = {p: m for m, p in known.items()}
    for path in _python_files(repo):
        importer = by_path.get(path, path.stem)
        for node in _import_froms(ast.parse(path.read_text()).body):
            source = _source_module(importer, path, node)
            if source.split(".")[0] in IMPORTERS and source not in known:
                out.append(f"{path.relative_to(repo)}:{node.lineno}: from {source} import "
                           f"{', '.join(a.name for a in node.names)} (no such module)")
                continue
            if source not in known or source in namespaces:
                continue
            if source not in names_of:
                names_of[source] = defined_names(ast.parse(known[source].read_text()))
            for alias in node.names:
                if alias.name in names_of[source] or f"{source}.{alias.name}" in known:
                    continue
                out.append(f"{path.relative_to(repo)}:{node.lineno}: from {source} import "
                           f"{alias.name}")
    return out


def tracked_merge_leftovers(files: list[str]) -> list[str]:
    """The ``.orig`` / ``.rej`` files a merge or a patch left behind, among ``files``."""
    return sorted(f for f in files if f.endswith((".orig", ".rej")))


def tracked_files(repo: Path = REPO) -> list[str]:
    """The files git tracks in ``repo``."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


def _all_declarations(tree: ast.Module) -> list[ast.stmt]:
    return [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            and "__all__" in _targets(node.targets[0] if isinstance(node, ast.Assign)
                                      else node.target)]


def _all_names(declaration: ast.stmt) -> list[str] | None:
    """``__all__`` as a list of strings when the module writes it as a literal; else None."""
    try:
        return list(ast.literal_eval(declaration.value))
    except ValueError:
        return None


def public_api_problems(packages, root: Path = PACKAGE) -> list[str]:
    """Public modules of ``packages`` (folders or modules of the package) that declare no
    ``__all__``, or list in it a private name, a name the module does not have, or (a module
    that is not a package's ``__init__``) a name it only imports: a re-export. A package
    ``__init__`` that binds nothing (a docstring) has no names to declare."""
    known = module_names(root)
    out = []
    for package in packages:
        where = root / package
        for path in [where] if where.is_file() else sorted(where.rglob("*.py")):
            if path.name.startswith("_") and path.name != "__init__.py":
                continue
            rel = path.relative_to(root.parent)
            tree = ast.parse(path.read_text())
            module = ".".join(rel.with_suffix("").parts[:-1] if path.name == "__init__.py"
                              else rel.with_suffix("").parts)
            own = defined_names(tree)
            imported = {alias.asname or alias.name.split(".")[0] for node in tree.body
                        if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
            bound = own | imported
            if path.name == "__init__.py" and not bound:
                continue
            if "__all__" not in bound:
                out.append(f"{rel}: no __all__")
                continue
            declared = _all_declarations(tree)
            if len(declared) > 1:
                out.append(f"{rel}: __all__ declared {len(declared)} times")
            names = _all_names(declared[0]) if declared else []
            if names is None:           # computed (a lazy namespace): ask the module itself
                namespace = importlib.import_module(module)
                names = namespace.__all__
                have = {n for n in names if hasattr(namespace, n)}
            else:
                have = bound | {m.rpartition(".")[2] for m in known
                                if m.rpartition(".")[0] == module}
            out += [f"{rel}: __all__ names {n!r}, which it does not have" for n in names
                    if n not in have]
            out += [f"{rel}: __all__ names the private {n!r}" for n in names
                    if n.startswith("_") and not n.endswith("__")]
            if path.name != "__init__.py":
                out += [f"{rel}: __all__ re-exports {n!r}, which it imports" for n in names
                        if n in imported and n not in own]
    return out
