"""No import cycle through evalkit/replay, counting imports inside functions too.

A cycle hidden behind a function-local import still ties the two modules together; this
reads every ``import`` statement of the package (module level or not) from the source.
"""

from __future__ import annotations

import pytest

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
