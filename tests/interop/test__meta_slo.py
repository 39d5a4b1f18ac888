"""The importers take their SLOs through the run-log format's one rule (runlog.schema.Slo):
a missing, zero, negative or non-finite SLO is an input error naming the option, and
nothing is written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from tests.interop.test_vllm_bench import _files, _result


@pytest.mark.parametrize("flags, option", [
    ((), "--slo-e2e"),
    (("--slo-e2e", "0"), "--slo-e2e"),
    (("--slo-e2e", "-1"), "--slo-e2e"),
    (("--slo-e2e", "nan"), "--slo-e2e"),
    (("--slo-e2e", "2", "--slo-ttft", "-0.5"), "--slo-ttft"),
    (("--slo-e2e", "2", "--slo-tpot", "inf"), "--slo-tpot"),
])
def test_a_bad_slo_names_its_option_and_writes_nothing(tmp_path, flags, option):
    res, mer = _files(tmp_path, _result())
    out = tmp_path / "runs"
    r = CliRunner().invoke(cli, ["import", "vllm-bench", str(res), "--out", str(out),
                                 "--merges", str(mer), "--policy", "wa", "--seed", "3",
                                 *flags])
    if not flags:                 # click itself may require the option
        assert r.exit_code == 2, r.output
        return
    assert r.exit_code == 2, r.output
    assert option in r.output and "result.json" in r.output
    assert not out.exists() or not any(out.iterdir())


def test_a_good_slo_is_written_as_the_format_defines_it(tmp_path):
    res, mer = _files(tmp_path, _result())
    out = tmp_path / "runs"
    r = CliRunner().invoke(cli, ["import", "vllm-bench", str(res), "--out", str(out),
                                 "--merges", str(mer), "--policy", "wa", "--seed", "3",
                                 "--slo-e2e", "2", "--slo-ttft", "0.5"])
    assert r.exit_code == 0, r.output
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    assert json.loads((run / "run.json").read_text())["slo"] == {
        "e2e_s": 2.0, "ttft_s": 0.5, "tpot_s": None}
