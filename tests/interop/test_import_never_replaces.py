"""No import replaces what exists: a run of the same id (an earlier import, a sweep's run) is
exit 2 naming the directory and ``--replace``; ``--replace`` moves the old run aside, never
deletes it; reserved names (plan.json, hidden names, lock files) are refused as run ids."""

from __future__ import annotations

import errno
import json
import os

import pytest
from click.testing import CliRunner

import evalkit.interop._meta as meta_module
from evalkit.cli.main import cli
from evalkit.replay.sweep import run_campaign
from evalkit.runlog.validate import validate_runs
from tests.interop.test_guidellm import MERGES_UNIX, make_report
from tests.interop.test_summary_table import TABLE
from tests.interop.test_vllm_bench import _files, _result
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import run_fingerprints, write_campaign

RUN = "default-wa-s3"


def _invoke(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _vllm(tmp_path, runs, *extra, seed=0):
    res, mer = _files(tmp_path, _result(seed=seed))
    return _invoke(["import", "vllm-bench", res, "--out", runs, "--merges", mer,
                    "--policy", "wa", "--seed", "3", "--slo-e2e", "1.2", *extra])


def _bytes(run_dir):
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir())}


def test_a_second_import_of_the_same_run_exits_2_and_keeps_the_first(tmp_path):
    runs = tmp_path / "runs"
    assert _vllm(tmp_path, runs).exit_code == 0
    first = _bytes(runs / RUN)
    res = _vllm(tmp_path, runs, seed=1)                   # other numbers, same policy and seed
    assert res.exit_code == 2, res.output
    assert str(runs / RUN) in res.output and "--replace" in res.output
    assert "already exists (a run imported earlier" in res.output
    assert _bytes(runs / RUN) == first
    assert [p.name for p in runs.iterdir()] == [RUN]      # nothing half-written beside it


def test_replace_moves_the_old_run_aside_never_deletes_it(tmp_path):
    runs = tmp_path / "runs"
    assert _vllm(tmp_path, runs).exit_code == 0
    first = _bytes(runs / RUN)
    res = _vllm(tmp_path, runs, "--replace", seed=1)
    assert res.exit_code == 0, res.output
    (kept,) = [p for p in runs.iterdir() if p.name.startswith(f".{RUN}.replaced-")]
    assert _bytes(kept) == first and _bytes(runs / RUN) != first
    report = validate_runs(runs)
    assert report.ok and [w.kind for w in report.warnings] == ["layout"]
    assert "moved aside when an import replaced it" in report.warnings[0].message


def test_replace_brings_the_old_run_back_when_the_new_one_cannot_be_written(tmp_path,
                                                                             monkeypatch):
    runs = tmp_path / "runs"
    assert _vllm(tmp_path, runs).exit_code == 0
    first = _bytes(runs / RUN)

    rename = os.rename

    def failing_publish(src, dst, *args, **kw):
        if ".tmp-import-" in str(src) and ".tmp-import-" not in str(dst):   # into place
            raise OSError(errno.EIO, "Input/output error")
        return rename(src, dst, *args, **kw)

    monkeypatch.setattr(meta_module.os, "rename", failing_publish)
    res = _vllm(tmp_path, runs, "--replace", seed=1)
    assert res.exit_code == 2 and "Input/output error" in res.output
    assert _bytes(runs / RUN) == first and [p.name for p in runs.iterdir()] == [RUN]


def test_run_id_of_a_sweep_run_is_refused(tmp_path):
    camp = write_campaign(tmp_path)
    runs = tmp_path / "runs"
    assert run_campaign(camp, runs, progress=False, protocol=BUNDLED).ok
    before = run_fingerprints(runs)
    res = _vllm(tmp_path, runs, "--run-id", "tiny__wa__s0")
    assert res.exit_code == 2, res.output
    assert "a run written by evalkit sweep/replay" in res.output and "--replace" in res.output
    assert run_fingerprints(runs) == before


@pytest.mark.parametrize("name", ["plan.json", "run.json", "PLAN.JSON", ".hidden",
                                  ".evalkit-sweep.all.lock", "mine.lock"])
def test_reserved_names_are_refused_as_run_ids(tmp_path, name):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "plan.json").write_text('{"frozen": true}')
    res = _vllm(tmp_path, runs, "--run-id", name, "--replace")
    assert res.exit_code == 2, res.output
    assert "invalid run_id" in res.output
    assert "reserved in a runs directory: plan.json, run.json" in res.output
    assert "'.lock'" in res.output and "starting with '.'" in res.output
    assert (runs / "plan.json").read_text() == '{"frozen": true}'
    assert sorted(p.name for p in runs.iterdir()) == ["plan.json"]


@pytest.mark.parametrize("what", ["file", "link"])
def test_a_file_or_link_in_the_way_is_never_replaced_even_with_replace(tmp_path, what):
    runs = tmp_path / "runs"
    assert _vllm(tmp_path, runs, "--run-id", "real").exit_code == 0
    if what == "file":
        (runs / RUN).write_text("notes")
    else:
        (runs / RUN).symlink_to("real")                   # a run reached through a link
    res = _vllm(tmp_path, runs, "--replace", seed=1)
    assert res.exit_code == 2 and "is not a run directory" in res.output
    assert (runs / RUN).is_symlink() == (what == "link")
    assert what == "link" or (runs / RUN).read_text() == "notes"
    assert sorted(p.name for p in runs.iterdir()) == sorted([RUN, "real"])


def _guidellm(tmp_path, runs, *extra):
    report = tmp_path / "benchmarks.json"
    make_report(report)
    merges = tmp_path / "merges.csv"
    merges.write_text("start_s,end_s\n" + "".join(f"{a},{b}\n" for a, b in MERGES_UNIX))
    return _invoke(["import", "guidellm", report, "--out", runs, "--merges", merges,
                    "--policy", "p", "--seed", "1", "--slo-e2e", "0.5", *extra])


def test_guidellm_checks_every_benchmark_before_writing_any(tmp_path):
    runs = tmp_path / "runs"
    assert _guidellm(tmp_path, runs).exit_code == 0
    first, second = sorted(p for p in runs.iterdir())
    kept = _bytes(second)
    for p in first.iterdir():
        p.unlink()
    first.rmdir()
    res = _guidellm(tmp_path, runs)
    assert res.exit_code == 2 and str(second) in res.output and "--replace" in res.output
    assert not first.exists() and _bytes(second) == kept   # neither written nor replaced
    assert _guidellm(tmp_path, runs, "--replace").exit_code == 0
    assert first.exists() and len([p for p in runs.iterdir() if ".replaced-" in p.name]) == 1


def test_table_import_never_replaces(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text(TABLE)
    runs = tmp_path / "runs"
    assert _invoke(["import", "table", table, "--out", runs]).exit_code == 0
    before = sorted(p.name for p in runs.iterdir())
    res = _invoke(["import", "table", table, "--out", runs])
    assert res.exit_code == 2 and "already exists" in res.output and "--replace" in res.output
    assert sorted(p.name for p in runs.iterdir()) == before
    res = _invoke(["import", "table", table, "--out", runs, "--replace"])
    assert res.exit_code == 0, res.output
    assert len([p for p in runs.iterdir() if ".replaced-" in p.name]) == len(before)
    assert json.loads((runs / before[0] / "run.json").read_text())["backend"] == "import"


def test_a_displaced_plan_is_named_with_how_to_restore_it(tmp_path):
    """A store damaged before reserved names were refused: plan.json is a run directory and
    the frozen plan lies in .plan.json.old-*; reading the plan names that file and the mv."""
    camp = write_campaign(tmp_path)
    runs = tmp_path / "runs"
    (runs / "plan.json").mkdir(parents=True)
    (runs / ".plan.json.old-1a2b3c4d").write_text("{}")
    res = _invoke(["sweep", camp, "--out", runs, "--check"])
    assert res.exit_code == 2, res.output
    assert "cannot read the plan" in res.output
    assert "moved aside as .plan.json.old-1a2b3c4d" in res.output
    assert "mv .plan.json.old-1a2b3c4d plan.json" in res.output
