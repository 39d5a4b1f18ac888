"""Deterministic mutation testing for evalkit.stats, evalkit.audit, evalkit.runlog and
evalkit.document (the audit's stack; the policies are the replay's and are not mutated).

Each mutant is one small, realistic bug from a fixed catalogue (:data:`OPERATORS`), applied
to one module of a private copy of the package; the test files of that module, found by
the layout of ``tests/`` (:func:`tests_for`), run against it with ``pytest -x -q -p no:cacheprovider -m "not slow"``.
A failing run (or a timeout) kills the mutant; a passing run lets it survive.  The checkout
itself is never modified, so other work in the tree is unaffected.

Speed: the parent process imports the heavy third-party libraries once and forks one child
per mutant (numpy, pandas, scipy are shared copy-on-write); evalkit itself is imported fresh
in every child, from the mutated copy.  Bytecode caching is off so no stale .pyc is reused.

    nice -n 10 python3 tools/mutate.py --sample 120 --seed 16 --out mutation.jsonl
    python3 tools/mutate.py --list | wc -l            # the whole catalogue, no tests run
    python3 tools/mutate.py --only 'evalkit/stats/randomisation.py:214:3'   # re-run some ids

A mutant id is ``path:line:n`` (n-th mutable site of that line); ids follow the source, so
record the commit with a score.
"""

from __future__ import annotations

import argparse
import ast
import copy
import fnmatch
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("evalkit/stats", "evalkit/audit", "evalkit/runlog", "evalkit/document")

TESTS = REPO / "tests"

# The few modules whose behaviour is mostly seen from the tests of another package (their
# words and fields reach the reader through the report); run those too.
EXTRA_TESTS = {
    "evalkit/document/words.py": ["tests/report/test_render_sentences.py",
                                  "tests/stats/test_tail_luck.py",
                                  "tests/stats/test_level_trend.py"],
    "evalkit/audit/provenance.py": ["tests/report/test_render.py",
                                    "tests/project/test_readme_setup.py"],
    "evalkit/audit/gate.py": ["tests/cli/test_gate.py"],
    "evalkit/audit/sequential.py": ["tests/audit/test_verdicts_assumptions.py"],
}

# ------------------------------------------------------------------------ the catalogue

_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
        ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
        ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
          ast.FloorDiv: ast.Div}
_SWAP_NAMES = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum",
               "any": "all", "all": "any", "floor": "ceil", "ceil": "floor"}

OPERATORS = {
    "cmp": "comparison flipped at its boundary (< <-> <=, > <-> >=) or negated (== <-> !=, "
           "in <-> not in, is <-> is not)",
    "bool": "and <-> or",
    "not": "'not x' -> 'x'",
    "arith": "+ <-> -, * <-> /, // -> /",
    "plus1": "'x + 1' / 'x - 1' -> 'x' (the +1 removed)",
    "const": "numeric constant changed: int k -> k + 1, float f -> 2 f (0.0 -> 1.0)",
    "swap": "min <-> max, minimum <-> maximum, any <-> all, floor <-> ceil",
    "if": "'if c:' -> 'if not c:'",
    "drop": "a call statement (e.g. a validation step, an append) replaced by 'pass'",
}


def _skip_parents(tree) -> set[int]:
    """ids of nodes inside f-strings, raise statements, asserts and slices: message text,
    not behaviour."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.JoinedStr, ast.Raise, ast.Assert, ast.Slice)):
            skip.update(id(n) for n in ast.walk(node))
        # docstrings and string constants are never mutated (see _sites)
    return skip


def _sites(tree) -> list[tuple[ast.AST, str, int, str]]:
    """(node, operator, variant, label) for every mutable site, in ast.walk order."""
    skip = _skip_parents(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP:
                    out.append((node, "cmp", i, f"{type(op).__name__} -> "
                                                f"{_CMP[type(op)].__name__}"))
        elif isinstance(node, ast.BoolOp):
            out.append((node, "bool", 0, f"{type(node.op).__name__} -> "
                                         f"{'Or' if isinstance(node.op, ast.And) else 'And'}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((node, "not", 0, "not dropped"))
        elif isinstance(node, ast.BinOp):
            if (isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.right, ast.Constant)
                    and node.right.value == 1 and type(node.right.value) is int):
                out.append((node, "plus1", 0, f"{type(node.op).__name__} 1 removed"))
            elif type(node.op) in _ARITH:
                out.append((node, "arith", 0, f"{type(node.op).__name__} -> "
                                              f"{_ARITH[type(node.op)].__name__}"))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            out.append((node, "const", 0, f"{node.value!r} -> {_const(node.value)!r}"))
        elif isinstance(node, ast.Call):
            name = (node.func.id if isinstance(node.func, ast.Name) else
                    node.func.attr if isinstance(node.func, ast.Attribute) else None)
            if name in _SWAP_NAMES:
                out.append((node, "swap", 0, f"{name} -> {_SWAP_NAMES[name]}"))
        elif isinstance(node, (ast.If, ast.While)):
            out.append((node, "if", 0, "condition negated"))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            out.append((node, "drop", 0, "call statement dropped"))
    return out


def _const(v):
    if type(v) is int:
        return v + 1
    return 1.0 if v == 0 else v * 2


class _Pass(ast.Pass):
    pass


def _apply(node, op: str, variant: int):
    """Mutate ``node`` in place (statements are replaced through their parent)."""
    if op == "cmp":
        node.ops[variant] = _CMP[type(node.ops[variant])]()
    elif op == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif op == "arith":
        node.op = _ARITH[type(node.op)]()
    elif op == "const":
        node.value = _const(node.value)
    elif op == "swap":
        new = _SWAP_NAMES[node.func.id if isinstance(node.func, ast.Name) else node.func.attr]
        if isinstance(node.func, ast.Name):
            node.func.id = new
        else:
            node.func.attr = new
    elif op == "if":
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)


def _replace_child(tree, target, make):
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = make(item)
                        return
            elif value is target:
                setattr(parent, field, make(value))
                return
    raise RuntimeError("mutation site lost")


def mutated_source(source: str, index: int) -> str:
    tree = ast.parse(source)
    node, op, variant, _ = _sites(tree)[index]
    if op in ("not", "plus1", "drop"):
        make = {"not": lambda n: n.operand, "plus1": lambda n: n.left,
                "drop": lambda n: ast.Pass()}[op]
        _replace_child(tree, node, make)
    else:
        _apply(node, op, variant)
    return ast.unparse(ast.fix_missing_locations(tree))


def catalogue(modules: list[str]) -> list[dict]:
    muts = []
    for rel in modules:
        source = (REPO / rel).read_text()
        per_line: dict[int, int] = {}
        for index, (node, op, _variant, label) in enumerate(_sites(ast.parse(source))):
            line = getattr(node, "lineno", 0)
            n = per_line.get(line, 0)
            per_line[line] = n + 1
            muts.append({"id": f"{rel}:{line}:{n}", "module": rel, "index": index,
                         "line": line, "op": op, "label": label,
                         "code": source.splitlines()[line - 1].strip()[:100] if line else ""})
    return muts


def _owner(test_file: str, stems: list[str]) -> str | None:
    """The module a test file is named after: ``test_<mod>.py`` or ``test_<mod>_<aspect>.py``
    (the longest such name, so ``test_plan_checks.py`` belongs to ``plan_checks``, not ``plan``)."""
    name = test_file.removesuffix(".py")
    owners = [s for s in stems if name == f"test_{s}" or name.startswith(f"test_{s}_")]
    return max(owners, key=len) if owners else None


def is_package_wide(test_file: str) -> bool:
    """``test_package.py`` / ``test_package_<aspect>.py``: tests of a package as a whole."""
    return _owner(test_file, ["package"]) == "package"


# The recorded audit documents: every number and sentence the audit writes, for the fixture
# campaigns and cpu_real (a mutant of stats, audit or runlog that changes any is caught here).
GOLDEN_TESTS = ["tests/e2e/test_audit_golden.py"]


def own_tests_for(module: str) -> list[str]:
    """The test files named after ``evalkit/<path>/<mod>.py``: the tests tree mirrors the
    package, so they are ``tests/<path>/test_<mod>.py`` and ``tests/<path>/test_<mod>_*.py``,
    then the package-wide files ``test_package*.py`` of ``tests/<path>`` and of every folder
    above it up to ``tests/<pkg>``.  A package's ``__init__.py`` has only the latter."""
    rel = Path(module).relative_to("evalkit")
    folder = TESTS / rel.parent
    files = []
    if rel.stem != "__init__" and folder.is_dir():
        stems = [p.stem for p in (REPO / module).parent.glob("*.py")]
        files += [p for p in sorted(folder.glob("test_*.py")) if _owner(p.name, stems) == rel.stem]
    for level in [rel.parent, *rel.parent.parents][:-1]:       # up to tests/<pkg>, not tests/
        files += [p for p in sorted((TESTS / level).glob("test_package*.py"))
                  if is_package_wide(p.name)]
    return [str(p.relative_to(REPO)) for p in files]


def tests_for(module: str) -> list[str]:
    """The test files that run against a mutant of ``module``, the most specific first
    (pytest stops at the first failure): its own files (:func:`own_tests_for`), then
    :data:`GOLDEN_TESTS` and :data:`EXTRA_TESTS`, then every other test file of its package
    (``tests/<pkg>/``): a module is also exercised through the modules that call it."""
    out = own_tests_for(module)
    out += [f for f in GOLDEN_TESTS + EXTRA_TESTS.get(module, []) if f not in out]
    package = TESTS / Path(module).relative_to("evalkit").parts[0]
    out += [str(p.relative_to(REPO)) for p in sorted(package.rglob("test_*.py"))
            if str(p.relative_to(REPO)) not in out]
    return out


# --------------------------------------------------------------------------------- running

_PRELOAD = ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "scipy", "scipy.special",
            "scipy.stats", "scipy.optimize", "statsmodels.api", "statsmodels.stats.multitest",
            "sklearn.isotonic", "click", "click.testing", "jinja2", "duckdb", "tqdm", "pytest",
            "hypothesis", "matplotlib", "matplotlib.pyplot")


def _preload():
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional library; the child imports it if used
            pass


def _workspace() -> Path:
    ws = Path(tempfile.mkdtemp(prefix="evalkit-mutate-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "evalkit", ws / "evalkit", ignore=ignore)
    shutil.copytree(REPO / "tests", ws / "tests", ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", ws / "pyproject.toml")
    # README.md: tests/project/test_readme_setup.py runs for audit/provenance.py
    for name in ("fixtures", "examples", "protocols", "README.md"):
        if (REPO / name).exists():
            os.symlink(REPO / name, ws / name)
    return ws


def _run_tests(ws: Path, files: list[str], timeout: float,
               deselect: tuple[str, ...] = ()) -> tuple[str, float, str]:
    """Fork a child that runs pytest on ``files`` in ``ws``: ('passed'|'failed'|'timeout'|
    'error:<rc>', seconds, the first FAILED/ERROR line of pytest's summary)."""
    t0 = time.monotonic()
    log = ws / "pytest.log"
    pid = os.fork()
    if pid == 0:                                             # child
        try:
            os.setpgid(0, 0)
            os.chdir(ws)
            sys.path.insert(0, str(ws))
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            import pytest

            rc = pytest.main([*files, "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                              "--rootdir", str(ws),
                              *(a for test in deselect for a in ("--deselect", test))])
            os._exit(int(rc))
        except BaseException:  # noqa: BLE001 - whatever happens, the child must exit
            os._exit(3)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - t0 > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - t0, ""
        time.sleep(0.05)
    took = time.monotonic() - t0
    text = log.read_text(errors="replace") if log.exists() else ""
    killer = next((ln.strip() for ln in text.splitlines()
                   if ln.startswith(("FAILED ", "ERROR "))), "")[:160]
    if rc == 0:
        return "passed", took, ""
    if rc == 1:
        return "failed", took, killer
    return f"error:{rc}", took, killer


def baseline_key(files: list[str]) -> str:
    """The unmutated run of a set of test files is shared by every module that runs that set:
    the order (own files first) decides only which test fails first, not whether one fails,
    so the modules of one package share one baseline."""
    return " ".join(sorted(files))


def score_report(results: Path, equivalent: Path | None = None) -> str:
    """Killed / non-equivalent mutants of a results file, overall and by package.

    ``equivalent``: lines ``ID<TAB>reason`` (``#`` comments allowed) naming survivors whose
    change no test can observe; a listed id that was killed is an error (it was not
    equivalent after all).  An id names a source line, so a line ``# Commit SHA`` scopes the
    entries below it to the records of that commit: after a line moves, its old id names
    another mutant."""
    recs = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
    listed: dict[tuple[str | None, str], str] = {}
    if equivalent is not None:
        scope = None
        for ln in equivalent.read_text().splitlines():
            header = re.match(r"#\s*Commit\s+([0-9a-f]{7,40})\b", ln.strip())
            if header:
                scope = header.group(1)
            elif ln.strip() and not ln.lstrip().startswith("#"):
                mid, _, why = ln.partition("\t")
                listed[(scope, mid.strip())] = why.strip()

    def applies(scope, commit):
        return scope is None or bool(commit) and (commit.startswith(scope)
                                                  or scope.startswith(commit))
    eq = {r["id"] for r in recs for scope, mid in listed
          if mid == r["id"] and applies(scope, r.get("commit") or "")}
    wrong = [r["id"] for r in recs if r["id"] in eq and r["verdict"] == "killed"]
    if wrong:
        raise SystemExit(f"listed as equivalent but killed: {', '.join(wrong)}")
    rows = []
    for label, keep in [("all", lambda r: True)] + [
            (pkg, lambda r, pkg=pkg: r["module"].startswith(pkg)) for pkg in PACKAGES]:
        sel = [r for r in recs if keep(r)]
        killed = sum(r["verdict"] == "killed" for r in sel)
        equiv = sum(r["verdict"] == "survived" and r["id"] in eq for r in sel)
        live = len(sel) - equiv
        pct = f"{100.0 * killed / live:.1f}%" if live else "n/a"
        rows.append(f"{label:16s} {len(sel):4d} mutants  {killed:4d} killed  {equiv:3d} "
                    f"equivalent  score {killed}/{live} = {pct}")
    open_ = [r for r in recs if r["verdict"] == "survived" and r["id"] not in eq]
    rows += [f"survived, not equivalent: {r['id']} {r['op']} {r['label']}: {r['code']}"
             for r in open_]
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="*", default=None,
                    help="module globs relative to the repo (default: the four packages)")
    ap.add_argument("--sample", type=int, default=0, help="run a random sample of N mutants")
    ap.add_argument("--seed", type=int, default=16, help="seed of the sample")
    ap.add_argument("--only", nargs="*", default=None, help="mutant ids to run, in this order")
    ap.add_argument("--timeout", type=float, default=0.0,
                    help="seconds per mutant (default: 3 x the module's baseline + 30)")
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unmutated run per test group (the killing test is recorded "
                         "either way; a group whose mutants all die on one test is suspect)")
    ap.add_argument("--deselect", action="append", default=[], metavar="TEST",
                    help="a test (pytest node id) that fails without any mutant, at the commit "
                         "measured (work in progress): left out of every run, and recorded")
    ap.add_argument("--out", default=None, help="append one JSON line per mutant here")
    ap.add_argument("--score", default=None, metavar="RESULTS",
                    help="print the score of a results file (--out of a run) and exit")
    ap.add_argument("--equivalent", default=None, metavar="FILE",
                    help="with --score: lines 'ID<TAB>reason' of survivors judged equivalent")
    args = ap.parse_args(argv)
    if args.score:
        print(score_report(Path(args.score), Path(args.equivalent) if args.equivalent else None))
        return 0

    every = sorted(str(p.relative_to(REPO)) for pkg in PACKAGES
                   for p in (REPO / pkg).rglob("*.py"))
    globs = args.modules or ["*"]
    modules = [m for m in every if any(fnmatch.fnmatch(m, g) for g in globs)]
    muts = catalogue(modules)
    if args.list:
        for m in muts:
            print(f"{m['id']}\t{m['op']}\t{m['label']}\t{m['code']}")
        return 0
    if args.only:                                 # in the order given
        by_id = {m["id"]: m for m in muts}
        unknown = [i for i in args.only if i not in by_id]
        if unknown:
            ap.error(f"unknown mutant id(s): {' '.join(unknown[:5])} (see --list)")
        muts = [by_id[i] for i in dict.fromkeys(args.only)]
    elif args.sample:
        # kept in sampled order: a run stopped early is still a random sample
        muts = random.Random(args.seed).sample(muts, min(args.sample, len(muts)))
    if args.out and Path(args.out).exists():      # resume: skip mutants already recorded
        done = {json.loads(ln)["id"] for ln in Path(args.out).read_text().splitlines() if ln}
        muts = [m for m in muts if m["id"] not in done]
    muts = [m for m in muts if tests_for(m["module"])]
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    _preload()
    ws = _workspace()
    out = open(args.out, "a") if args.out else None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    counts = {"killed": 0, "survived": 0}
    survivors = []
    baseline: dict[str, float] = {}
    try:
        for m in muts:
            files = [f for f in tests_for(m["module"]) if (ws / f).exists()]
            key = baseline_key(files)
            if key not in baseline and args.no_baseline:
                baseline[key] = 60.0
            if key not in baseline:
                status, took, failing = _run_tests(ws, files, 900, tuple(args.deselect))
                if status != "passed":
                    print(f"baseline {status} for {key} ({failing or 'no test named'}): its "
                          "mutants are skipped", flush=True)
                    baseline[key] = -1.0
                else:
                    baseline[key] = took
            if baseline[key] < 0:
                continue
            target = ws / m["module"]
            original = target.read_text()
            try:
                target.write_text(mutated_source(original, m["index"]))
                limit = args.timeout or 3 * baseline[key] + 30
                status, took, killer = _run_tests(ws, files, limit, tuple(args.deselect))
            finally:
                target.write_text(original)
            verdict = "survived" if status == "passed" else "killed"
            counts[verdict] += 1
            if verdict == "survived":
                survivors.append(m)
            rec = {**m, "status": status, "verdict": verdict, "seconds": round(took, 1),
                   "tests": files, "killed_by": killer, "commit": commit,
                   **({"deselected": args.deselect} if args.deselect else {})}
            print(f"{verdict:8s} {status:9s} {took:6.1f}s {m['id']} {m['op']} {m['label']}"
                  + (f"  <- {killer}" if killer else ""), flush=True)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
    finally:
        shutil.rmtree(ws, ignore_errors=True)
        if out:
            out.close()
    total = counts["killed"] + counts["survived"]
    print(f"\n{counts['killed']} of {total} mutants killed "
          f"({100.0 * counts['killed'] / max(total, 1):.1f}%), commit {commit}")
    for m in survivors:
        print(f"SURVIVED {m['id']} {m['op']} {m['label']}: {m['code']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
