"""`evalkit trace ...`: happy paths and bad input (exit 2, nothing written)."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.replay.traces import read_trace


def run(*args):
    return CliRunner().invoke(cli, ["trace", *map(str, args)])


def test_import_azure(azure_trace, tmp_path):
    out = tmp_path / "az.parquet"
    r = run("import", azure_trace, "--format", "azure", "--out", out)
    assert r.exit_code == 0, r.output
    t = read_trace(out)
    assert "kept 8819, dropped 0" in r.output and f"sha256 {t.sha256}" in r.output


def test_import_burstgpt_reports_dropped(tmp_path):
    pd.DataFrame({"Timestamp": [0.0, 1.0, 2.0], "Request tokens": [5, 6, 7],
                  "Response tokens": [1, 0, 3]}).to_csv(tmp_path / "b.csv", index=False)
    r = run("import", tmp_path / "b.csv", "--format", "burstgpt", "--out", tmp_path / "b.parquet")
    assert r.exit_code == 0, r.output
    assert "kept 2, dropped 1 (1 failed (Response tokens == 0))" in r.output


def test_import_mooncake_jitter_flags(tmp_path):
    lines = [{"timestamp": 3000 * (i // 4), "input_length": 10, "output_length": 2}
             for i in range(12)]
    (tmp_path / "m.jsonl").write_text("\n".join(map(json.dumps, lines)))
    r = run("import", tmp_path / "m.jsonl", "--format", "mooncake", "--out", tmp_path / "a.parquet",
            "--seed", 3)
    assert r.exit_code == 0 and "jitter: applied, uniform within 3 s buckets" in r.output
    r = run("import", tmp_path / "m.jsonl", "--format", "mooncake", "--out", tmp_path / "b.parquet",
            "--no-jitter")
    assert r.exit_code == 0 and "jitter: not applied" in r.output
    assert read_trace(tmp_path / "b.parquet").meta["jitter"]["applied"] is False


def test_generate_describe_slice_scale(tmp_path):
    g = tmp_path / "g.parquet"
    r = run("generate", "gamma", "--out", g, "--seed", 1, "--rate", 5, "--duration", 120,
            "--burstiness", 0.5, "--prompt-len", "lognormal:200,0.5", "--output-len", 32)
    assert r.exit_code == 0, r.output
    t = read_trace(g)
    assert t.meta["params"] == {"rate": 5.0, "duration_s": 120.0, "burstiness": 0.5}
    assert set(t.requests["output_tokens"]) == {32}
    r = run("describe", g, "--json", "--plot", tmp_path / "g.png")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["n"] == t.n and d["sha256"] == t.sha256 and (tmp_path / "g.png").exists()
    r = run("slice", g, "--start", 30, "--end", 90, "--out", tmp_path / "s.parquet")
    assert r.exit_code == 0, r.output
    assert read_trace(tmp_path / "s.parquet").duration_s == 60
    r = run("scale", g, "--rate", 10, "--out", tmp_path / "r.parquet")
    assert r.exit_code == 0 and read_trace(tmp_path / "r.parquet").rate == pytest.approx(10)
    r = run("generate", "mmpp", "--out", tmp_path / "m.parquet", "--seed", 2, "--quiet-rate", 1,
            "--busy-rate", 10, "--mean-quiet", 20, "--mean-burst", 5, "--duration", 100,
            "--lengths-from", g)
    assert r.exit_code == 0, r.output
    assert read_trace(tmp_path / "m.parquet").meta["lengths"]["dist"] == "joint_resample"


def _bad_parquet(tmp_path):
    p = tmp_path / "bad.parquet"
    pd.DataFrame({"arrival_s": [0.0, 2.0, 1.0], "prompt_tokens": [1, 2, 3],
                  "output_tokens": [1, 1, 1]}).to_parquet(p, index=False)
    return p


@pytest.mark.parametrize("case", [
    "non_monotone", "missing_column", "unknown_param", "missing_param", "no_jitter_azure",
    "scale_both", "empty_window", "bad_length", "empty_csv",
])
def test_bad_input_exit_2_nothing_written(case, tmp_path):
    out = tmp_path / "out.parquet"
    csv = tmp_path / "a.csv"
    if case == "non_monotone":
        args = ["slice", _bad_parquet(tmp_path), "--start", 0, "--end", 1, "--out", out]
        expect = "--sort"
    elif case == "missing_column":
        pd.DataFrame({"TIMESTAMP": ["2023-11-16 18:17:03.0"]}).to_csv(csv, index=False)
        args = ["import", csv, "--format", "azure", "--out", out]
        expect = "ContextTokens"
    elif case == "unknown_param":
        args = ["generate", "poisson", "--out", out, "--seed", 1, "--rate", 1, "--duration", 10,
                "--burstiness", 2]
        expect = "valid parameters: --rate, --duration"
    elif case == "missing_param":
        args = ["generate", "square-wave", "--out", out, "--seed", 1, "--period", 10]
        expect = "missing"
    elif case == "no_jitter_azure":
        pd.DataFrame({"TIMESTAMP": ["2023-11-16 18:17:03.0"], "ContextTokens": [1],
                      "GeneratedTokens": [1]}).to_csv(csv, index=False)
        args = ["import", csv, "--format", "azure", "--out", out, "--no-jitter"]
        expect = "mooncake"
    elif case == "scale_both":
        good = tmp_path / "g.parquet"
        run("generate", "poisson", "--out", good, "--seed", 1, "--rate", 1, "--duration", 10)
        args = ["scale", good, "--factor", 2, "--rate", 3, "--out", out]
        expect = "exactly one"
    elif case == "empty_window":
        good = tmp_path / "g.parquet"
        run("generate", "poisson", "--out", good, "--seed", 1, "--rate", 1, "--duration", 10)
        args = ["slice", good, "--start", 100, "--end", 200, "--out", out]
        expect = "no requests"
    elif case == "bad_length":
        args = ["generate", "poisson", "--out", out, "--seed", 1, "--rate", 1, "--duration", 10,
                "--prompt-len", "zipf:3"]
        expect = "cannot parse length spec"
    else:
        csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        args = ["import", csv, "--format", "azure", "--out", out]
        expect = "empty"
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert expect in r.output
    assert not out.exists()
    assert not any(p.name.startswith(".out.parquet") for p in tmp_path.iterdir())


def test_sort_flag_repairs(tmp_path):
    r = run("slice", _bad_parquet(tmp_path), "--start", 0, "--end", 5, "--out",
            tmp_path / "s.parquet", "--sort")
    assert r.exit_code == 0, r.output
    t = read_trace(tmp_path / "s.parquet")
    assert list(t.arrival_s) == [0.0, 1.0, 2.0] and t.meta["repairs"][0]["rows_out_of_order"] == 1
