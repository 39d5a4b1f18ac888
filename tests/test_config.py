"""evalkit.config: one TOML reader for protocols, campaigns and twins -- limits, typed getters,
unknown keys, and every error naming the file, the key and the key's line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.config import find_key_line, parse_config, read_config
from evalkit.errors import InputError
from evalkit.limits import MAX_CONFIG_BYTES, MAX_NESTING, MAX_STRING_CHARS
from evalkit.replay.campaign import load_campaign
from evalkit.replay.traces import generate
from evalkit.replay.backends.sim.twin import Twin, load_twin
from tests.support.reliability_tools import TINY_CAMPAIGN

# ----------------------------------------------------------------------------- key lines

ARRAYS = """top = 1
[[policies]]
name = "wa"
[[policies]]
name = "fixed_h"
params = { H = 3 }
[backend]
name = "sim"
"""


@pytest.mark.parametrize("dotted, line", [
    ("top", 1), ("policies", 2), ("policies.name", 3), ("policies[0].name", 3),
    ("policies[1]", 4), ("policies[1].name", 5), ("policies[1].params.H", 6),
    ("policies[1].params", 6), ("policies[1].missing", 4), ("backend.name", 8),
    ("nowhere", None),
])
def test_key_lines_in_arrays_of_tables(dotted, line):
    assert find_key_line(ARRAYS, dotted) == line


# ----------------------------------------------------------------------------- getters

DOC = """[t]
n = 3
flag = true
word = "x"
bad = inf
"""


def _table():
    doc = parse_config(DOC, file="f.toml")
    return doc.table("t", doc.data["t"])


@pytest.mark.parametrize("call, message, line", [
    (lambda t: t.get("flag", (int,)), "got a boolean", 3),
    (lambda t: t.get("word", (int,)), "expected int, got str", 4),
    (lambda t: t.get("word", (str,), choices=("a", "b")), "invalid value 'x'", 4),
    (lambda t: t.get("gone", (int,)), "required key is missing", 1),
    (lambda t: t.number("bad"), "finite", 5),
    (lambda t: t.number("word"), "must be a number", 4),
    (lambda t: t.number("n", kind=int, positive=True) and t.bounded("n", 3, 4, 9),
     "out of range", 2),
    (lambda t: t.no_unknown({"n", "flag", "word"}), "unknown key", 5),
])
def test_getter_errors_name_file_key_and_line(call, message, line):
    with pytest.raises(InputError, match=message) as info:
        call(_table())
    assert info.value.file == f"f.toml:{line}" and f"(line {line})" in info.value.message
    assert info.value.column.startswith("t.") or info.value.column == "t"


def test_getters_return_good_values():
    t = _table()
    assert t.get("n", (int,)) == 3 and t.get("flag", (bool,)) is True
    assert t.get("gone", (int,), 7) == 7 and t.number("n", kind=int) == 3
    assert t.bounded("n", 3, 3, 3) == 3                      # both ends are inside


def test_syntax_error_names_tomllibs_line(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('a = 1\nb = \nc = 2\n')
    with pytest.raises(InputError, match="not valid TOML") as info:
        read_config(path, what="test file", action="cannot read", missing_fix="x")
    assert info.value.file == f"{path}:2"


# ----------------------------------------------------------------------------- campaigns

TWO_POLICIES = TINY_CAMPAIGN.format(seeds=1, draws=1).replace(
    '[[policies]]\nname = "wa"\n',
    '[[policies]]\nname = "wa"\nlabel = "wa"\n[[policies]]\nname = "{name}"\n'
    'label = "{label}"\nparams = {{ {params} }}\n')


def _lines(text: str, needle: str) -> list[int]:
    return [i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(needle)]


def test_campaign_error_points_at_the_policy_at_fault_not_the_first(tmp_path):
    text = TWO_POLICIES.format(name="fixed_h", label="wa", params="H = 120")
    path = tmp_path / "c.toml"
    path.write_text(text)
    first, second = _lines(text, 'label = "wa"')
    with pytest.raises(InputError, match="invalid or repeated") as info:
        load_campaign(path)
    assert info.value.column == "policies.label"
    assert info.value.file == f"{path}:{second}" and second > first


def test_campaign_policy_parameter_error_names_the_params_line(tmp_path):
    text = TWO_POLICIES.format(name="wa", label="every", params="H = 3")
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(InputError, match="valid parameters") as info:
        load_campaign(path)
    (line,) = _lines(text, "params = { H = 3 }")
    assert info.value.file == f"{path}:{line}"
    assert (info.value.column or "").startswith("policies.every")


def test_campaign_syntax_error_keeps_its_wording_and_names_the_line(tmp_path):
    text = TINY_CAMPAIGN.format(seeds=1, draws=1).replace("e2e_s = 8.0", "e2e_s = ")
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(InputError, match="malformed TOML") as info:
        load_campaign(path)
    assert info.value.file == f"{path}:{_lines(text, 'e2e_s =')[0]}"


# ----------------------------------------------------------------------------- twins
# Twin files used to be read with a bare tomllib.loads: no size, nesting or string bound.

SIM = {"max_batch": 8, "iter_base_s": 0.008, "decode_per_seq_s": 0.001,
       "prefill_base_s": 0.006, "prefill_per_token_s": 5e-5, "train_slowdown": 1.5,
       "merge_slowdown": 1.0, "merge_duration_quantiles": [1.5, 1.55, 1.7],
       "send_lag_quantiles": [0.0, 0.001, 0.01], "response_overhead_s": 0.003,
       "step_s": 0.06}


def _twin_text() -> str:
    return Twin(sim=SIM, source={"regime": "x"}).to_toml()


def _padded_to(text: str, size: int) -> str:
    """``text`` with a trailing comment line that makes it exactly ``size`` bytes."""
    pad = size - len(text.encode()) - 2
    return text + "#" + "x" * pad + "\n"


@pytest.mark.parametrize("extra, accepted", [(0, True), (1, False)])
def test_twin_file_size_bound_at_and_above_the_limit(tmp_path, extra, accepted):
    path = tmp_path / "twin.toml"
    path.write_text(_padded_to(_twin_text(), MAX_CONFIG_BYTES + extra))
    assert path.stat().st_size == MAX_CONFIG_BYTES + extra
    if accepted:
        assert load_twin(path).settings["max_batch"] == 8
    else:
        with pytest.raises(InputError, match=f"{MAX_CONFIG_BYTES:,} bytes"):
            load_twin(path)


def _nested_source(k: int) -> str:
    """A twin whose [source] holds an array ``k`` brackets deep.  Depths: the document 1,
    [source] 2, the arrays 3 .. k + 2, so ``k = MAX_NESTING - 2`` is the deepest allowed."""
    return _twin_text().replace("[source]\n", "[source]\ndeep = " + "[" * k + "]" * k + "\n")


@pytest.mark.parametrize("k, accepted", [(MAX_NESTING - 2, True), (MAX_NESTING - 1, False)])
def test_twin_file_nesting_bound(tmp_path, k, accepted):
    path = tmp_path / "twin.toml"
    path.write_text(_nested_source(k))
    if accepted:
        assert load_twin(path).source["regime"] == "x"
    else:
        with pytest.raises(InputError, match="nested more than"):
            load_twin(path)


def test_twin_file_long_string_is_refused(tmp_path):
    path = tmp_path / "twin.toml"
    path.write_text(_twin_text().replace('regime = "x"',
                                         f'regime = "{"r" * (MAX_STRING_CHARS + 1)}"'))
    with pytest.raises(InputError, match="a string of"):
        load_twin(path)


def test_oversized_or_deep_twin_exits_2_from_the_cli(tmp_path):
    trace = tmp_path / "t.parquet"
    generate("square_wave", seed=1, duration_s=20.0, period_s=10.0, burst_s=3.0,
             phase_s=2.0, quiet_rate=1.5, busy_rate=7.0).write(trace)
    for name, text, said in [("big.toml", _padded_to(_twin_text(), MAX_CONFIG_BYTES + 1),
                              "bytes"),
                             ("deep.toml", _nested_source(MAX_NESTING + 20), "nested")]:
        path = tmp_path / name
        path.write_text(text)
        res = CliRunner().invoke(cli, [
            "replay", "--trace", str(trace), "--out", str(tmp_path / "runs"),
            "--sim-params", str(path), "--policy", "fixed_h", "--param", "H=60", "--seed", "1",
            "--merge-duration-s", "1.5", "--inner-step-s", "0.1", "--h-min", "30",
            "--h-max", "200", "--slo-e2e-s", "0.5"])
        assert res.exit_code == 2 and said in res.output and name in res.output, res.output


def test_twin_setting_error_names_its_line(tmp_path):
    path = tmp_path / "twin.toml"
    text = _twin_text().replace("iter_base_s = 0.008", "iter_base_s = -1.0")
    path.write_text(text)
    with pytest.raises(InputError, match="iter_base_s") as info:
        load_twin(path)
    assert info.value.file == f"{path}:{_lines(text, 'iter_base_s')[0]}"
    assert info.value.column == "sim.iter_base_s"


# ----------------------------------------------------------------------------- sidecar config
# `evalkit serve --config FILE.toml` also read it with a bare tomllib.loads.

def test_sidecar_config_toml_is_read_within_the_bounds(tmp_path):
    from evalkit.replay.backends.sidecar.config import read_config_file

    good = tmp_path / "serve.toml"
    good.write_text('[serve]\nmodel = "tiny"\n')
    assert read_config_file(good) == {"model": "tiny"}
    big = tmp_path / "big.toml"
    big.write_text(_padded_to('model = "tiny"\n', MAX_CONFIG_BYTES + 1))
    with pytest.raises(InputError, match=f"{MAX_CONFIG_BYTES:,} bytes"):
        read_config_file(big)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5) + "\n")
    with pytest.raises(InputError, match="nested more than"):
        read_config_file(deep)
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "tiny"\ndevice = \n')
    with pytest.raises(InputError, match="cannot parse the config file") as info:
        read_config_file(bad)
    assert info.value.file == f"{bad}:2"
