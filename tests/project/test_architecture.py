"""The tree's layering, read from the source (every import statement, module level or local):
no import cycle anywhere in the package, and no import against the layers of the data path

    run store --runlog--> run table --audit (uses stats)--> AuditDocument --report--> files
                                                           AuditDocument --gate, diff--> exit code

with replay (traces, policies, backends) beside the audit feeding the same format, interop
importing into it, and the CLI and the composition (``evalkit``, ``evalkit.compose``) on top.
The document's vocabulary (``evalkit.document``: its schema, the tier walk, the protocol's
rules, the sentences about numbers) lies just above the base: the audit writes with it, the
report and the gate read with it, and it imports nothing else.
"""

from __future__ import annotations

import ast
import re
import subprocess

import pytest

from tests.support.import_paths import (NAMESPACES, public_api_problems, reexport_imports,
                                        tracked_files, tracked_merge_leftovers)
from tests.support.imports import PACKAGE, cycles, import_graph

BASE = "base"           # errors, limits, fsutil, jsonio, config, names, fileread, ...
TOP = "top"             # the composition: evalkit/__init__.py, evalkit/compose.py, the CLI

# layer -> the layers it may import (besides itself)
ALLOWED = {
    BASE: set(),
    "runlog": {BASE},
    "stats": {BASE},
    "policies": {BASE, "runlog", "stats"},
    "document": {BASE},
    "audit": {BASE, "runlog", "stats", "policies", "document"},
    "report": {BASE, "document"},
    "replay": {BASE, "runlog", "stats", "policies", "document"},
    "interop": {BASE, "runlog"},
    "compare": {BASE, "runlog", "stats", "interop", "report"},
    TOP: None,          # anything
}


@pytest.fixture(scope="module")
def package_graph() -> dict[str, set[str]]:
    """The package's import graph, built once for the rules that read it (none changes it)."""
    return import_graph()


def layer(module: str) -> str:
    parts = module.split(".")
    if module == "evalkit" or parts[1:2] in (["cli"], ["compose"]):
        return TOP
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
            if there == here or there in allowed:
                continue
            out.append(f"{mod} ({here}) imports {t} ({there})")
    return out


def test_no_import_cycle_anywhere_in_the_package(package_graph):
    found = cycles(package_graph)
    assert found == [], found


def test_no_import_runs_against_the_layers(package_graph):
    bad = upward_imports(package_graph)
    assert bad == [], "\n".join(bad)


GATE = ("evalkit.audit.gate", "evalkit.audit.sequential")


def replay_imports_of_the_audit(graph: dict[str, set[str]]) -> list[str]:
    """Imports of the audit by the replay: none, not even the protocol reader (the top layer
    loads the protocol a plan is frozen under and passes it in)."""
    return sorted(f"{mod} imports {t}" for mod, targets in graph.items()
                  if layer(mod) == "replay" for t in targets if layer(t) == "audit")


def gate_imports_beyond_documents(graph: dict[str, set[str]]) -> list[str]:
    """Imports of the gate's modules other than the document layer, stats and the base."""
    return sorted(f"{mod} imports {t}" for mod in GATE for t in graph.get(mod, ())
                  if t not in GATE and layer(t) not in ("document", "stats", BASE))


def test_the_replay_imports_nothing_of_the_audit(package_graph):
    bad = replay_imports_of_the_audit(package_graph)
    assert bad == [], "\n".join(bad)


def test_the_gate_reads_documents_only(package_graph):
    """The gate decides on an audit document: its modules import the document layer, the
    statistics (the group-sequential design) and the base, never the audit that writes the document."""
    bad = gate_imports_beyond_documents(package_graph)
    assert bad == [], "\n".join(bad)


def test_the_replay_and_gate_rules_find_an_import_of_the_audit():
    graph = {"evalkit.replay.plan": {"evalkit.audit.protocol", "evalkit.audit.tiers"},
             "evalkit.audit.gate": {"evalkit.audit.sequential", "evalkit.audit.claims",
                                    "evalkit.document.tiers", "evalkit.errors"},
             "evalkit.audit.sequential": {"evalkit.stats.group_sequential", "evalkit.runlog.plan"}}
    assert replay_imports_of_the_audit(graph) == [
        "evalkit.replay.plan imports evalkit.audit.protocol",
        "evalkit.replay.plan imports evalkit.audit.tiers"]
    assert gate_imports_beyond_documents(graph) == [
        "evalkit.audit.gate imports evalkit.audit.claims",
        "evalkit.audit.sequential imports evalkit.runlog.plan"]


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
    assert bad == ["evalkit.report.render (report) imports evalkit.audit.tiers (audit)",
                   "evalkit.runlog.io (runlog) imports evalkit.audit.x (audit)"]


def test_a_replay_that_reads_the_protocol_itself_runs_against_the_layers(tmp_path):
    """The protocol reader is the audit's like any other of its modules: a replay module that
    imports it (here inside a function) is an upward import, whichever rule looks."""
    pkg = tmp_path / "evalkit"
    for sub in ("replay", "audit"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "audit" / "protocol.py").write_text("")
    (pkg / "replay" / "plan.py").write_text(
        "def freeze_plan(path):\n    from evalkit.audit.protocol import load_protocol\n")
    graph = import_graph(pkg)
    assert upward_imports(graph) == [
        "evalkit.replay.plan (replay) imports evalkit.audit.protocol (audit)"]
    assert replay_imports_of_the_audit(graph) == [
        "evalkit.replay.plan imports evalkit.audit.protocol"]


@pytest.mark.parametrize("module, expected", [
    ("evalkit.errors", BASE), ("evalkit.runlog.io", "runlog"), ("evalkit.cli.main", TOP),
    ("evalkit.policies.base", "policies"), ("evalkit.replay.sweep", "replay"),
    ("evalkit", TOP), ("evalkit.compose.until_decided", TOP),
    ("evalkit.document.tiers", "document")])
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


# --------------------------------------------------------------- names come from their module

def test_every_import_names_the_module_that_defines_it():
    bad = reexport_imports()
    assert bad == [], ("import these names from the module that defines them:\n"
                       + "\n".join(bad))


def _tree(root, files: dict[str, str]):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_import_rule_finds_every_kind_of_re_export_path(tmp_path):
    _tree(tmp_path, {
        "evalkit/__init__.py": "from evalkit.core import f\n",
        "evalkit/core.py": "def f():\n    pass\n\n\nLIMIT = 3\n",
        "evalkit/shim.py": "from evalkit.core import *  # noqa\n",
        "evalkit/facade.py": "from evalkit.core import LIMIT, f\n\n\ndef g():\n    return f()\n",
        "evalkit/user.py": ("from evalkit import core\nfrom evalkit.core import LIMIT, f\n"
                            "from evalkit.facade import g\n"),
        "tests/__init__.py": "",
        "tests/test_user.py": ("from evalkit import f\n\n\ndef test_f():\n"
                               "    from evalkit.facade import LIMIT, f\n"
                               "    from evalkit.shim import f as again\n"),
        "tools/bench.py": "from evalkit.gone import f\n",
    })
    assert reexport_imports(tmp_path, namespaces={"evalkit"}) == [
        "evalkit/shim.py:1: from evalkit.core import *",
        "tests/test_user.py:5: from evalkit.facade import LIMIT",
        "tests/test_user.py:5: from evalkit.facade import f",
        "tests/test_user.py:6: from evalkit.shim import f",
        "tools/bench.py:1: from evalkit.gone import f (no such module)",
    ]
    # the package namespace is allowed only when it is named as documented
    assert "tests/test_user.py:1: from evalkit import f" in reexport_imports(
        tmp_path, namespaces=set())


def test_no_merge_leftover_is_tracked():
    assert tracked_merge_leftovers(tracked_files()) == []


def test_the_leftover_rule_finds_orig_and_rej_files(tmp_path):
    _tree(tmp_path, {"a.py": "", "pkg/b.py.orig": "", "pkg/c.py.rej": "", "d.original": ""})
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    assert tracked_merge_leftovers(tracked_files(tmp_path)) == ["pkg/b.py.orig", "pkg/c.py.rej"]


# --------------------------------------------------------------- every check family in checks/

CHECKS_CORE = "evalkit.audit.checks.core"


def checks_outside_the_checks_package(root=PACKAGE) -> list[str]:
    """``file:line: @check name`` for each function that a module of the audit outside
    ``audit/checks/`` registers with the check decorator (under any name it imports it as):
    every check family lives in ``checks/``, whose ``__init__`` imports them all."""
    out = []
    for path in sorted((root / "audit").rglob("*.py")):
        rel = path.relative_to(root.parent)
        if rel.parts[2:3] == ("checks",):
            continue
        tree = ast.parse(path.read_text())
        decorators, modules = set(), set()      # names bound to check / to its module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == CHECKS_CORE:
                decorators |= {a.asname or a.name for a in node.names if a.name == "check"}
            elif isinstance(node, ast.ImportFrom) and f"{node.module}.core" == CHECKS_CORE:
                modules |= {a.asname or a.name for a in node.names if a.name == "core"}
            elif isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names if a.name == CHECKS_CORE and a.asname}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for dec in node.decorator_list:
                dec = dec.func if isinstance(dec, ast.Call) else dec
                if (isinstance(dec, ast.Name) and dec.id in decorators) or (
                        isinstance(dec, ast.Attribute) and dec.attr == "check"
                        and isinstance(dec.value, ast.Name) and dec.value.id in modules):
                    out.append(f"{rel}:{node.lineno}: @check {node.name}")
    return out


def test_every_check_family_lives_in_audit_checks():
    bad = checks_outside_the_checks_package()
    assert bad == [], "move these check families into evalkit/audit/checks/:\n" + "\n".join(bad)


def test_the_check_family_rule_finds_a_check_outside_checks(tmp_path):
    core = "def check(name, params=None):\n    return lambda f: f\n"
    _tree(tmp_path, {
        "evalkit/audit/checks/core.py": core,
        "evalkit/audit/checks/fine.py": ("from evalkit.audit.checks.core import check\n\n\n"
                                         "@check('inside')\ndef inside(ctx, spec):\n    pass\n"),
        "evalkit/audit/drift.py": ("from evalkit.audit.checks.core import check\n\n\n"
                                   "@check('drift', params={'alpha': 0.05})\n"
                                   "def drift(ctx, spec):\n    pass\n"),
        "evalkit/audit/renamed.py": ("from evalkit.audit.checks.core import check as register\n\n\n"
                                     "@register('renamed')\ndef renamed(ctx, spec):\n    pass\n"),
        "evalkit/audit/dotted.py": ("from evalkit.audit.checks import core\n\n\n"
                                    "@core.check('dotted')\ndef dotted(ctx, spec):\n    pass\n"),
        "evalkit/audit/aliased.py": ("import evalkit.audit.checks.core as C\n\n\n"
                                     "@C.check\ndef aliased(ctx, spec):\n    pass\n"),
        "evalkit/audit/other.py": ("import functools\n\n\n@functools.cache\n"
                                   "def check(x):\n    return x\n\n\n"
                                   "@check\ndef not_a_family(ctx):\n    pass\n"),
    })
    assert checks_outside_the_checks_package(tmp_path / "evalkit") == [
        "evalkit/audit/aliased.py:5: @check aliased",
        "evalkit/audit/dotted.py:5: @check dotted",
        "evalkit/audit/drift.py:5: @check drift",
        "evalkit/audit/renamed.py:5: @check renamed",
    ]


# packages and base modules whose public modules say what they offer (``__all__``)
DECLARED = ("stats", "audit", "runlog", "report", "interop", "compose", "document",
            "compare",
            *sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"))


def test_public_modules_declare_all_and_every_name_in_it_exists():
    bad = public_api_problems(DECLARED)
    assert bad == [], "\n".join(bad)


def test_the_all_rule_finds_a_missing_all_a_missing_name_a_private_one_a_repeat_and_a_re_export(
        tmp_path):
    _tree(tmp_path, {
        "evalkit/__init__.py": "",
        "evalkit/base.py": "LIMIT = 1\n",
        "evalkit/twice.py": "__all__ = ['f']\n\n\ndef f():\n    pass\n\n\n__all__ = ['f']\n",
        "evalkit/version.py": "__all__ = ['__version__']\n\n__version__ = '1'\n",
        "evalkit/stats/__init__.py": '"""a namespace with nothing in it"""\n',
        "evalkit/stats/_private.py": "def helper():\n    pass\n",
        "evalkit/stats/fine.py": ("from math import sqrt\n\n__all__ = ['f']\n\n\n"
                                  "def f():\n    return sqrt(2)\n"),
        "evalkit/stats/passing_on.py": "from math import sqrt\n\n__all__ = ['sqrt']\n",
        "evalkit/stats/sub/__init__.py": "__all__ = ['leaf']\n",
        "evalkit/stats/sub/leaf.py": "__all__ = []\n",
        "evalkit/stats/bare.py": "def f():\n    pass\n",
        "evalkit/stats/wrong.py": "__all__ = ['f', 'gone', '_hidden']\n\n\ndef f():\n    pass\n\n\n"
                                  "def _hidden():\n    pass\n",
    })
    assert public_api_problems(["stats", "base.py", "version.py", "twice.py"],
                               tmp_path / "evalkit") == [
        "evalkit/stats/bare.py: no __all__",
        "evalkit/stats/passing_on.py: __all__ re-exports 'sqrt', which it imports",
        "evalkit/stats/wrong.py: __all__ names 'gone', which it does not have",
        "evalkit/stats/wrong.py: __all__ names the private '_hidden'",
        "evalkit/base.py: no __all__",
        "evalkit/twice.py: __all__ declared 2 times",
    ]


def test_readme_names_the_namespaces_the_import_rule_allows():
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme[readme.index("## Architecture"):readme.index("## Command overview")]
    sentence = section[section.index("Every import names"):section.index("Public modules")]
    named = set(re.findall(r"`(evalkit[\w.]*)`", sentence))
    assert named == NAMESPACES


# --------------------------------------------------------------- policies; the two backend wings

def policy_layer_problems(graph: dict[str, set[str]]) -> list[str]:
    """``evalkit.policies`` is the layer the replay (which runs policies) and the audit (whose
    registry says what a policy is) both read; it imports neither."""
    out = [f"{mod} imports {t}" for mod, targets in sorted(graph.items())
           if layer(mod) == "policies" for t in sorted(targets)
           if layer(t) in ("replay", "audit")]
    for reader in ("replay", "audit"):
        if not any(layer(t) == "policies" for mod, targets in graph.items()
                   if layer(mod) == reader for t in targets):
            out.append(f"no {reader} module imports evalkit.policies")
    return out


WINGS = {"evalkit.replay.backends.sidecar": "the serving sidecar",
         "evalkit.replay.backends.torch": "the torch backend's learners"}


def wing(module: str) -> str | None:
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


def wing_crossings(graph: dict[str, set[str]]) -> list[str]:
    """The serving sidecar and the torch backend's training wing import nothing of each other
    (what both need lives beside them in ``replay/backends/``: procs, models)."""
    return [f"{mod} ({WINGS[wing(mod)]}) imports {t} ({WINGS[wing(t)]})"
            for mod, targets in sorted(graph.items()) if wing(mod)
            for t in sorted(targets) if wing(t) not in (None, wing(mod))]


def test_policies_are_read_by_replay_and_audit_and_import_neither(package_graph):
    bad = policy_layer_problems(package_graph)
    assert bad == [], "\n".join(bad)


def test_the_policy_rule_finds_an_import_of_replay_or_audit_and_a_reader_gone(tmp_path):
    _tree(tmp_path, {
        "evalkit/__init__.py": "", "evalkit/policies/__init__.py": "",
        "evalkit/policies/base.py": "from evalkit.replay import spec\n",
        "evalkit/policies/simple.py": "def f():\n    from evalkit.audit import registry\n",
        "evalkit/replay/__init__.py": "", "evalkit/replay/spec.py": "",
        "evalkit/replay/runner.py": "from evalkit.policies import base\n",
        "evalkit/audit/__init__.py": "", "evalkit/audit/registry.py": "",
    })
    assert policy_layer_problems(import_graph(tmp_path / "evalkit")) == [
        "evalkit.policies.base imports evalkit.replay.spec",
        "evalkit.policies.simple imports evalkit.audit.registry",
        "no audit module imports evalkit.policies",
    ]


def test_the_sidecar_and_the_torch_learners_import_nothing_of_each_other(package_graph):
    graph = package_graph
    assert any(wing(m) == "evalkit.replay.backends.sidecar" for m in graph)
    assert any(wing(m) == "evalkit.replay.backends.torch" for m in graph)
    bad = wing_crossings(graph)
    assert bad == [], "\n".join(bad)


def test_the_wing_rule_finds_an_import_in_either_direction(tmp_path):
    _tree(tmp_path, {
        "evalkit/__init__.py": "", "evalkit/replay/__init__.py": "",
        "evalkit/replay/backends/__init__.py": "", "evalkit/replay/backends/procs.py": "",
        "evalkit/replay/backends/sidecar/__init__.py": "",
        "evalkit/replay/backends/sidecar/serve.py": (
            "from evalkit.replay.backends.procs import x\n"
            "from evalkit.replay.backends.torch.rig import y\n"),
        "evalkit/replay/backends/torch/__init__.py": "from .rig import y\n",
        "evalkit/replay/backends/torch/rig.py": (
            "def f():\n    from evalkit.replay.backends.sidecar import serve\n"),
    })
    assert wing_crossings(import_graph(tmp_path / "evalkit")) == [
        "evalkit.replay.backends.sidecar.serve (the serving sidecar) imports "
        "evalkit.replay.backends.torch.rig (the torch backend's learners)",
        "evalkit.replay.backends.torch.rig (the torch backend's learners) imports "
        "evalkit.replay.backends.sidecar.serve (the serving sidecar)",
    ]
