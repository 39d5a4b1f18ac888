"""The mutation tool itself (tools/mutate.py): its catalogue, its mutations and one real run.

A mutation score is only as good as the tool behind it: every module of the three packages
must be mapped to tests, each operator must change exactly what it says, and a mutant that a
test catches must be recorded as killed (one that no test sees as survived).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutate():
    return load_script(REPO / "tools/mutate.py", "evalkit_mutate_tool")


def _modules(mutate):
    return sorted(str(p.relative_to(REPO)) for pkg in mutate.PACKAGES
                  for p in (REPO / pkg).rglob("*.py"))


def test_every_module_of_the_three_packages_is_mapped_to_existing_test_files(mutate):
    """The rule of tools/mutate.py: tests/<pkg>/test_<mod>*.py plus the test_package*.py files."""
    for module in _modules(mutate):
        if not mutate.catalogue([module]):
            continue                                     # nothing to mutate (re-exports)
        files = mutate.tests_for(module)
        assert files, f"{module} has no test file in the mirrored tests/: its mutants never run"
        missing = [f for f in files if not (REPO / f).exists()]
        assert not missing, f"{module}: tests_for names test files that do not exist: {missing}"
    # and the other way round: every test file of the three packages is named after a module
    # (or is package-wide), so the layout says what it tests
    reached = {f for module in _modules(mutate) for f in mutate.own_tests_for(module)}
    for pkg in mutate.PACKAGES:
        tests = REPO / "tests" / Path(pkg).relative_to("evalkit")
        for path in sorted(tests.rglob("test_*.py")):
            rel = str(path.relative_to(REPO))
            assert rel in reached, (f"{rel} is named after no module of {pkg} (nor test_package*):"
                                    " the mutation tool would never run it")
    assert mutate.tests_for("evalkit/audit/protocol.py")[0] == "tests/audit/test_protocol.py"
    assert mutate._owner("test_plan_checks_gate.py", ["plan", "plan_checks"]) == "plan_checks"
    assert "tests/document/test_tiers_walk.py" in mutate.own_tests_for(
        "evalkit/document/tiers.py")
    # the run set (audit/runset.py, once audit/campaign.py) owns its name checks
    assert "tests/audit/test_runset_names.py" in mutate.own_tests_for("evalkit/audit/runset.py")
    nested = mutate.tests_for("evalkit/audit/checks/design.py")
    assert nested[0] == "tests/audit/checks/test_design.py"               # its own tests
    assert "tests/audit/checks/test_package_registry.py" in nested      # its own package
    assert "tests/audit/test_package_soundness.py" in nested             # the package above
    init = mutate.tests_for("evalkit/stats/__init__.py")
    wide = [f for f in init if f.startswith("tests/stats/test_package")]
    assert wide and init[:len(wide)] == wide                   # no module files of its own
    # then the recorded documents, then the rest of the package's tests, each once
    assert init[len(wide)] == "tests/e2e/test_audit_golden.py"
    assert "tests/stats/test_fk.py" in init and len(init) == len(set(init))
    assert not any(f.startswith("tests/audit/") for f in init)
    assert nested.index("tests/e2e/test_audit_golden.py") < nested.index(
        "tests/audit/test_result_audit_campaign.py")


def test_catalogue_is_deterministic_with_unique_ids(mutate):
    modules = _modules(mutate)
    first, second = mutate.catalogue(modules), mutate.catalogue(modules)
    assert first == second and len(first) > 1000
    ids = [m["id"] for m in first]
    assert len(ids) == len(set(ids))
    assert {m["op"] for m in first} == set(mutate.OPERATORS)


@pytest.mark.parametrize("source, label, expected", [
    ("y = a < b", "Lt -> LtE", "y = a <= b"),
    ("y = a >= b", "GtE -> Gt", "y = a > b"),
    ("y = a in b", "In -> NotIn", "y = a not in b"),
    ("y = a and b", "And -> Or", "y = a or b"),
    ("y = not a", "not dropped", "y = a"),
    ("y = a + 1", "Add 1 removed", "y = a"),
    ("y = a * b", "Mult -> Div", "y = a / b"),
    ("y = a // b", "FloorDiv -> Div", "y = a / b"),
    ("y = 3", "3 -> 4", "y = 4"),
    ("y = 0.0", "0.0 -> 1.0", "y = 1.0"),
    ("y = 0.25", "0.25 -> 0.5", "y = 0.5"),
    ("y = np.minimum(a, b)", "minimum -> maximum", "y = np.maximum(a, b)"),
    ("y = any(a)", "any -> all", "y = all(a)"),
    ("if a:\n    f()", "condition negated", "if not a:\n    f()"),
    ("f(x)", "call statement dropped", "pass"),
])
def test_each_operator_changes_exactly_its_site(mutate, source, label, expected):
    sites = mutate._sites(ast.parse(source))
    index = next(i for i, s in enumerate(sites) if s[3] == label)
    assert mutate.mutated_source(source, index) == expected


def test_message_text_is_not_mutated(mutate):
    source = ('def f(x):\n    assert x > 0, "x must be > 0"\n'
              '    if x:\n        raise ValueError(f"bad {x + 1}")\n    return x[1:2]\n')
    labels = [s[3] for s in mutate._sites(ast.parse(source))]
    # only the if survives as a site: the assert, the raise's f-string and the slice do not
    assert labels == ["condition negated"]


def test_every_mutant_of_a_module_parses_and_differs(mutate):
    rel = "evalkit/stats/exposure.py"
    source = (REPO / rel).read_text()
    muts = mutate.catalogue([rel])
    base = ast.unparse(ast.parse(source))
    for m in muts:
        new = mutate.mutated_source(source, m["index"])
        ast.parse(new)
        assert new != base, m["id"]


@pytest.mark.slow
def test_a_run_records_a_killed_and_a_surviving_mutant(mutate, tmp_path):
    # the bootstrap's chunk size 1 << 21 -> 1 << 22 bounds memory only (equivalent: survives);
    # min_attainable_p capped with max instead of min returns 1.0 for every n (killed by its
    # known values).  (The tie tolerance DEFAULT_RTOL is no longer equivalent: the recorded
    # sign-flip results, package-wide tests of evalkit/stats, see 1e-9 -> 2e-9.)
    muts = mutate.catalogue(["evalkit/stats/bootstrap.py", "evalkit/stats/randomisation.py"])
    chunk = next(m["id"] for m in muts
                 if m["code"].startswith("_CHUNK_ELEMENTS = 1 << 21") and m["label"] == "21 -> 22")
    cap = next(m["id"] for m in muts
               if m["code"] == "return min(1.0, p)" and m["op"] == "swap")
    out = tmp_path / "m.jsonl"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools/mutate.py"), "--only", chunk, cap,
         "--no-baseline", "--timeout", "300", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rec[chunk]["verdict"] == "survived" and rec[chunk]["status"] == "passed"
    assert rec[cap]["verdict"] == "killed" and rec[cap]["killed_by"].startswith("FAILED ")
    assert "1 of 2 mutants killed" in proc.stdout


def test_score_counts_equivalent_survivors_out_and_rejects_killed_ones(mutate, tmp_path):
    def rec(mid, verdict):
        return json.dumps({"id": mid, "module": mid.split(":")[0], "verdict": verdict,
                           "op": "cmp", "label": "Lt -> LtE", "code": "a < b"})
    results = tmp_path / "r.jsonl"
    results.write_text("\n".join([
        rec("evalkit/stats/a.py:1:0", "killed"), rec("evalkit/stats/a.py:2:0", "survived"),
        rec("evalkit/audit/b.py:1:0", "killed"), rec("evalkit/runlog/c.py:1:0", "survived"),
        rec("evalkit/runlog/c.py:2:0", "killed")]) + "\n")
    eq = tmp_path / "eq.tsv"
    eq.write_text("# comment\nevalkit/stats/a.py:2:0\tspeed only\n")
    text = mutate.score_report(results, eq)
    assert "all                 5 mutants     3 killed    1 equivalent  score 3/4 = 75.0%" in text
    assert "score 1/1 = 100.0%" in text.splitlines()[1]                  # stats
    assert "score 1/2 = 50.0%" in text.splitlines()[3]                   # runlog
    assert text.splitlines()[4].startswith("evalkit/document    0 mutants")
    assert text.splitlines()[5].startswith("survived, not equivalent: evalkit/runlog/c.py:1:0")
    assert "score 3/5 = 60.0%" in mutate.score_report(results)          # nothing excused
    eq.write_text("evalkit/audit/b.py:1:0\tclaimed equivalent\n")
    with pytest.raises(SystemExit, match="listed as equivalent but killed"):
        mutate.score_report(results, eq)



def test_an_equivalence_listed_under_a_commit_holds_for_that_commits_results_only(mutate,
                                                                                  tmp_path):
    # after the code moves, the same id names another mutant: an old call must not excuse it
    def rec(commit):
        return json.dumps({"id": "evalkit/stats/a.py:2:0", "module": "evalkit/stats/a.py",
                           "verdict": "survived", "op": "cmp", "label": "Lt -> LtE",
                           "code": "a < b", "commit": commit})
    eq = tmp_path / "eq.tsv"
    eq.write_text("# Commit abc1234\nevalkit/stats/a.py:2:0\tspeed only\n")
    results = tmp_path / "r.jsonl"
    results.write_text(rec("abc1234") + "\n")
    assert "score 0/0 = n/a" in mutate.score_report(results, eq)
    results.write_text(rec("def5678") + "\n")
    text = mutate.score_report(results, eq)
    assert "score 0/1 = 0.0%" in text and "survived, not equivalent" in text


def test_only_refuses_an_unknown_mutant_id(mutate, capsys):
    with pytest.raises(SystemExit) as exc:
        mutate.main(["--only", "evalkit/stats/exposure.py:1:0", "evalkit/stats/nope.py:9:9"])
    assert exc.value.code == 2
    assert "unknown mutant id(s): evalkit/stats/exposure.py:1:0 evalkit/stats/nope.py:9:9" \
        in capsys.readouterr().err


def test_the_modules_of_one_package_share_one_baseline_run(mutate):
    keys = {mutate.baseline_key(mutate.tests_for(m))
            for m in ("evalkit/stats/fk.py", "evalkit/stats/power.py", "evalkit/stats/__init__.py")}
    assert len(keys) == 1
    assert mutate.baseline_key(mutate.tests_for("evalkit/runlog/io.py")) not in keys


def test_a_deselected_test_is_left_out_of_the_run(mutate, tmp_path):
    # a test that fails without any mutant (work in progress at the commit measured) would
    # kill every mutant that reaches it; --deselect leaves it out of the baseline and the runs
    (tmp_path / "test_wip.py").write_text("def test_ok():\n    pass\n\n\n"
                                          "def test_wip():\n    assert False\n")
    assert mutate._run_tests(tmp_path, ["test_wip.py"], 120)[0] == "failed"
    assert mutate._run_tests(tmp_path, ["test_wip.py"], 120, ("test_wip.py::test_wip",))[0] \
        == "passed"
