"""evalkit.stats loads its submodules on first use: every public name stays importable, and
light commands do not pay for scikit-learn, statsmodels, scipy.stats or matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sklearn", "statsmodels", "scipy.stats", "matplotlib")


def _loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; which HEAVY modules (and pandas) got imported."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps({{m: m in sys.modules for m in {list(HEAVY) + ['pandas']}}}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_public_name_resolves_to_its_submodule():
    import importlib

    import evalkit.stats as stats

    assert len(stats.__all__) == len(set(stats.__all__)) == sum(
        len(names) for names in stats._SOURCES.values())
    for name in stats.__all__:
        obj = getattr(stats, name)
        module = importlib.import_module(obj.__module__)
        assert getattr(module, name) is obj
        assert obj.__module__.startswith("evalkit.stats.")
    assert set(stats.__all__) <= set(dir(stats))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        stats.not_a_name  # noqa: B018


def test_star_import_gives_every_name():
    ns: dict = {}
    exec("from evalkit.stats import *", ns)
    import evalkit.stats as stats

    assert {n for n in ns if not n.startswith("__")} == set(stats.__all__)


def test_light_stats_do_not_import_heavy_libraries():
    loaded = _loaded_after("from evalkit.stats import sign_flip_test, overlap_cost, load_match, "
                           "seeds_needed, sample_schedules, PsiFit, ExposureRegression")
    assert not any(loaded[m] for m in HEAVY), loaded


def test_heavy_libraries_load_when_used():
    loaded = _loaded_after("import numpy as np\nfrom evalkit.stats import fit_psi, holm\n"
                           "fit_psi(np.arange(6.0), np.arange(6.0) / 10, np.arange(6) % 3)\n"
                           "holm([0.01, 0.02])")
    assert loaded["sklearn"] and loaded["statsmodels"]


def test_cli_help_imports_nothing_heavy():
    loaded = _loaded_after("import evalkit.cli.main")
    assert not any(loaded.values()), loaded


def test_gate_does_not_import_plotting_or_isotonic(fixtures_dir):
    code = ("import sys\nfrom evalkit.cli.main import cli\ntry:\n"
            f"    cli.main(args=['gate', {str(fixtures_dir / 'campaigns' / 'sim_bursty')!r}, "
            "'--policy', 'wa'], prog_name='evalkit')\nexcept SystemExit:\n    pass")
    loaded = _loaded_after(code)
    assert not loaded["matplotlib"] and not loaded["sklearn"], loaded
