"""An InputError about a command-line option names the option, not a column or key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalkit.audit.result import find_claim
from evalkit.errors import InputError


def test_an_option_is_named_as_an_option_and_a_column_as_a_column_or_key():
    option = InputError("must be >= 1", column="--draws", fix="e.g. --draws 1,2")
    assert option.format() == "option --draws: must be >= 1 (fix: e.g. --draws 1,2)"
    assert str(option) == option.format() and option.column == "--draws"
    column = InputError("not a number", file="t.csv", column="seed", fix="use integers")
    assert column.format() == "t.csv: column/key 'seed': not a number (fix: use integers)"


CLAIMS = [SimpleNamespace(policy="wa", regime="r1"), SimpleNamespace(policy="wa", regime="r2")]


@pytest.mark.parametrize("options, policy_key, regime_key", [(True, "--policy", "--regime"),
                                                             (False, "policy", "regime")])
def test_a_claim_looked_up_from_the_command_line_names_the_options(options, policy_key,
                                                                   regime_key):
    with pytest.raises(InputError) as none:
        find_claim(CLAIMS, "nosuch", options=options)
    assert none.value.column == policy_key and "r1/wa, r2/wa" in none.value.fix
    with pytest.raises(InputError) as several:
        find_claim(CLAIMS, "wa", options=options)
    assert several.value.column == regime_key and "--regime" in several.value.fix
    if options:
        assert none.value.format().startswith("option --policy: no claim for policy 'nosuch'")
        assert several.value.format().startswith("option --regime: policy 'wa' has claims")
