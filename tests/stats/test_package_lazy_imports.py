"""evalkit.stats loads its submodules on first use: every public name stays importable, and
light commands do not pay for scikit-learn, statsmodels, scipy.stats or matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sklearn", "statsmodels", "scipy.stats", "matplotlib")


def _loaded_after(code: str, *more: str) -> dict | list[dict]:
    """Run ``code`` in a fresh interpreter; which HEAVY modules (and pandas) got imported.
    With ``more``, each further piece of code runs next in the same interpreter, and the
    list holds what was imported after each piece."""
    report = ("\nimport json as _json, sys as _sys\n"
              "print(_json.dumps({m: m in _sys.modules for m in "
              f"{list(HEAVY) + ['pandas']}}}))\n")
    probe = "".join(piece + report for piece in (code, *more))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    found = [json.loads(line) for line in out.stdout.strip().splitlines()
             if line.startswith("{")][-1 - len(more):]
    return found if more else found[0]


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


def _gate_code(campaign) -> str:
    return ("import sys\nfrom evalkit.cli.main import cli\ntry:\n"
            f"    cli.main(args=['gate', {str(campaign)!r}, "
            "'--policy', 'wa'], prog_name='evalkit')\nexcept SystemExit:\n    pass")


def _gate_loads(campaign) -> dict:
    return _loaded_after(_gate_code(campaign))


def test_gate_does_not_import_plotting(fixtures_dir):
    # sim_bursty's wa reaches placement_gain, so the gate must evaluate the calibrated tier to
    # report the tier reached: its isotonic psi (scikit-learn) is needed there, plots never
    loaded = _gate_loads(fixtures_dir / "campaigns" / "sim_bursty")
    assert not loaded["matplotlib"], loaded


def test_gate_stopping_below_calibrated_does_not_import_isotonic(fixtures_dir):
    # every claim of sim_k_mismatch stops before placement_gain: no tier the walk can reach
    # needs psi, so the gate never fits it; the full audit does fit it (what the gate skips)
    camp = fixtures_dir / "campaigns" / "sim_k_mismatch"
    audit = f"from evalkit.audit import audit_campaign\naudit_campaign({str(camp)!r})"
    loaded, full = _loaded_after(_gate_code(camp), audit)
    assert not loaded["matplotlib"] and not loaded["sklearn"], loaded
    assert full["sklearn"] and not full["matplotlib"], full
