"""Same seed, same tables on every CPU: a small simulated campaign's Parquet tables are
byte-identical, and the audit's input fingerprint of them (what the demo's golden record
holds) is the same, when the CPU's SIMD and FMA paths are switched off and when the math
library rounds differently.

numpy picks transcendental loops (exp, log, power, sin, ...) by CPU — its own AVX-512 code
where the CPU has it — and glibc picks an FMA or a plain build of ``exp``/``log``/``pow``/
``sin``; the results differ in the last bit.  Two levers stand in for "another CPU":

* **baseline features**: a subprocess with ``NPY_DISABLE_CPU_FEATURES`` naming every numpy
  dispatch target this CPU has above numpy's baseline, and ``GLIBC_TUNABLES`` switching off
  glibc's AVX2/FMA/AVX-512 builds.  On an AVX2 host (numpy 2.4, glibc 2.36) this moves
  about 1 in 1,500 ``np.exp`` results by one ulp, through glibc; on an AVX-512 host it also
  switches numpy's own AVX-512 loops off.
* **a math library that rounds differently**: a subprocess whose numpy and ``math``
  transcendental functions return results 2**-40 off (relative).  One ulp of a step duration
  is often absorbed when it is added to a clock of tens of seconds, so the first lever alone
  could pass on code that still records ``np.exp``; this one cannot.

Exponents written ``x ** y`` reach ``pow`` without passing through an attribute the second
lever can wrap, so the modules that compute recorded values are also read for ``**``.
"""

from __future__ import annotations

import ast
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.replay.sweep import run_campaign
from tests.support.protocols import BUNDLED

REPO = Path(__file__).resolve().parents[2]

# every policy family (forecasting, gate, random, planned oracle, matched-random draws from
# the F_K sampler) on a short square wave with lognormal lengths; 0.1 s inner steps so that
# step times are many and small
CAMPAIGN = """
regime = "xcpu"
seeds = 1
matched_random_draws = 1
horizon_s = 60.0
merge_duration_s = 2.0
inner_step_s = 0.1
h_min = 50
h_max = 150
[slo]
e2e_s = 8.0
[trace]
generator = "square_wave"
period_s = 20.0
burst_s = 6.0
quiet_rate = 2.0
busy_rate = 12.0
prompt_tokens = "lognormal:256,0.8"
output_tokens = "lognormal:64,0.7"
[[policies]]
name = "ewma"
[[policies]]
name = "calibrated_online"
[[policies]]
name = "random_deferral"
[[policies]]
name = "calibrated_offline"
params = { k_from = "ewma" }
"""

# the simulator's recorded path: values computed here reach the run-log tables
RECORDING_MODULES = ("evalkit/replay/backends/sim/engine.py",
                     "evalkit/replay/backends/sim/model.py",
                     "evalkit/replay/traces/generate.py",
                     "evalkit/replay/portable_math.py",
                     *(str(p.relative_to(REPO))
                       for p in sorted((REPO / "evalkit/policies").glob("*.py"))))

# and the modules around it that place, read or write what is recorded (the F_K sampler's
# Fraction powers are exact, so only names are checked there)
FEEDING_MODULES = ("evalkit/replay/runner.py", "evalkit/replay/job.py",
                   "evalkit/replay/spec.py", "evalkit/replay/traces/model.py",
                   "evalkit/replay/traces/ops.py", "evalkit/replay/traces/readers.py",
                   "evalkit/stats/fk.py", "evalkit/stats/overlap.py")

SWEEP = ("import sys\nfrom pathlib import Path\nfrom evalkit.replay.sweep import run_campaign\n"
         "from tests.replay.test_cross_cpu_determinism import audit_fingerprint\n"
         "from tests.support.protocols import BUNDLED\n"
         "out = Path(sys.argv[1])\n"
         "assert run_campaign(out / 'c.toml', out / 'runs', progress=False,\n"
         "                    protocol=BUNDLED).ok\n"
         "print(audit_fingerprint(out / 'runs'))\n")

# numpy and math functions whose last bit depends on the CPU or the C library
TRANSCENDENTAL = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "power",
                  "float_power", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2",
                  "sinh", "cosh", "tanh", "cbrt", "pow", "atan", "atan2", "asin", "acos")
SKEWED_MATH = (
    "import math, numpy as np\n"
    f"NAMES = {TRANSCENDENTAL!r}\n"
    "def skew(f):\n"
    "    def skewed(*args, **kw):\n"
    "        return f(*args, **kw) * (1.0 + 2.0 ** -40)\n"
    "    return skewed\n"
    "for mod in (np, math):\n"
    "    for name in NAMES:\n"
    "        if hasattr(mod, name):\n"
    "            setattr(mod, name, skew(getattr(mod, name)))\n")

NUMPY_EXP = ("import hashlib, numpy as np\n"
             "x = np.random.default_rng(0).normal(0.0, 3.0, 1_000_000)\n"
             "print(hashlib.sha256(np.exp(x).tobytes() + np.power(1.0 + abs(x), -0.5)"
             ".tobytes()).hexdigest())\n")


def cpu_features() -> tuple[list[str], dict]:
    try:
        from numpy._core import _multiarray_umath as um
    except ImportError:                                   # numpy 1.x
        from numpy.core import _multiarray_umath as um
    return list(um.__cpu_dispatch__), dict(um.__cpu_features__)


def features_above_baseline() -> list[str]:
    """numpy's dispatch targets this CPU has (numpy refuses to disable baseline ones)."""
    dispatch, have = cpu_features()
    return [f for f in dispatch if have.get(f)]


def baseline_env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env["NPY_DISABLE_CPU_FEATURES"] = " ".join(features_above_baseline())
    # glibc >= 2.33 names, then the older *_Usable ones; unknown names are ignored
    env["GLIBC_TUNABLES"] = "glibc.cpu.hwcaps=" + ",".join(
        f"-{f}" for f in ("AVX2", "FMA", "FMA4", "AVX512F", "AVX2_Usable", "FMA_Usable",
                          "FMA4_Usable", "AVX512F_Usable"))
    return env


def python(code: str, *args, env=None) -> str:
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                         text=True, timeout=300, env=env or dict(os.environ,
                                                                 PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def parquet_bytes(runs: Path) -> dict[str, bytes]:
    return {str(p.relative_to(runs)): p.read_bytes() for p in sorted(runs.rglob("*.parquet"))}


def audit_fingerprint(runs: Path) -> str:
    """The audit's input fingerprint (a hash of its per-run table), as the demo records it."""
    from evalkit.audit.runset import load_runset
    from evalkit.audit.provenance import input_fingerprint
    return input_fingerprint(load_runset(runs))


def differing(a: dict, b: dict) -> list[str]:
    assert sorted(a) == sorted(b)
    return [name for name in a if a[name] != b[name]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict[str, bytes], str]:
    """The campaign's tables and audit fingerprint, swept in this process with every CPU
    feature on."""
    out = tmp_path_factory.mktemp("xcpu-reference")
    (out / "c.toml").write_text(CAMPAIGN)
    assert run_campaign(out / "c.toml", out / "runs", progress=False, protocol=BUNDLED).ok
    tables = parquet_bytes(out / "runs")
    assert len(tables) >= 5 * 8
    return tables, audit_fingerprint(out / "runs")


def sweep_elsewhere(tmp_path: Path, *, prelude: str = "", env=None) -> tuple[dict, str]:
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    fingerprint = python(prelude + SWEEP, tmp_path, env=env).strip().splitlines()[-1]
    return parquet_bytes(tmp_path / "runs"), fingerprint


needs_linux_x86 = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64")
    or platform.libc_ver()[0] != "glibc",
    reason="the baseline-features lever is numpy's x86 dispatch and glibc's tunables")


@needs_linux_x86
def test_switching_cpu_features_off_moves_numpys_exp_so_the_lever_is_real():
    """Not vacuous: with the features off, np.exp and np.power on a million values give
    other bits than with them on."""
    assert python(NUMPY_EXP, env=baseline_env()) != python(NUMPY_EXP)


@needs_linux_x86
def test_tables_are_byte_identical_with_simd_and_fma_switched_off(reference, tmp_path):
    tables, fingerprint = sweep_elsewhere(tmp_path, env=baseline_env())
    assert differing(reference[0], tables) == []
    assert fingerprint == reference[1]


def test_tables_are_byte_identical_when_the_math_library_rounds_differently(reference,
                                                                             tmp_path):
    tables, fingerprint = sweep_elsewhere(tmp_path, prelude=SKEWED_MATH)
    assert differing(reference[0], tables) == []
    assert fingerprint == reference[1]


def test_the_skewed_math_library_moves_what_it_wraps():
    skewed = json.loads(python(SKEWED_MATH + "import json\nprint(json.dumps([float(np.exp(0.5)), "
                               "math.log(3.0), float(np.power(2.0, 0.5))]))\n"))
    assert skewed[0] != math.exp(0.5) and skewed[1] != math.log(3.0)
    assert skewed[2] != math.sqrt(2.0)


def power_operators(path: Path, root: Path = REPO) -> list[str]:
    """Where ``path`` writes ``x ** y`` (file:line relative to ``root``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)]


def transcendental_calls(path: Path, root: Path = REPO) -> list[str]:
    """Where ``path`` names a numpy or ``math`` transcendental function (file:line)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in TRANSCENDENTAL
            and isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy", "math")]


def test_no_power_operator_in_the_modules_that_compute_recorded_values():
    found = [hit for mod in RECORDING_MODULES for hit in power_operators(REPO / mod)]
    assert found == [], found


def test_no_transcendental_function_in_the_modules_that_compute_recorded_values():
    """Rounded lengths absorb a skewed np.exp almost always, so the dynamic lever can miss it."""
    found = [hit for mod in RECORDING_MODULES + FEEDING_MODULES
             for hit in transcendental_calls(REPO / mod)]
    assert found == [], found


def test_the_transcendental_check_finds_np_exp_and_math_log(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import math\nimport numpy as np\nx = np.rint(np.exp(np.arange(3)))\n"
                   "y = math.log(2.0) + np.sqrt(2.0)\n")
    assert transcendental_calls(src, tmp_path) == ["m.py:3", "m.py:4"]


def test_the_power_operator_check_finds_one(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import numpy as np\nloss = 2.2 + (1.0 + np.arange(4) / 300.0) ** -0.5\n")
    assert power_operators(src, tmp_path) == ["m.py:2"]
