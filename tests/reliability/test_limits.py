"""Hostile sizes end in exit 2 with the allowed range: deep nesting, huge values, long names.

Each case used to hang, exhaust memory or end in a traceback (RecursionError, OverflowError,
ENAMETOOLONG) with exit 1.  A SIGALRM deadline turns a regression into a failure, not a hang.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.limits import MAX_RUN_ID_BYTES, capped_name, check_structure
from tests.support.reliability_tools import TINY_CAMPAIGN, write_campaign
from tests.support.deadline import alarm_after

REPO = Path(__file__).resolve().parents[2]
PROTOCOL = REPO / "protocols" / "diloco-slo.toml"
RUN = "fixture-s0-fixed_h"


@pytest.fixture(autouse=True)
def deadline():
    """Fail (instead of hanging the suite) if a bound regresses into a long computation."""
    with alarm_after(120, "took more than 120 s: a bound is missing"):
        yield


def invoke(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_exit_2(res, *words):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    for w in words:
        assert w in res.output, (w, res.output)


# ----------------------------------------------------------------------------- protocols

def _protocol(tmp_path, edit) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(edit(PROTOCOL.read_text()))
    return path


@pytest.mark.parametrize("key, value, words", [
    ("n_resamples", str(10 ** 4000), ["n_resamples", "64-bit"]),        # was OverflowError
    ("n_resamples", str(10 ** 12), ["n_resamples", "[100, 1,000,000]"]),  # was a hang
    ("bootstrap_resamples", str(10 ** 9), ["bootstrap_resamples", "[100, 1,000,000]"]),
    ("n_resamples", "50", ["n_resamples", "[100, 1,000,000]"]),
])
def test_protocol_resamples_are_bounded(tmp_path, copy_fixture, key, value, words):
    proto = _protocol(tmp_path, lambda t: re.sub(rf"(?m)^{key} = \d+", f"{key} = {value}", t))
    assert f"{key} = {value}" in proto.read_text()
    runs = copy_fixture("runs")
    for cmd in (["audit", runs, "--out", tmp_path / "out"], ["gate", runs, "--policy", "wa"]):
        assert_exit_2(invoke([*cmd, "--protocol", proto]), *words)
    assert not (tmp_path / "out").exists()


def test_protocol_of_100_mb_is_rejected_before_parsing(tmp_path, copy_fixture):
    proto = tmp_path / "big.toml"
    text = PROTOCOL.read_text()
    proto.write_text(text.replace('description = "', 'description = "' + "x" * (100 << 20), 1))
    assert_exit_2(invoke(["gate", copy_fixture("runs"), "--policy", "wa", "--protocol", proto]),
                  "big.toml", "1,048,576 bytes")


def test_protocol_long_string_and_deep_nesting(tmp_path, copy_fixture):
    runs = copy_fixture("runs")
    long = _protocol(tmp_path, lambda t: t.replace('description = "',
                                                   'description = "' + "y" * 20_000, 1))
    assert_exit_2(invoke(["gate", runs, "--policy", "wa", "--protocol", long]),
                  "protocol.description", "limited to 10,000 characters")
    deep = tmp_path / "deep.toml"
    deep.write_text(PROTOCOL.read_text() + "\n[extra]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_exit_2(invoke(["gate", runs, "--policy", "wa", "--protocol", deep]),
                  "deep.toml", "nested")


# ----------------------------------------------------------------------------- campaigns

@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace("seeds = 1", "seeds = 1000000000000"), ["seeds", "[1, 10,000]"]),
    (lambda t: t.replace("seeds = 1", f"seeds = {list(range(10_001))}"), ["seeds", "10,000"]),
    (lambda t: t.replace("seeds = 1", "seeds = [4294967296]"), ["seeds", "4,294,967,295"]),
    (lambda t: t.replace("matched_random_draws = 2", "matched_random_draws = 1e9"),
     ["matched_random_draws", "[0, 1,000]"]),
    (lambda t: t.replace('name = "wa"', 'name = "wa"\ndraws = 5000'), ["draws", "[0, 1,000]"]),
    (lambda t: t.replace("horizon_s = 240.0", "horizon_s = inf"), ["horizon_s", "finite"]),
    (lambda t: t.replace("horizon_s = 240.0", "horizon_s = 1e12"), ["horizon_s", "out of range"]),
    (lambda t: t.replace("busy_rate = 10.0", "busy_rate = 1e9"), ["trace.rate", "requests"]),
    (lambda t: t.replace("period_s = 60.0", "period_s = 1e-9"), ["period_s", "segments"]),
    (lambda t: t.replace('regime = "tiny"', f'regime = "{"r" * 5000}"'), ["regime", "64"]),
    (lambda t: t.replace('name = "wa"', f'name = "wa"\nlabel = "{"w" * 5000}"'),
     ["label", "64 characters"]),
    (lambda t: t.replace("seeds = 1", "seeds = 10000").replace("matched_random_draws = 2",
                                                              "matched_random_draws = 1000"),
     ["runs", "200,000"]),
    (lambda t: t + "\n[[policies]]\nname = \"wa\"\nlabel = \"w\"\nparams = { x = "
     + "[" * 100_000 + "]" * 100_000 + " }\n", ["nested"]),
    (lambda t: t.replace('regime = "tiny"', f'regime = "tiny"\ndescription = "{"d" * 20_000}"'),
     ["description", "10,000"]),
    (lambda t: t.replace("seeds = 1", f"seeds = {10 ** 4000}"), ["seeds"]),
])
def test_campaign_bounds_exit_2_before_anything_is_written(tmp_path, edit, words):
    camp = tmp_path / "c.toml"
    camp.write_text(edit(TINY_CAMPAIGN.format(seeds=1, draws=2)))
    out = tmp_path / "runs"
    for extra in ([], ["--check"]):
        assert_exit_2(invoke(["sweep", camp, "--out", out, *extra]), *words)
    assert not out.exists()


def test_campaign_file_too_big(tmp_path):
    camp = write_campaign(tmp_path)
    camp.write_text(camp.read_text() + "\n# " + "z" * (2 << 20) + "\n")
    assert_exit_2(invoke(["sweep", camp, "--out", tmp_path / "runs"]), "1,048,576 bytes")


def test_limits_keep_real_campaigns_valid(repo_root):
    from evalkit.replay.campaign import load_campaign

    for path in sorted((repo_root / "examples").rglob("*.toml")) + [
            repo_root / "evalkit" / "replay" / "campaigns" / "bursty.toml"]:
        text = path.read_text()
        if "regime" in text and "[[policies]]" in text:
            try:
                load_campaign(path)
            except InputError as exc:     # a trace file that only exists beside the checkout
                assert "trace" in (exc.column or "") or "not found" in exc.message, exc


# ----------------------------------------------------------------------------- run logs

def test_deeply_nested_run_json_is_a_validation_error(copy_fixture):
    runs = copy_fixture("runs")
    (runs / RUN / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    res = invoke(["validate", runs])
    assert_exit_2(res, f"{RUN}/run.json", "nested too deeply")
    assert_exit_2(invoke(["audit", runs, "--out", runs.parent / "out"]), "run.json", "nested")
    assert_exit_2(invoke(["summarize", runs]), "run.json")


@pytest.mark.parametrize("value, words", [
    (str(10 ** 30), "64-bit"),            # was OverflowError when summarised
    ("1" + "0" * 4500, "run.json"),       # beyond Python's int-parsing limit: was ValueError
])
def test_huge_seed_in_run_json(copy_fixture, value, words):
    runs = copy_fixture("runs")
    path = runs / RUN / "run.json"
    text = path.read_text()
    meta = json.loads(text)
    path.write_text(text.replace(f'"seed": {meta["seed"]}', f'"seed": {value}'))
    assert value in path.read_text()
    for cmd in (["validate", runs], ["summarize", runs]):
        res = invoke(cmd)
        assert_exit_2(res, words)
        assert len(res.output) < 5000        # the value is not echoed in full


def test_oversized_run_json(copy_fixture):
    runs = copy_fixture("runs")
    path = runs / RUN / "run.json"
    meta = json.loads(path.read_text())
    meta["notes"] = ["n" * (17 << 20)]
    path.write_text(json.dumps(meta))
    assert_exit_2(invoke(["validate", runs]), "16,777,216")


# ----------------------------------------------------------------------------- long names

def test_capped_name_is_short_stable_and_distinct():
    a, b = "p" * 5000 + "a", "p" * 5000 + "b"
    ca, cb = capped_name(a), capped_name(b)
    assert len(ca.encode()) <= MAX_RUN_ID_BYTES and ca != cb and ca == capped_name(a)
    assert capped_name("short") == "short"
    multi = "é" * 300                       # multi-byte: capped in bytes, still valid UTF-8
    assert len(capped_name(multi).encode()) <= MAX_RUN_ID_BYTES


def test_write_run_rejects_an_overlong_run_id(tmp_path):
    from evalkit.runlog.io import read_run, write_run

    run = read_run(REPO / "fixtures" / "runs" / RUN)
    meta = dict(run.meta, run_id="r" * 5000)
    with pytest.raises(InputError, match="at most 200 bytes"):      # was ENAMETOOLONG
        write_run(tmp_path, meta, run.requests, run.merges)
    assert list(tmp_path.iterdir()) == []


def test_replay_with_a_5000_char_regime_gets_a_capped_run_id(tmp_path):
    trace = tmp_path / "t.parquet"
    assert invoke(["trace", "generate", "poisson", "--rate", "2", "--duration", "120",
                   "--seed", "1", "--out", trace]).exit_code == 0
    res = invoke(["replay", "--trace", trace, "--policy", "no_sync", "--seed", "0",
                  "--regime", "g" * 5000, "--out", tmp_path / "runs"])
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert len(run_dir.name.encode()) <= MAX_RUN_ID_BYTES and "~" in run_dir.name
    assert invoke(["validate", tmp_path / "runs"]).exit_code == 0


def test_imported_long_policy_name_gets_a_capped_run_id():
    from evalkit.interop._meta import default_run_id

    rid = default_run_id("r", "P" * 5000, "policy", 0, None)
    assert len(rid.encode()) <= MAX_RUN_ID_BYTES
    assert rid != default_run_id("r", "P" * 4999 + "Q", "policy", 0, None)


def test_check_structure_walks_iteratively():
    nested = []
    for _ in range(50_000):             # far beyond the recursion limit: no RecursionError
        nested = [nested]
    with pytest.raises(InputError, match="nested more than"):
        check_structure({"a": nested}, file="x")
    check_structure({"a": [[1, 2], {"b": "c"}]}, file="x")
