"""examples/sim_results.py writes SIM_RESULTS.md with violation rates in percent and their
differences in pp (the audit.json it reads keeps shares)."""

from __future__ import annotations

import json

from tests.conftest import REPO
from tests.support.scripts import load_script

GOLDEN = REPO / "tests" / "golden" / "sim_bursty.audit.json"


def _generator():
    return load_script(REPO / "examples" / "sim_results.py", "sim_results")


def test_the_page_gives_rates_in_percent_and_differences_in_pp():
    gen = _generator()
    doc = json.loads(GOLDEN.read_text())
    lines = gen.section("Bursty", "bursty.toml", doc)
    psi = next(iter(doc["regimes"].values()))["psi"]
    assert (f"ε_cal = {100 * psi['eps_cal']:.2f} pp in-sample, "
            f"{100 * psi['eps_cal_loso']:.2f} pp leave-one-seed-out") in lines[2]
    assert lines[4].startswith("| policy | K | V % | Vex pp | MR % | G pp [95% CI] |")
    wa = next(c for c in doc["claims"] if c["policy"] == "wa")
    rows = wa["per_seed"]
    v = sum(r["v_policy"] for r in rows) / len(rows)
    vex = sum(r["vex_policy"] for r in rows) / len(rows)
    mr = sum(r["v_mr_mean"] for r in rows) / len(rows)
    g, (lo, hi) = wa["mean_diff"], wa["ci"]
    row = next(x for x in lines if x.startswith("| wa |"))
    assert (f"| {v * 100:.2f} | {vex * 100:+.2f} | {mr * 100:.2f} | {g * 100:+.2f} "
            f"[{lo * 100:+.2f}, {hi * 100:+.2f}] |") in row, row
    assert f"{g:+.4f}" not in row and f"{v:.4f}" not in row
    # the stop reason is cut with a mark, so a cut number does not read as a number
    stop = row.rsplit(" | ", 1)[1].removesuffix(" |")
    assert len(stop) == 90 and stop.endswith("…") and wa["stop_reason"].find(stop[:-1]) > 0
    assert "percentage points (pp); audit.json keeps them as shares" in gen.HEADER[2]
