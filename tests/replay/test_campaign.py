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


def test_a_sequential_first_look_is_read_and_frozen_into_the_plan_only_when_set(tmp_path):
    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.plan import plan_from_campaign
    from tests.audit.test_sequential_gate import CAMPAIGN

    proto = load_protocol(None)
    (tmp_path / "a.toml").write_text(CAMPAIGN)
    plain = load_campaign(tmp_path / "a.toml")
    assert "first_look" not in plain.design          # a plan frozen before it keeps its bytes
    assert "first_look" not in plan_from_campaign(plain, proto)["design"]
    (tmp_path / "b.toml").write_text(CAMPAIGN.replace("batch = 2", "batch = 1\nfirst_look = 4"))
    looked = load_campaign(tmp_path / "b.toml")
    assert looked.design["first_look"] == 4
    assert plan_from_campaign(looked, proto)["design"]["first_look"] == 4
    for bad in ("first_look = 1", "first_look = 13", "first_look = 4.5"):
        (tmp_path / "c.toml").write_text(CAMPAIGN.replace("batch = 2", f"batch = 2\n{bad}"))
        with pytest.raises(InputError) as err:
            load_campaign(tmp_path / "c.toml")
        assert "first_look" in str(err.value.column)


def test_a_sequential_futility_rule_is_read_and_frozen_into_the_plan_only_when_set(tmp_path):
    from evalkit.audit.protocol import load_protocol
    from evalkit.replay.plan import plan_from_campaign
    from tests.audit.test_sequential_gate import CAMPAIGN

    proto = load_protocol(None)
    (tmp_path / "a.toml").write_text(CAMPAIGN)
    plain = load_campaign(tmp_path / "a.toml")
    assert "futility" not in plan_from_campaign(plain, proto)["design"]   # "zero", unwritten
    for rule in ("zero", "rising"):
        (tmp_path / "b.toml").write_text(CAMPAIGN.replace("batch = 2",
                                                          f'batch = 2\nfutility = "{rule}"'))
        assert plan_from_campaign(load_campaign(tmp_path / "b.toml"), proto)["design"][
            "futility"] == rule
    for bad in ('futility = "falling"', "futility = 0", 'futility = ["rising"]'):
        (tmp_path / "c.toml").write_text(CAMPAIGN.replace("batch = 2", f"batch = 2\n{bad}"))
        with pytest.raises(InputError, match="unknown futility rule") as err:
            load_campaign(tmp_path / "c.toml")
        assert "futility" in str(err.value.column) and "rising" in err.value.fix
    fixed = CAMPAIGN.replace('kind = "sequential"', 'kind = "fixed"')
    fixed = "\n".join(line for line in fixed.splitlines()
                      if not line.startswith(("max_seeds", "batch")))
    (tmp_path / "d.toml").write_text(fixed.replace('kind = "fixed"',
                                                   'kind = "fixed"\nfutility = "rising"'))
    with pytest.raises(InputError, match="futility applies to sequential designs only"):
        load_campaign(tmp_path / "d.toml")
