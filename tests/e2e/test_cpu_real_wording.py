"""The CPU-real write-up follows from the audit's checks: a claim whose design checks fail is
"not a valid comparison", never a (powered) null result -- in RESULTS.md and in README."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.document import words as wording
from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
CPU_REAL = REPO / "examples" / "cpu_real"


@pytest.fixture(scope="module")
def mr():
    return load_script(REPO / "examples" / "make_results.py", "make_results")


def _claim(checks, p=0.27, min_p=3e-5, g=-0.0778):
    return {"regime": "r", "policy": "ewma", "mean_diff": g, "ci": [-0.18, 0.03], "wins": 5,
            "n_seeds": 10, "p_adjusted": p, "min_p": min_p, "tier": None,
            "checks": [{"name": n, "passed": ok} for n, ok in checks]}


def test_the_generator_knows_the_audits_design_checks(mr):
    assert mr.DESIGN_CHECKS == wording.DESIGN_CHECKS


@pytest.mark.parametrize("checks, p, min_p, g, has, lacks", [
    ([("k_match", False), ("load_match", False)], 0.27, 3e-5, -0.0778,
     ["**not a valid comparison**", "design checks `k_match`, `load_match` fail",
      "not a null result"], ["powered"]),
    ([("load_match", False), ("gain_significant", False)], 0.001, 3e-5, 0.05,
     ["**not a valid comparison**", "design check `load_match` fails"],
     ["significantly", "powered"]),
    ([("k_match", True), ("no_sync_present", False)], 0.27, 3e-5, -0.0778,
     ["a powered null result", "could have reached p = 0.00003"], ["not a valid"]),
    ([("k_match", True)], 0.01, 3e-5, -0.03, ["not better than matched random"],
     ["powered", "not a valid"]),
    ([("k_match", True)], 0.01, 3e-5, 0.03, ["significantly better than matched random"],
     ["WORSE"]),
    ([("k_match", True)], 0.4, 0.0625, 0.03, ["underpowered", "cannot reach alpha = 0.05"],
     ["powered null"]),
    ([("k_match", None)], 0.4, 3e-5, 0.03, ["a powered null result"], ["not a valid"]),
])
def test_verdict_line_follows_checks_and_numbers(mr, checks, p, min_p, g, has, lacks):
    line = mr.verdict_line(_claim(checks, p, min_p, g), 0.05)
    for phrase in has:
        assert phrase in line, (phrase, line)
    for phrase in lacks:
        assert phrase not in line, (phrase, line)
    assert " pp [" in line          # G in percentage points, labelled


def test_committed_results_and_readme_follow_the_committed_audit(mr):
    """RESULTS.md calls a claim "not a valid comparison" exactly when a design check of its
    audit failed, and README's summary quotes each claim's G and CI as RESULTS.md prints them,
    with the same validity word."""
    audit = json.loads((CPU_REAL / "audit_real.json").read_text())
    results = (CPU_REAL / "RESULTS.md").read_text()
    readme = (REPO / "README.md").read_text().replace("\n", " ")
    invalid = []
    for c in audit["claims"]:
        failed = [k["name"] for k in c["checks"] if k.get("passed") is False
                  and k["name"] in wording.DESIGN_CHECKS]
        line = next(x for x in results.splitlines()
                    if x.startswith(f"- **{c['regime']}/{c['policy']}**"))
        assert ("not a valid comparison" in line) is bool(failed), line
        invalid += [c["policy"]] * bool(failed)
        g = f"{mr.pp(c.get('mean_diff'))} {mr.pp_ci(c.get('ci'))}"
        assert g in line and g in readme, (g, c["policy"])
    # the CPU-real paragraph (the paced campaign's, after it, may report a powered null)
    section = readme[readme.index("**The CPU-real evidence**"):
                     readme.index("**The paced CPU campaign**")]
    assert "powered null" not in section
    if invalid:
        assert "not a valid comparison" in readme
        for c in audit["claims"]:
            if c["policy"] in invalid:
                assert "powered null" not in next(
                    x for x in results.splitlines()
                    if x.startswith(f"- **{c['regime']}/{c['policy']}**"))
