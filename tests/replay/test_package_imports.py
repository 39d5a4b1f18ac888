"""No import cycle through evalkit/replay, counting imports inside functions too.

A cycle hidden behind a function-local import still ties the two modules together; this
reads every ``import`` statement of the package (module level or not) from the source.
"""

from __future__ import annotations

from tests.support.imports import PACKAGE, cycles, imports_of, module_names  # noqa: E402


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
