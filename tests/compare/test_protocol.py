"""The comparison protocol as data: the default loads, and every bad key is named with its
line and a fix."""

from __future__ import annotations

import pytest

from evalkit.compare.protocol import Amount, load_protocol, parse_amount
from evalkit.errors import InputError

GOOD = """name = "team"
version = 2
alpha = 0.1

[slo]
e2e_s = 2.0

[[claims]]
metric = "ttft_p90"
direction = "lower"
margin = "3%"
max_regression = 0.02
"""


def test_default_protocol_claims_every_metric_family():
    p = load_protocol()
    assert p.name == "serving-ab" and p.alpha == 0.05
    assert {c.metric for c in p.claims} >= {"violation_rate", "goodput", "ttft_p99"}


def test_a_team_protocol_is_read(tmp_path):
    path = tmp_path / "team.toml"
    path.write_text(GOOD)
    p = load_protocol(path)
    assert p.slo == {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None}
    (claim,) = p.claims
    assert claim.margin == Amount(3.0, True) and claim.max_regression == Amount(0.02, False)
    assert claim.margin.absolute(2.0) == pytest.approx(0.06)


@pytest.mark.parametrize("change, key, words", [
    (('direction = "lower"', 'direction = "higher"'), "claims.direction", "lower is better"),
    (('metric = "ttft_p90"', 'metric = "ttft_p95"'), "claims.metric", "invalid value"),
    (('margin = "3%"', 'margin = "3 percent"'), "claims.margin", "neither a number"),
    (('margin = "3%"', 'margin = -1'), "claims.margin", ">= 0"),
    (('alpha = 0.1', 'alpha = 0.7'), "alpha", "out of range"),
    (('version = 2', 'version = 2\ncolour = "red"'), "colour", "unknown key"),
])
def test_bad_protocol_keys_are_named(tmp_path, change, key, words):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(*change))
    with pytest.raises(InputError) as err:
        load_protocol(path)
    assert err.value.column == key and words in err.value.message
    assert str(path) in err.value.file and err.value.fix


def test_a_metric_claimed_twice_is_refused(tmp_path):
    path = tmp_path / "twice.toml"
    path.write_text(GOOD + GOOD[GOOD.index("[[claims]]"):])
    with pytest.raises(InputError, match="claimed twice"):
        load_protocol(path)


@pytest.mark.parametrize("raw, expected", [("5%", Amount(5.0, True)), (0.01, Amount(0.01, False)),
                                           ("0.5", Amount(0.5, False))])
def test_amounts(raw, expected):
    assert parse_amount(raw, what="--margin") == expected


@pytest.mark.parametrize("raw", ["-1", "abc", float("nan"), True])
def test_bad_amounts_name_the_option(raw):
    with pytest.raises(InputError) as err:
        parse_amount(raw, what="--margin")
    assert err.value.column == "--margin"
