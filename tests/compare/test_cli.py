"""``evalkit compare`` end to end on harness result files and run directories: verdicts,
pairing, the plan, and every exit code (0, 1, 2, 4)."""

from __future__ import annotations

import json

import pytest

from evalkit.cli.main import cli
from evalkit.interop.vllm_bench import import_vllm_bench
from tests.compare.helpers import make_sides, vllm_result, write_side


def run(*args) -> int:
    return cli.main(args=["compare", *map(str, args)], standalone_mode=False)


def doc_of(capsys, *args) -> tuple[int, dict]:
    code = run(*args, "--json")
    return code, json.loads(capsys.readouterr().out)


def test_a_faster_b_is_better_and_compare_json_carries_the_exit_code(tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=8, b_scale=0.035)
    code = run(a, b, "--metric", "ttft_p50", "--metric", "e2e_p50", "--out", tmp_path / "out")
    out = capsys.readouterr().out
    assert code == 0
    assert "paired by seed" in out and "ttft_p50  better" in out
    doc = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert doc["gate"]["exit_code"] == code
    row = doc["metrics"][0]
    assert row["verdict"] == "better" and row["difference"] < 0
    assert row["difference_ci"][1] < 0
    html = (tmp_path / "out" / "compare.html").read_text()
    assert html.index("better") < html.index("How it was decided")      # the first screen
    assert "| ttft\\_p50 | **better** |" in (tmp_path / "out" / "compare.md").read_text()


def test_identical_configurations_are_never_better(tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=8, b_scale=0.05, base_seed=4)
    code, doc = doc_of(capsys, a, b, "--metric", "ttft_p50", "--margin", "10%")
    assert code == 0
    assert doc["metrics"][0]["verdict"] in ("equivalent", "not yet known")


def test_regression_gate_fails_only_when_the_ci_lies_beyond_the_allowed_regression(
        tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=8, b_scale=0.065)          # B 30% slower
    code, doc = doc_of(capsys, a, b, "--metric", "ttft_p50", "--max-regression", "5%")
    assert doc["metrics"][0]["verdict"] == "worse"
    assert code == 1 and doc["gate"]["failed"] == ["ttft_p50"]
    # significantly worse, but the CI reaches into the allowed 60%: no failure
    code, doc = doc_of(capsys, a, b, "--metric", "ttft_p50", "--max-regression", "60%")
    assert doc["metrics"][0]["verdict"] == "worse" and code == 0
    # no allowed regression given: report only
    code, doc = doc_of(capsys, a, b, "--metric", "ttft_p50")
    assert code == 0 and "report only" in doc["gate"]["reason"]


def test_holm_across_metrics_can_withhold_a_verdict_one_test_alone_would_give(tmp_path,
                                                                                capsys):
    a, b = make_sides(tmp_path, reps=6, b_scale=0.035)
    _, alone = doc_of(capsys, a, b, "--metric", "ttft_p50")
    _, three = doc_of(capsys, a, b, "--metric", "ttft_p50", "--metric", "ttft_p90",
                      "--metric", "ttft_p99")
    assert alone["metrics"][0]["verdict"] == "better"        # exact floor 2 * 2^-6 < 0.05
    assert three["metrics"][0]["p_two_sided_holm"] > alone["metrics"][0]["p_two_sided_holm"]
    assert three["metrics"][0]["verdict"] == "not yet known"
    assert three["metrics"][0]["more_pairs"] >= 1


def test_unpaired_runs_are_said_loudly_and_marked(tmp_path, capsys):
    import numpy as np
    rng = np.random.default_rng(1)
    write_side(tmp_path / "A", [vllm_result(rng) for _ in range(4)])
    (tmp_path / "B").mkdir()
    for i in range(5):          # repetitions 10..14: no key in common with A's 0..3
        (tmp_path / "B" / f"run-{10 + i}.json").write_text(
            json.dumps(vllm_result(rng, ttft_scale=0.03)))
    code = run(tmp_path / "A", tmp_path / "B", "--metric", "ttft_p50")
    out = capsys.readouterr().out
    assert code == 0
    assert "UNPAIRED" in out and "WARNING" in out and "(unpaired)" in out


def test_runs_directories_pair_by_seed_and_use_their_slo(tmp_path, capsys):
    import numpy as np
    rng = np.random.default_rng(2)
    for side, scale in (("A", 0.05), ("B", 0.05)):
        for seed in range(4):
            f = tmp_path / f"{side}-{seed}.json"
            f.write_text(json.dumps(vllm_result(rng, ttft_scale=scale, fail_share=0.05)))
            import_vllm_bench(f, tmp_path / side, policy="no_sync", seed=seed, slo_e2e_s=0.9,
                              merge_duration_s=1.0,
                              role="no_sync")
    code, doc = doc_of(capsys, tmp_path / "A", tmp_path / "B", "--metric", "violation_rate")
    assert code == 0 and doc["pairing"]["key"] == "seed"
    assert doc["slo"]["e2e_s"] == 0.9 and doc["slo_source"] == "the runs' run.json"


def test_protocol_claims_needing_an_slo_are_skipped_and_said(tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=4)
    code, doc = doc_of(capsys, a, b)
    assert code == 0
    assert {s["metric"] for s in doc["skipped"]} == {"violation_rate", "goodput"}
    assert {r["metric"] for r in doc["metrics"]} == {"ttft_p99", "tpot_p99", "e2e_p99"}


@pytest.mark.parametrize("args, words", [
    (("--metric", "ttft_p95"), "unknown metric"),
    (("--metric", "violation_rate"), "--slo-e2e"),
    (("--margin", "lots"), "--margin"),
    (("--pair-by", "seed", "--metric", "ttft_p50", "--slo-ttft", "1"), "--slo-e2e"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path, capsys, args, words):
    a, b = make_sides(tmp_path, reps=3)
    assert run(a, b, *args) == 2
    assert words in capsys.readouterr().err


def test_bad_inputs_exit_2_naming_the_file(tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=3)
    assert run(a, tmp_path / "missing", "--metric", "ttft_p50") == 2
    assert "missing" in capsys.readouterr().err
    (b / "run-1.json").write_text(json.dumps({"hello": 1}))
    assert run(a, b, "--metric", "ttft_p50") == 2
    err = capsys.readouterr().err
    assert "run-1.json" in err and "not a result file of a supported harness" in err
    one_a, one_b = tmp_path / "one_a", tmp_path / "one_b"
    write_side(one_a, [json.loads((a / "run-0.json").read_text())])
    write_side(one_b, [json.loads((a / "run-0.json").read_text())])
    assert run(one_a, one_b, "--metric", "ttft_p50") == 2
    assert "cannot estimate the run-to-run spread" in capsys.readouterr().err


def test_plan_prints_pairs_and_interleaved_order_and_blocks_decide(tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=4, b_scale=0.048)
    assert run(a, b, "--plan", "--metric", "ttft_p50", "--effect", "ttft_p50=0.005",
               "--looks", "2", "--out", tmp_path / "plan") == 0
    out = capsys.readouterr().out
    assert "interleaved A/B pairs" in out and "1: A B, 2: B A" in out
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["looks"] == 2 and plan["pairs_max"] == 2 * plan["block"]
    assert plan["order"][:4] == ["A B", "B A", "A B", "B A"]
    block = plan["block"]
    # a first block of pairs with no clear difference: not decided, run the next block
    c, d = make_sides(tmp_path / "look1", reps=block, b_scale=0.05, run_sd=0.3)
    code, doc = doc_of(capsys, c, d, "--metric", "ttft_p50", "--plan-file",
                       tmp_path / "plan" / "plan.json")
    assert doc["sequential"]["look"] == 1
    assert doc["alpha_per_test"] == pytest.approx(0.025)
    assert doc["metrics"][0]["verdict"] == "not yet known" and code == 4
    assert "run block 2 of 2" in doc["gate"]["reason"]
    # a look between blocks is refused: it would be a look the bound does not cover
    e, f = make_sides(tmp_path / "partial", reps=block + 1)
    assert run(e, f, "--metric", "ttft_p50", "--plan-file", tmp_path / "plan" / "plan.json") == 2
    assert "not a whole number of blocks" in capsys.readouterr().err


def test_guidellm_reports_need_one_benchmark_each(tmp_path, capsys):
    from tests.interop.test_guidellm import make_report

    for side in ("A", "B"):
        (tmp_path / side).mkdir()
        for rep in range(3):
            make_report(tmp_path / side / f"benchmarks-{rep}.json")
    assert run(tmp_path / "A", tmp_path / "B", "--metric", "ttft_p50") == 2
    err = capsys.readouterr().err
    assert "holds 2 benchmarks" in err and "--benchmark" in err
    code, doc = doc_of(capsys, tmp_path / "A", tmp_path / "B", "--metric", "ttft_p50",
                       "--benchmark", "poisson@4.00")
    assert code == 0 and doc["pairing"]["key"] == "repetition"
    assert doc["runs"]["A"][0]["provenance"]["tool"] == "guidellm"
    assert doc["metrics"][0]["difference"] == 0 and doc["metrics"][0]["verdict"] != "better"


def test_runs_recorded_with_different_slos_are_refused(tmp_path, capsys):
    import numpy as np
    rng = np.random.default_rng(5)
    for side, slo in (("A", 0.9), ("B", 1.5)):
        for seed in range(3):
            f = tmp_path / f"{side}-{seed}.json"
            f.write_text(json.dumps(vllm_result(rng)))
            import_vllm_bench(f, tmp_path / side, policy="no_sync", seed=seed, slo_e2e_s=slo,
                              merge_duration_s=1.0, role="no_sync")
    assert run(tmp_path / "A", tmp_path / "B", "--metric", "violation_rate") == 2
    assert "different SLOs" in capsys.readouterr().err
    # one SLO for both sides, given on the command line: compared
    code, doc = doc_of(capsys, tmp_path / "A", tmp_path / "B", "--metric", "violation_rate",
                       "--slo-e2e", "1.0")
    assert code == 0 and doc["slo_source"] == "--slo options"


def _plan(tmp_path, **changes) -> str:
    plan = {"schema": "evalkit-compare-plan/1", "pairs_max": 8, "looks": 2, "block": 4,
            "alpha": 0.05, **changes}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


@pytest.mark.parametrize("changes, args, words", [
    ({}, ("--alpha", "0.1"), "made for alpha = 0.05"),
    ({"pairs_max": 4, "looks": 1}, (), "exceed the plan's 4"),
    ({"block": 3}, (), "block x looks differs"),
    ({"schema": "other"}, (), "not a comparison plan"),
    ({}, ("--pair-by", "none"), "could not be paired"),
    ({}, ("--plan",), "--plan makes a plan"),
])
def test_plans_are_checked(tmp_path, capsys, changes, args, words):
    a, b = make_sides(tmp_path, reps=8)
    assert run(a, b, "--metric", "ttft_p50", "--plan-file", _plan(tmp_path, **changes),
               *args) == 2
    assert words in capsys.readouterr().err


def test_a_metric_named_twice_is_refused(tmp_path, capsys):
    a, b = make_sides(tmp_path, reps=3)
    assert run(a, b, "--metric", "ttft_p50", "--metric", "ttft_p50") == 2
    assert "named twice" in capsys.readouterr().err
