"""`evalkit import guidellm --merge-clock`: merge windows on the wrong clock are named, the
flag is named, and no merging run is written with K = 0."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.interop.guidellm import import_guidellm, read_guidellm
from evalkit.interop.merge_spans import Span, clock_hint, outside_every_span
from evalkit.runlog.io import read_meta, read_table
from evalkit.runlog.summary import summarize_run
from tests.interop.test_guidellm import T_BASE, make_report


@pytest.fixture
def report(tmp_path):
    p = tmp_path / "benchmarks.json"
    make_report(p)
    return p


@pytest.fixture
def spans(report):
    """Per benchmark: (t0 Unix, length of its span in s) as an independent reading of the
    raw timings: first targeted start to the last request end or send."""
    out = []
    for b in read_guidellm(report):
        r = b.requests
        out.append((b.t0_unix, float(np.nanmax([r["end_s"].max(), r["sent_s"].max()]))))
    return out


def _csv(tmp_path, windows, name="merges.csv"):
    p = tmp_path / name
    p.write_text("start_s,end_s\n" + "".join(f"{a!r},{b!r}\n" for a, b in windows))
    return p


def _import(report, runs, merges, *extra):
    return CliRunner().invoke(cli, ["import", "guidellm", str(report), "--out", str(runs),
                                    "--merges", str(merges), "--policy", "wa", "--seed", "1",
                                    "--slo-e2e", "0.5", *extra])


def _nothing_written(runs):
    return not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("extra", [[], ["--merge-duration", "2"]])
def test_relative_times_under_the_absolute_clock_name_the_flag(report, tmp_path, extra):
    merges = _csv(tmp_path, [(4.0, 6.0), (12.0, 14.0)])
    runs = tmp_path / "runs"
    res = _import(report, runs, merges, *extra)
    assert res.exit_code == 2, res.output
    assert "none of the 2 merge windows falls inside a benchmark's span" in res.output
    assert "K = 0" in res.output and "--merge-clock relative" in res.output
    assert "pass --merge-duration" not in res.output      # the old, misleading fix
    assert _nothing_written(runs)


def test_the_same_windows_with_the_relative_clock_import_with_their_k(report, tmp_path):
    merges = _csv(tmp_path, [(4.0, 6.0), (12.0, 14.0)])
    runs = tmp_path / "runs"
    res = _import(report, runs, merges, "--merge-clock", "relative", "--benchmark", "0")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    assert read_table(run, "merges")["start_s"].tolist() == [4.0, 12.0]
    assert summarize_run(run)["k_observed"] == 2


def test_unix_times_under_the_relative_clock_name_the_absolute_clock(report, tmp_path, spans):
    t0, _ = spans[0]
    merges = _csv(tmp_path, [(t0 + 4.0, t0 + 6.0)])
    res = _import(report, tmp_path / "runs", merges, "--merge-clock", "relative",
                  "--benchmark", "0")
    assert res.exit_code == 2, res.output
    assert "look like Unix seconds" in res.output and "--merge-clock absolute" in res.output


def test_windows_outside_every_benchmark_are_said_in_a_warning_and_the_notes(report, tmp_path,
                                                                            spans):
    (t0, n0), (t1, n1) = spans
    inside = [(t0 + 5.0, t0 + 7.0), (t1 + 5.0, t1 + 7.0)]
    between = (t0 + n0 + 1.0, t0 + n0 + 3.0)          # after benchmark 0, before benchmark 1
    assert between[1] < t1
    merges = _csv(tmp_path, sorted(inside + [between]))
    runs = tmp_path / "runs"
    res = _import(report, runs, merges)
    assert res.exit_code == 0, res.output
    assert "warning: 1 of 3 merge windows fall outside every benchmark's span" in res.output
    assert "--merge-clock relative" in res.output
    for run in sorted(p for p in runs.iterdir() if p.is_dir()):
        assert len(read_table(run, "merges")) == 1
        assert any("1 of 3 merge windows fall outside" in n for n in read_meta(run)["notes"])


def test_a_benchmark_left_with_no_window_is_refused_before_anything_is_written(report,
                                                                              tmp_path, spans):
    (t0, _), _ = spans
    merges = _csv(tmp_path, [(t0 + 5.0, t0 + 7.0)])        # benchmark 0 only
    runs = tmp_path / "runs"
    res = _import(report, runs, merges)
    assert res.exit_code == 2, res.output
    assert "benchmark 1 (poisson@4.00): no merge window lies inside its observed span" in \
        res.output and "K = 0" in res.output and "--benchmark N" in res.output
    assert _nothing_written(runs)
    res = _import(report, runs, merges, "--benchmark", "0")
    assert res.exit_code == 0, res.output


def test_k_zero_threshold_at_the_span_end(report, tmp_path, spans):
    """A window ending exactly at the span's end is observed (K = 1); one ending just past
    it only overlaps the span: K = 0, refused."""
    t0, n0 = spans[0]
    at_end = _csv(tmp_path, [(n0 - 2.0, n0)], "at_end.csv")
    runs = tmp_path / "ok"
    (run,) = import_guidellm(report, runs, policy="wa", seed=1, merges=at_end,
                             merge_clock="relative", benchmarks=[0], slo_e2e_s=0.5)
    assert summarize_run(run)["k_observed"] == 1
    past = _csv(tmp_path, [(n0 - 2.0, n0 + 1e-3)], "past.csv")
    with pytest.raises(InputError, match="K = 0") as info:
        import_guidellm(report, tmp_path / "bad", policy="wa", seed=1, merges=past,
                        merge_clock="relative", benchmarks=[0], slo_e2e_s=0.5)
    assert info.value.column == "--merge-clock"
    # a no-sync import has no windows and is not a K = 0 merging run
    runs = import_guidellm(report, tmp_path / "ns", policy="no_sync", role="no_sync", seed=1,
                           slo_e2e_s=0.5, merge_duration_s=2.0)
    assert len(runs) == 2


def test_span_helpers_at_their_edges():
    spans = [Span("a", 10.0, 20.0)]
    # touching the span's ends is not overlapping it; a hair inside is
    got = outside_every_span([0.0, 20.0, 9.0, 19.999], [10.0, 25.0, 10.001, 30.0], spans)
    assert got.tolist() == [True, True, False, False]
    assert "relative" in clock_hint([5.0], [99_999_999.0], "absolute")
    assert clock_hint([5.0], [100_000_000.0], "absolute") == ""
    assert "absolute" in clock_hint([100_000_000.0], [100_000_002.0], "relative")
    assert clock_hint([99_999_999.0], [100_000_002.0], "relative") == ""
    assert T_BASE > 1e8


def test_an_imported_fixed_h_run_without_draws_is_told_what_is_missing(report, tmp_path):
    merges = _csv(tmp_path, [(4.0, 6.0), (12.0, 14.0)])
    runs = tmp_path / "runs"
    res = CliRunner().invoke(cli, ["import", "guidellm", str(report), "--out", str(runs),
                                   "--merges", str(merges), "--merge-clock", "relative",
                                   "--benchmark", "0", "--policy", "fixed_h", "--seed", "1",
                                   "--slo-e2e", "0.5", "--regime", "g"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(tmp_path / "report")])
    assert res.exit_code == 2, res.output
    assert "no claim to audit: the policy runs fixed_h (regime g, 1 run) have no " \
        "matched-random draws" in res.output
    assert "every run is a baseline" not in res.output


def test_readme_guidellm_block_is_a_0_8_command_and_its_import_line_works(report, tmp_path):
    from tests.support.readme_blocks import readme_block

    commands = readme_block("guidellm-command")
    run = next(c for c in commands if c[:2] == ["guidellm", "run"])
    opts = dict(zip(run[2::2], run[3::2]))
    assert opts["--backend"].startswith("kind=openai_http,target=http://")
    assert opts["--profile"] == "kind=constant,rate=2"
    assert opts["--output"].startswith("kind=json,path=")       # GuideLLM's own output flag
    assert "benchmark" not in run and "--output-path" not in run
    serve = next(c for c in commands if c[:2] == ["evalkit", "serve"])
    assert f"model={serve[serve.index('--served-model-name') + 1]}" in opts["--backend"]
    back = next(c for c in commands if c[:3] == ["evalkit", "import", "guidellm"])
    runs = tmp_path / "runs"
    args = [str(report) if a == "benchmarks.json" else (str(runs) if a == "runs" else a)
            for a in back[3:]]
    res = CliRunner().invoke(cli, ["import", "guidellm", *args])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 0


def test_a_broken_report_names_guidellms_output_flag_not_vllms(tmp_path):
    bad = tmp_path / "benchmarks.json"
    bad.write_text("{nope")
    with pytest.raises(InputError) as info:
        read_guidellm(bad)
    assert "--output kind=json,path=" in info.value.fix and "--save-result" not in \
        info.value.fix
    y = tmp_path / "benchmarks.yaml"
    y.write_text("benchmarks: []\n")
    with pytest.raises(InputError, match="cannot be imported") as info:
        read_guidellm(y)
    assert "--output kind=json" in info.value.fix
