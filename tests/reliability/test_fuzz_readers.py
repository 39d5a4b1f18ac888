"""Every CLI reader against hostile files: the exit code is 0, 1 or 2, never 3, and no
traceback reaches the terminal.

A seeded generator (deterministic: the same files on every run) damages one valid file per
case -- truncation, bytes garbage, a value of the wrong type at a random field, deep nesting,
a duplicated key, huge or non-finite numbers, a FIFO, /dev/zero, a directory -- and runs the
command that reads it in-process through the click group (``_Group.main`` maps exceptions
to exit codes exactly as the console script does).  Readers: run.json and the Parquet tables
(validate, summarize, audit), audit.json (report, diff, gate --baseline), a GuideLLM report,
a vLLM bench result, an AIPerf export (aggregate JSON, records JSONL) and an inference-perf
report (per-request JSON, config.yaml) (import), a campaign TOML (sweep --check) and a
protocol TOML (gate --protocol).  The whole file runs in well under a minute.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from tests.interop.test_guidellm import make_report
from tests.interop.test_vllm_bench import _result as vllm_result
from tests.support.reliability_tools import write_campaign
from tests.support.deadline import alarm_after

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "fixtures" / "runs" / "fixture-s0-fixed_h"
DOC = REPO / "tests" / "report_documents" / "sim_underpowered.audit.json"
PROTOCOL = REPO / "evalkit" / "audit" / "protocols" / "diloco-slo.toml"
DEADLINE_S = 120

HOSTILE_VALUES = ["x", "", [], {}, [1, 2], {"a": []}, None, True, False, 0, -1, 1.5, -1e308,
                  2 ** 70, -(2 ** 63) - 1, 1e300, "../../x.png", "/dev/zero", "A" * 20_000,
                  [[[[[[[[[[[[]]]]]]]]]]]], "$\\foo$", "=HYPERLINK(\"x\")", "\u202e\x00"]


@pytest.fixture(autouse=True)
def deadline_and_log(tmp_path, monkeypatch):
    """A hang fails the test instead of the suite; crash logs stay in tmp_path."""
    monkeypatch.setenv("EVALKIT_LOG_DIR", str(tmp_path / "logs"))

    with alarm_after(DEADLINE_S, f"a reader took more than {DEADLINE_S} s"):
        yield


def _run(args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    said = res.stdout + res.stderr
    assert res.exit_code in (0, 1, 2), (args, res.exit_code, said[-2000:])
    assert "Traceback" not in said and "internal error" not in said, (args, said[-2000:])
    return res


# ------------------------------------------------------------------------ damage

def _paths(node, at=()):
    yield at
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, at + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            yield from _paths(v, at + (i,))


def _with_value(data, rng: random.Random):
    """``data`` with one field (any depth) replaced by a hostile value."""
    data = json.loads(json.dumps(data))
    paths = [p for p in _paths(data) if p]
    if not paths:
        return rng.choice(HOSTILE_VALUES)
    *head, last = rng.choice(paths)
    node = data
    for key in head:
        node = node[key]
    node[last] = rng.choice(HOSTILE_VALUES)
    return data


def _json_text(data, rng: random.Random, kind: int) -> bytes:
    text = json.dumps(data)
    if kind == 0:
        return json.dumps(_with_value(data, rng)).encode()
    if kind == 1:                                          # truncated
        return text.encode()[:rng.randrange(len(text))]
    if kind == 2:                                          # deep nesting
        return ("[" * 100_000 + "]" * 100_000).encode() if rng.random() < 0.5 else \
            ('{"claims": ' * 50_000 + "1" + "}" * 50_000).encode()
    if kind == 3 and isinstance(data, dict) and data:      # a key twice
        key = rng.choice(list(data))
        return ("{" + json.dumps(key) + ": 0, " + text[1:]).encode()
    if kind == 4:                                          # huge / non-finite numbers
        token = rng.choice(["1e999", "NaN", "-Infinity", "9" * 5000, "1" + "0" * 400])
        return text.replace(": 0", ": " + token, 1).replace(": 1", ": " + token, 1).encode()
    raw = bytearray(text.encode())                         # bytes garbage
    for _ in range(rng.randint(1, 20)):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def _special(path: Path, kind: str) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


def _damage_json(path: Path, data, rng: random.Random, case: int) -> None:
    if case % 9 == 8:
        _special(path, ("fifo", "zero", "dir")[case // 9 % 3])
    else:
        path.write_bytes(_json_text(data, rng, case % 6))


def _damage_table(path: Path, rng: random.Random, case: int) -> None:
    table = pq.read_table(path)
    kind = case % 6
    if kind == 0:                                          # a column twice
        col = rng.choice(table.column_names)
        table = pa.Table.from_arrays(table.columns + [table.column(col)],
                                     names=table.column_names + [col])
    elif kind == 1:                                        # a narrow or wrong type
        i = rng.randrange(table.num_columns)
        to = rng.choice([pa.float16(), pa.string(), pa.bool_(), pa.int8(), pa.null()])
        try:
            table = table.set_column(i, table.field(i).name, table.column(i).cast(to))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = table.set_column(i, table.field(i).name,
                                     pa.array(["x"] * table.num_rows))
    elif kind == 2:                                        # a column renamed away
        names = list(table.column_names)
        names[rng.randrange(len(names))] = "renamed"
        table = table.rename_columns(names)
    if kind <= 2:
        pq.write_table(table, path)
        return
    raw = bytearray(path.read_bytes())
    if kind == 3:
        path.write_bytes(bytes(raw[:rng.randrange(len(raw))]))
    elif kind == 4:
        for _ in range(rng.randint(1, 50)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path.write_bytes(bytes(raw))
    else:
        _special(path, rng.choice(["fifo", "zero", "dir"]))


def _damage_toml(path: Path, rng: random.Random, case: int) -> None:
    text = path.read_text()
    kind = case % 7
    lines = text.splitlines()
    if kind == 0:
        out = text[:rng.randrange(len(text))]
    elif kind == 1:                                        # a value of another type
        i = rng.choice([n for n, x in enumerate(lines) if "=" in x])
        key = lines[i].split("=")[0]
        lines[i] = key + "= " + rng.choice(['"x"', "[]", "{}", "true", "-1", "1e308",
                                            "9223372036854775807", "nan", "inf", "[[1], []]",
                                            '"' + "A" * 20_000 + '"'])
        out = "\n".join(lines)
    elif kind == 2:
        out = "a = " + "[" * 100_000 + "]" * 100_000
    elif kind == 3:                                        # a key twice
        i = rng.choice([n for n, x in enumerate(lines) if "=" in x])
        lines.insert(i, lines[i])
        out = "\n".join(lines)
    elif kind == 4:
        out = text.replace("= ", "= 9" + "9" * 400 + " # ", 1)
    elif kind == 5:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 20)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path.write_bytes(bytes(raw))
        return
    else:
        _special(path, rng.choice(["fifo", "zero", "dir"]))
        return
    path.write_text(out)


# ------------------------------------------------------------------------ readers

@pytest.mark.parametrize("case", range(24))
def test_run_files(tmp_path, case):
    rng = random.Random(1000 + case)
    runs = tmp_path / "runs"
    shutil.copytree(RUN, runs / RUN.name)
    if case % 4 == 0:
        _damage_json(runs / RUN.name / "run.json",
                     json.loads((RUN / "run.json").read_text()), rng, case)
    else:                                   # every kind of table damage: case % 6
        _damage_table(runs / RUN.name / rng.choice(["requests.parquet", "merges.parquet"]),
                      rng, case)
    _run(["validate", runs])
    _run(["summarize", runs])
    if case % 5 == 0:
        _run(["audit", runs, "--out", tmp_path / "report"])


@pytest.mark.parametrize("case", range(45))
def test_audit_documents(tmp_path, case):
    rng = random.Random(2000 + case)
    doc = tmp_path / "audit.json"
    _damage_json(doc, json.loads(DOC.read_text()), rng, case)
    _run(["diff", DOC, doc])
    if case % 3 == 0:
        _run(["report", doc, "--out", tmp_path / "out"])
    if case % 9 in (1, 2, 3, 8):                            # fails before the gate audits
        _run(["gate", RUN.parent, "--policy", "fixed_h", "--baseline", doc])


@pytest.mark.parametrize("case", range(18))
def test_import_vllm_bench(tmp_path, case):
    rng = random.Random(3000 + case)
    result = tmp_path / "result.json"
    _damage_json(result, vllm_result(), rng, case)
    _import_vllm(result, tmp_path)


def _import_vllm(result: Path, tmp_path: Path):
    merges = tmp_path / "merges.csv"
    merges.write_text("start_s,end_s\n5.0,13.0\n")
    return _run(["import", "vllm-bench", result, "--out", tmp_path / "runs", "--merges",
                 merges, "--policy", "p", "--seed", "0", "--slo-e2e", "1.2"])


@pytest.mark.parametrize("case", range(18))
def test_import_guidellm(tmp_path, case):
    rng = random.Random(4000 + case)
    report = tmp_path / "benchmarks.json"
    data = make_report(report)
    _damage_json(report, data, rng, case)
    _import_guidellm(report, tmp_path)


def _import_guidellm(report: Path, tmp_path: Path):
    return _run(["import", "guidellm", report, "--out", tmp_path / "runs", "--benchmark",
                 "0", "--role", "no_sync", "--merge-duration", "2", "--policy", "no_sync",
                 "--seed", "0", "--slo-e2e", "1.2"])


AIPERF = REPO / "tests" / "interop" / "fixtures" / "aiperf"
INFERENCE_PERF = REPO / "tests" / "interop" / "fixtures" / "inference_perf"


@pytest.mark.parametrize("case", range(18))
def test_import_aiperf(tmp_path, case):
    rng = random.Random(6000 + case)
    export = tmp_path / "artifacts"
    shutil.copytree(AIPERF, export)
    if case % 2 == 0:
        aggregate = export / "profile_export_aiperf.json"
        _damage_json(aggregate, json.loads(aggregate.read_text()), rng, case)
    elif case % 9 == 8 or case % 4 == 1:                  # the whole records file
        records = export / "profile_export.jsonl"
        first = json.loads(records.read_text().splitlines()[0])
        _damage_json(records, first, rng, case)
    else:                                                 # one record line
        records = export / "profile_export.jsonl"
        lines = records.read_bytes().splitlines()
        i = rng.randrange(len(lines))
        lines[i] = _json_text(json.loads(lines[i]), rng, case % 6).replace(b"\n", b" ")
        records.write_bytes(b"\n".join(lines) + b"\n")
    _import_harness("aiperf", export, tmp_path)


@pytest.mark.parametrize("case", range(18))
def test_import_inference_perf(tmp_path, case):
    rng = random.Random(7000 + case)
    report = tmp_path / "reports"
    shutil.copytree(INFERENCE_PERF, report)
    if case % 3 == 2:
        _damage_yaml(report / "config.yaml", rng, case)
    else:
        per_request = report / "per_request_lifecycle_metrics.json"
        _damage_json(per_request, json.loads(per_request.read_text()), rng, case)
    _import_harness("inference-perf", report, tmp_path, "--tool-version", "0.7.0")


def _damage_yaml(path: Path, rng: random.Random, case: int) -> None:
    text = path.read_text()
    lines = text.splitlines()
    kind = case // 3 % 6
    keyed = [n for n, x in enumerate(lines) if ": " in x]
    if kind == 0:
        out = text[:rng.randrange(len(text))]
    elif kind == 1:                                        # a value of another type
        i = rng.choice(keyed)
        lines[i] = lines[i].split(": ")[0] + ": " + rng.choice(
            ["x", "[]", "{}", "true", "-1", ".nan", "2001-12-14", "!!python/object:os.system",
             "[[1], []]", "A" * 20_000, "9" * 5000])
        out = "\n".join(lines)
    elif kind == 2:
        out = "a: " + "[" * 100_000 + "]" * 100_000
    elif kind == 3:                                        # an alias bomb
        out = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n" + text
    elif kind == 4:                                        # a key twice
        i = rng.choice(keyed)
        lines.insert(i, lines[i])
        out = "\n".join(lines)
    else:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 20)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path.write_bytes(bytes(raw))
        return
    path.write_text(out)


def _import_harness(tool: str, path: Path, tmp_path: Path, *extra):
    return _run(["import", tool, path, "--out", tmp_path / "runs", *extra, "--role",
                 "no_sync", "--merge-duration", "2", "--policy", "no_sync", "--seed", "0",
                 "--slo-e2e", "1.2"])


def test_the_undamaged_harness_exports_are_read(tmp_path):
    """The AIPerf and inference-perf command lines above import the undamaged fixtures."""
    assert _import_harness("aiperf", AIPERF, tmp_path / "a").exit_code == 0
    assert _import_harness("inference-perf", INFERENCE_PERF, tmp_path / "i",
                           "--tool-version", "0.7.0").exit_code == 0


@pytest.mark.parametrize("case", range(21))
def test_campaign_and_protocol_toml(tmp_path, case):
    rng = random.Random(5000 + case)
    campaign = write_campaign(tmp_path)
    _damage_toml(campaign, rng, case)
    _run(["sweep", campaign, "--out", tmp_path / "runs", "--check"])
    protocol = tmp_path / "protocol.toml"
    shutil.copy(PROTOCOL, protocol)
    _damage_toml(protocol, rng, case)
    _gate_protocol(protocol, tmp_path)


def _gate_protocol(protocol: Path, tmp_path: Path):
    return _run(["gate", RUN.parent, "--policy", "fixed_h", "--protocol", protocol,
                 "--baseline", tmp_path / "no-such-audit.json"])


def test_the_undamaged_files_are_read(tmp_path):
    """The command lines above read the files when nothing is damaged: the cases test the
    readers, not a usage error."""
    assert _run(["validate", RUN.parent]).exit_code == 0
    assert _run(["diff", DOC, DOC]).exit_code == 0
    result = tmp_path / "result.json"
    result.write_text(json.dumps(vllm_result()))
    assert _import_vllm(result, tmp_path).exit_code == 0
    report = tmp_path / "benchmarks.json"
    make_report(report)
    assert _import_guidellm(report, tmp_path / "g").exit_code == 0
    campaign = write_campaign(tmp_path)
    res = _run(["sweep", campaign, "--out", tmp_path / "runs", "--check"])
    assert "missing" in res.stdout + res.stderr, res.stdout + res.stderr
    res = _gate_protocol(PROTOCOL, tmp_path)
    assert res.exit_code == 2 and "no such audit file" in res.stderr, res.stderr
