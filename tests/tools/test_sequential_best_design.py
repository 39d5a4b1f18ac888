"""tools/sequential_best_design.py: its ratios are the cost study's plan over the fixed n of
equal power, and its reading is derived from its table."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
best = load_script(ROOT / "tools" / "sequential_best_design.py", "sequential_best_design")


def test_summary_is_the_mean_and_its_standard_error():
    assert best.summary([0.8, 0.9]) == f"0.850 +- {np.std([0.8, 0.9], ddof=1) / math.sqrt(2):.3f}"
    assert best.summary([0.8]) == "0.800" and best.summary([]) == "-"


def test_every_design_can_be_planned():
    # each design's looks are the ones a campaign's [design] gives the gate
    from evalkit.audit.sequential import plan_futility, planned_looks

    for _, spending, gamma, batch, first, futility in best.DESIGNS:
        spec = {"max_seeds": 30, "batch": batch, "first_look": first, "futility": futility}
        assert planned_looks(spec, list(range(30))) == best.cost.sequential_looks(30, batch, first)
        assert plan_futility(spec) == futility


@pytest.mark.slow
def test_report_cells_and_reading_agree(tmp_path):
    out = tmp_path / "best.md"
    assert best.main(["--sets", "2", "--campaigns", "150", "--level-campaigns", "60", "--seed",
                      "3", "--out", str(out)]) == 0
    text = out.read_text()
    rows = [r for r in text.splitlines() if r.startswith("| ") and " +- " in r
            and not r.startswith("| design")]
    assert len(rows) == len(best.DESIGNS) * len(best.cost.POLICIES)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        per_set = [float(x) for x in re.findall(r"([\d.]+) \(\d+, [\d.]+\)", cells[2])]
        mean, se = (float(x) for x in cells[3].split(" +- "))
        assert mean == pytest.approx(np.mean(per_set), abs=6e-4)
        assert se == pytest.approx(np.std(per_set, ddof=1) / math.sqrt(len(per_set)), abs=6e-4)
        line = next(x for x in text.splitlines()
                    if x.startswith(f"- {cells[0]}, {cells[1]}: "))
        assert f"{cells[3]}, " in line
    level = [float(r.rsplit("|", 2)[1]) for r in text.split("## Level")[1].splitlines()
             if r.startswith("| ") and not r.startswith("| max seeds")]
    assert len(level) == 2 * (9 + 3)              # two maxima: 9 null cells, 3 small gains
    assert f"is {max(level):.4f} (issue 32: <= 0.03)" in text
