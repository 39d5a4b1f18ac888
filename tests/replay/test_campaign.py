"""load_campaign: a missing or oversized campaign file is an input error naming it."""

from __future__ import annotations

import pytest

from evalkit.errors import InputError
from evalkit.limits import MAX_CONFIG_BYTES
from evalkit.replay.campaign import load_campaign
from tests.support.reliability_tools import write_campaign


def test_a_missing_campaign_file_names_it(tmp_path):
    with pytest.raises(InputError, match="campaign file not found") as exc:
        load_campaign(tmp_path / "nope.toml")
    assert exc.value.file == str(tmp_path / "nope.toml")


@pytest.mark.parametrize("extra, accepted", [(0, True), (1, False)])
def test_a_campaign_file_at_the_size_limit_loads_and_one_byte_over_is_refused(tmp_path, extra,
                                                                              accepted):
    path = write_campaign(tmp_path)
    text = path.read_text()
    path.write_text(text + "#" * (MAX_CONFIG_BYTES + extra - len(text.encode()) - 1) + "\n")
    assert path.stat().st_size == MAX_CONFIG_BYTES + extra
    if accepted:
        assert load_campaign(path).regime
    else:
        with pytest.raises(InputError, match=f"campaign file holds more than "
                                             f"{MAX_CONFIG_BYTES:,} bytes"):
            load_campaign(path)
