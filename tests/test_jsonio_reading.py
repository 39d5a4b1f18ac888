"""The one JSON front door (evalkit.jsonio.read_json / loads_json): every failure is an
InputError naming the file; nothing reaches the recursive parser nested beyond the bound."""

from __future__ import annotations

import json
import os

import pytest

from evalkit import jsonio
from evalkit.errors import InputError
from evalkit.jsonio import loads_json, nesting_depth, read_json
from evalkit.limits import MAX_JSON_NESTING
from tests.support.deadline import alarm_after


def _refused(raw, words, **kw):
    with pytest.raises(InputError) as err:
        loads_json(raw, file="x.json", **kw)
    assert words in err.value.message and err.value.file == "x.json", err.value.format()
    return err.value


def test_depth_is_refused_before_the_parser_runs(monkeypatch):
    def parser_called(*_a, **_k):
        raise AssertionError("the parser saw text nested beyond the bound")

    monkeypatch.setattr(jsonio.json, "loads", parser_called)
    for raw in ("[" * 100_000, '{"a":' * 100_000, "[" * (MAX_JSON_NESTING + 1)):
        _refused(raw, "nested too deeply")


def test_the_depth_bound_is_exact_and_strings_do_not_count():
    ok = "[" * MAX_JSON_NESTING + "]" * MAX_JSON_NESTING
    assert loads_json(ok, file="x.json") is not None
    _refused("[" + ok + "]", f"({MAX_JSON_NESTING + 1} levels)")
    quoted = json.dumps(["[" * 1000, '\\"[{' * 500])
    assert loads_json(quoted, file="x.json")[0] == "[" * 1000
    assert nesting_depth(b'{"a": "]]]", "b": [[{"c": "\\"[["}]]}') == 4


def test_large_inputs_are_measured_the_same_way():
    # over 65,536 brackets the count runs in numpy: same answer as the small path
    assert nesting_depth(b"[]" * 50_000) == 1
    assert nesting_depth(b"[" * 70_000 + b"]" * 70_000) == 70_000
    assert nesting_depth(b"[[" + b"[]," * 40_000 + b"[[[]]]]]") == 5


def test_a_duplicate_key_is_refused_and_named_at_any_depth():
    err = _refused('{"policy": "a", "policy": "b"}', "'policy' appears twice")
    assert err.column == "policy"
    assert _refused('{"x": [{"seed": 1, "d": 2, "seed": 3}]}', "twice").column == "seed"
    assert loads_json('{"a": {"b": 1}, "c": {"b": 2}}', file="x.json")["c"] == {"b": 2}


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
def test_non_finite_numbers_are_refused_unless_the_format_allows_them(token):
    _refused(f'{{"alpha": {token}}}', f"the number {token} is not allowed")
    value = loads_json(f'{{"alpha": {token}}}', file="x.json", nonfinite=True)["alpha"]
    assert value != value or abs(value) == float("inf")


@pytest.mark.parametrize("raw, words", [
    ('{"a": 1,}', "not valid JSON (Expecting property name enclosed in double quotes at line 1"),
    ("", "not valid JSON"),
    (b"\xff\xfe[]", "not UTF-8"),
    ("1" * 5000, "cannot be read as JSON"),
])
def test_bad_text_is_an_input_error(raw, words):
    _refused(raw, words)


@pytest.fixture
def deadline():
    with alarm_after(20, "a special file blocked read_json"):
        yield


def test_read_json_refuses_special_files_without_blocking(tmp_path, deadline):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for path, said in ((fifo, "a FIFO"), (zero, "a character device"),
                       (tmp_path, "a directory")):
        with pytest.raises(InputError, match=said) as err:
            read_json(path, limit=1 << 20, what="the audit")
        assert err.value.file == str(path)


def test_read_json_bounds_the_bytes_and_names_a_missing_file(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"a": "x" * 100}))
    assert read_json(path, limit=200)["a"] == "x" * 100
    with pytest.raises(InputError, match="holds more than 50 bytes"):
        read_json(path, limit=50)
    with pytest.raises(InputError, match="the plan not found"):
        read_json(tmp_path / "missing.json", limit=50, what="the plan")


# ------------------------------------------------------------ the other JSON readers

DEEP = "[" * 100_000 + "]" * 100_000


def test_trace_readers_refuse_deep_json_and_duplicate_keys(tmp_path):
    from evalkit.replay.traces.readers import read_mooncake, read_vllm_bench

    bench = tmp_path / "bench.json"
    bench.write_text(DEEP)
    with pytest.raises(InputError, match="nested too deeply"):
        read_vllm_bench(bench)
    lines = tmp_path / "trace.jsonl"
    lines.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
                     '{"timestamp": 1, "timestamp": 2, "input_length": 1, "output_length": 1}\n')
    with pytest.raises(InputError, match="'timestamp' appears twice"):
        read_mooncake(lines)
    lines.write_text(DEEP + "\n")
    with pytest.raises(InputError, match="nested too deeply"):
        read_mooncake(lines)


def test_trace_metadata_and_lock_files_are_read_through_the_front_door(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalkit.replay.storelock import read_holder
    from evalkit.replay.traces.model import META_KEY, read_trace

    trace = tmp_path / "t.parquet"
    table = pa.table({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]})
    pq.write_table(table.replace_schema_metadata({META_KEY: DEEP.encode()}), trace)
    with pytest.raises(InputError, match="nested too deeply"):
        read_trace(trace)
    lock = tmp_path / ".lock"
    lock.write_text(DEEP)
    assert read_holder(lock).pid is None                  # unreadable holder, no crash
    lock.write_text('{"pid": 1, "pid": 2}')
    assert read_holder(lock).pid is None                  # ambiguous: not trusted


def test_a_json_serve_config_is_read_through_the_front_door(tmp_path, deadline):
    from evalkit.replay.backends.sidecar.config import read_config_file

    path = tmp_path / "serve.json"
    path.write_text('{"serve": {"model": "tiny"}}')
    assert read_config_file(path) == {"model": "tiny"}
    for text, words in ((DEEP, "nested too deeply"), ('{"model": "a", "model": "b"}', "twice"),
                        ('{"max_batch": NaN}', "NaN is not allowed")):
        path.write_text(text)
        with pytest.raises(InputError, match=words):
            read_config_file(path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputError, match="a FIFO"):
        read_config_file(path)
