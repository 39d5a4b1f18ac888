"""A FIFO or a device where a run file, campaign or protocol belongs: exit 2, never a hang.

A FIFO ``run.json`` or ``requests.parquet`` used to hang validate, summarize and audit (the
open waits for a writer); ``run.json -> /dev/zero`` passed the 16 MiB size check (a device
reports size 0) and was read until memory ran out.  Every command here runs under a SIGALRM
deadline: a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli

from evalkit.errors import InputError
from evalkit.fileread import check_regular, read_bounded
from evalkit.runlog.io import read_meta
from tests.support.reliability_tools import write_campaign
from tests.support.deadline import alarm_after

RUN = "fixture-s0-fixed_h"
DEADLINE_S = 90


@pytest.fixture
def deadline():
    """In-process commands: SIGALRM turns a hang into a failure."""
    with alarm_after(DEADLINE_S, f"took more than {DEADLINE_S} s: a special file blocked a read"):
        yield


def _invoke(args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def _replace_with(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind, said", [("fifo", "a FIFO (named pipe)"),
                                        ("zero", "a character device")])
@pytest.mark.parametrize("name", ["run.json", "requests.parquet"])
def test_validate_summarize_audit_refuse_a_special_run_file(tmp_path, copy_fixture, deadline,
                                                            name, kind, said):
    runs = copy_fixture("runs")
    bad = runs / RUN / name
    _replace_with(bad, kind)
    code, out, err = _invoke(["validate", runs])
    assert code == 2 and str(bad) in out and said in out, out + err
    for args in (["summarize", runs], ["audit", runs, "--out", tmp_path / "report"]):
        code, out, err = _invoke(args)
        assert code == 2 and said in err and "internal error" not in err, out + err


def test_sweep_treats_a_fifo_run_json_as_damaged(tmp_path, deadline):
    camp = write_campaign(tmp_path, draws=0)
    runs = tmp_path / "runs"
    assert _invoke(["sweep", camp, "--out", runs, "--no-progress"])[0] == 0
    ns = "tiny__no_sync__s0"
    _replace_with(runs / ns / "run.json", "fifo")
    code, out, err = _invoke(["sweep", camp, "--out", runs, "--check"])
    assert code == 2 and "damaged" in out and "FIFO" in out, out + err
    code, out, err = _invoke(["sweep", camp, "--out", runs, "--no-progress"])
    assert code == 0 and "moved aside" in out, out + err
    assert read_meta(runs / ns)["complete"] is True


@pytest.mark.parametrize("kind, said", [("fifo", "FIFO"), ("zero", "character device")])
def test_a_special_campaign_or_protocol_is_exit_2(tmp_path, copy_fixture, deadline, kind,
                                                  said):
    camp = write_campaign(tmp_path)
    _replace_with(camp, kind)
    code, out, err = _invoke(["sweep", camp, "--out", tmp_path / "runs", "--check"])
    assert code == 2 and said in err and str(camp) in err, out + err
    protocol = tmp_path / "p.toml"
    protocol.write_text("")
    _replace_with(protocol, kind)
    runs = copy_fixture("runs")
    code, out, err = _invoke(["audit", runs, "--out", tmp_path / "r", "--protocol", protocol])
    assert code == 2 and said in err, out + err


def test_reads_are_bounded_by_bytes_read_not_by_the_reported_size(tmp_path):
    """A /proc file is a regular file that reports size 0 yet has content."""
    proc = Path("/proc/self/maps")
    if not proc.exists() or proc.stat().st_size != 0:
        pytest.skip("needs a regular file that reports size 0 (Linux /proc)")
    with pytest.raises(InputError, match="holds more than 10 bytes"):
        read_bounded(proc, 10, "the file")
    assert len(read_bounded(proc, 1 << 24)) > 10
    run = tmp_path / "run"
    run.mkdir()
    # /proc/self/status (also size 0) starts with "Name:", so it is never JSON; the maps file
    # starts with an address that can read as a number (e.g. 37e17800000) under ASLR
    (run / "run.json").symlink_to(Path("/proc/self/status"))
    with pytest.raises(InputError, match="not valid JSON"):   # read, bounded, then parsed
        read_meta(run)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="more than 100 bytes"):
        read_bounded(big, 100)
    assert read_bounded(big, 101) == b"x" * 101


def test_check_regular_names_the_kind(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO") as info:
        check_regular(fifo, "requests.parquet")
    assert info.value.file == str(fifo)
    with pytest.raises(InputError, match="is a directory"):
        check_regular(tmp_path)
    with pytest.raises(FileNotFoundError):
        check_regular(tmp_path / "missing")
    shutil.rmtree(tmp_path / "mpl", ignore_errors=True)


@pytest.mark.parametrize("fmt", [None, "azure"])
def test_a_fifo_trace_file_is_refused(tmp_path, deadline, fmt):
    from evalkit.replay.traces import import_trace, read_trace

    fifo = tmp_path / ("t.parquet" if fmt is None else "t.csv")
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="the trace file is a FIFO") as info:
        read_trace(fifo) if fmt is None else import_trace(fifo, fmt)
    assert info.value.file == str(fifo)


def test_a_fifo_summary_table_or_benchmark_file_is_refused(tmp_path, deadline):
    from evalkit.runlog.table import read_summary_table
    from evalkit.interop.guidellm import read_guidellm
    from evalkit.interop.vllm_bench import import_vllm_bench

    def vllm(path):
        return import_vllm_bench(path, tmp_path / "runs", policy="p", seed=0, slo_e2e_s=1.0)

    for name, read in (("t.csv", read_summary_table), ("b.json", read_guidellm),
                       ("v.json", vllm)):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        with pytest.raises(InputError, match="is a FIFO") as info:
            read(fifo)
        assert info.value.file == str(fifo)
