"""tools/bench/bench_sequential.py: times the sequential gate's design and walk, prints ratios
derived from the times it prints, and refuses options that make no plan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalkit.stats.group_sequential import decide
from tests.support.scripts import load_script

BENCH = load_script(Path(__file__).resolve().parents[2] / "tools" / "bench" / "bench_sequential.py",
                    "bench_sequential")
FAST = ["--repeat", "1", "--min-time", "0"]


def _table_rows(printed: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in printed.splitlines() if line.startswith("| ") and line[2].isdigit()]


def _close(printed: str, derived: float) -> bool:
    # printed with 3 significant digits from times printed with 4: 1% covers both roundings
    return math.isclose(float(printed), derived, rel_tol=0.01)


def test_prints_one_row_per_plan_with_ratios_derived_from_its_times(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert BENCH.main(["--sizes", "10,20", "--looks", "3,5", *FAST, "--out", str(out)]) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert [(int(r[0]), r[1]) for r in rows] == [
        (10, "4, 8, 10"), (10, "2, 4, 6, 8, 10"), (20, "7, 14, 20"), (20, "4, 8, 12, 16, 20")]
    recorded = json.loads(out.read_text())["rows"]
    for row, rec in zip(rows, recorded):
        design_ms, fixed_ms, walk_ms, ttest_ms, verdict_ms = (
            float(row[i]) for i in (2, 3, 6, 7, 9))
        assert min(design_ms, fixed_ms, walk_ms, ttest_ms, verdict_ms) > 0
        assert _close(row[4], design_ms / fixed_ms)
        assert _close(row[8], walk_ms / ttest_ms)
        assert _close(row[10], verdict_ms / fixed_ms)
        # the JSON holds the unrounded numbers the table prints
        assert rec["design_per_fixed_test"] == rec["design_s"] / rec["fixed_test_s"]
        assert rec["walk_per_look_s"] == rec["walk_s"] / rec["looks_walked"]
        assert _close(row[2], rec["design_s"] * 1e3) and _close(row[6],
                                                                 rec["walk_per_look_s"] * 1e3)
        walked, seeds = row[5].replace("(", "").replace(")", "").split()
        assert rec["seeds_used"] == int(seeds) == rec["looks"][int(walked) - 1]


def test_refuses_to_time_a_walk_that_is_not_the_gates(monkeypatch):
    # a walk with another null shift decides otherwise than the gate's verdict on the data
    monkeypatch.setattr(BENCH, "decide", lambda d, gs, null_shift, variance_floor=None:
                        decide(d, gs, null_shift - 1, variance_floor=variance_floor))
    with pytest.raises(AssertionError, match="is not the gate's verdict"):
        BENCH.main(["--sizes", "10", "--looks", "3", *FAST])


@pytest.mark.parametrize("args, says", [
    (["--looks", "0"], "--looks: '0': every value must be >= 1"),
    (["--sizes", "1"], "--sizes: '1': every value must be >= 2"),
    (["--sizes", "10,x"], "--sizes: '10,x' is not a comma-separated list of whole numbers"),
    (["--sizes", "10", "--looks", "10"], "--looks 10: the first look would come after 1 seed"),
    (["--repeat", "0"], "--repeat must be >= 1"),
    (["--min-time", "-1"], "--min-time must be a number of seconds >= 0"),
])
def test_options_that_make_no_plan_exit_2_naming_the_option(args, says, capsys):
    with pytest.raises(SystemExit) as exit_info:
        BENCH.main(args)
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_refuses_to_time_a_walk_without_the_draws_floor(monkeypatch):
    # the gate floors the variance of d at each look; a walk that drops the floor decides
    # otherwise on some campaign of the benchmark's sizes
    monkeypatch.setattr(BENCH, "decide", lambda d, gs, null_shift, variance_floor=None:
                        decide(d, gs, null_shift))
    with pytest.raises(AssertionError, match="is not the gate's verdict"):
        BENCH.main(["--sizes", "10,20,40", "--looks", "2,3,4", *FAST])
