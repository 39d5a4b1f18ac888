"""Sizes a campaign implies are bounded when it is read: inner steps and merges per run.

``inner_step_s = 1e-6`` with an explicit corridor used to load and then fail allocating
5.36 GiB of inner steps; ``1e-309`` raised OverflowError (exit 3).  Both are exit 2 naming
the key, before anything is allocated; each bound is tested at, just below and above it.
"""

from __future__ import annotations

import math

import pytest

from evalkit.errors import InputError
from evalkit.limits import MAX_INNER_STEPS, MAX_MERGES
from evalkit.replay.campaign import load_campaign
from tests.support.reliability_tools import TINY_CAMPAIGN

HORIZON = 240.0


def _campaign(tmp_path, **top) -> str:
    text = TINY_CAMPAIGN.format(seeds=1, draws=0)
    for key, value in top.items():
        text = "\n".join(line for line in text.splitlines() if not line.startswith(f"{key} "))
        text = f"{key} = {value}\n" + text
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


CORRIDOR = {"h_min": 1, "h_max": 1, "min_gap_s": 10.0, "max_gap_s": 20.0}


@pytest.mark.parametrize("step", ["1e-6", "1e-309", "5e-324"])
def test_a_tiny_inner_step_is_exit_2_naming_the_key(tmp_path, step):
    path = _campaign(tmp_path, inner_step_s=step, **CORRIDOR)
    with pytest.raises(InputError, match="inner steps per run") as info:
        load_campaign(path)
    assert info.value.column == "inner_step_s" and f"{MAX_INNER_STEPS:,}" in info.value.fix
    from click.testing import CliRunner

    from evalkit.cli.main import cli

    res = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(tmp_path / "runs"),
                                   "--check"])
    assert res.exit_code == 2 and "inner_step_s" in res.stderr, res.output
    assert "OverflowError" not in res.output and "internal error" not in res.output


def test_the_inner_step_bound_at_just_below_and_above(tmp_path):
    at = HORIZON / MAX_INNER_STEPS                     # exactly MAX_INNER_STEPS steps
    load_campaign(_campaign(tmp_path, inner_step_s=repr(at), **CORRIDOR))
    load_campaign(_campaign(tmp_path, inner_step_s=repr(at * 1.01), **CORRIDOR))
    with pytest.raises(InputError, match=f"{MAX_INNER_STEPS * 1.01:,.0f}"[:5]):
        load_campaign(_campaign(tmp_path, inner_step_s=repr(at / 1.01), **CORRIDOR))


def test_a_backend_step_override_is_bounded_too(tmp_path):
    path = _campaign(tmp_path)
    path.write_text(path.read_text() + '[backend]\nname = "sim"\n[backend.config]\n'
                    "step_s = 1e-7\n")
    with pytest.raises(InputError, match="inner steps per run") as info:
        load_campaign(path)
    assert info.value.column == "backend.config.step_s"


def test_h_max_is_bounded(tmp_path):
    load_campaign(_campaign(tmp_path, h_max=MAX_INNER_STEPS, max_gap_s=1e9))
    with pytest.raises(InputError, match="h_max") as info:
        load_campaign(_campaign(tmp_path, h_max=MAX_INNER_STEPS + 1, max_gap_s=1e9))
    assert info.value.column == "h_max"


def test_merges_per_run_are_bounded_naming_the_gap_key(tmp_path):
    gap = HORIZON / MAX_MERGES                        # exactly MAX_MERGES merges
    ok = {"merge_duration_s": repr(gap / 2), "inner_step_s": "0.0001", "h_min": 1, "h_max": 1,
          "max_gap_s": 1.0}
    load_campaign(_campaign(tmp_path, min_gap_s=repr(gap), **ok))
    load_campaign(_campaign(tmp_path, min_gap_s=repr(gap * 1.01), **ok))
    with pytest.raises(InputError, match="merges per run") as info:
        load_campaign(_campaign(tmp_path, min_gap_s=repr(gap / 1.01), **ok))
    assert info.value.column == "min_gap_s"
    # without min_gap_s the gap is h_min x inner_step_s: h_min is the key to raise
    derived = dict(ok, inner_step_s=repr(gap / 1.01 / 5), h_min=5, h_max=5)
    derived.pop("max_gap_s")
    with pytest.raises(InputError, match="merges per run") as info:
        load_campaign(_campaign(tmp_path, **derived))
    assert info.value.column == "h_min"
    assert math.isfinite(gap)


def test_readme_states_these_limits_and_the_lock_rules():
    from pathlib import Path

    from evalkit.limits import MAX_HORIZON_S, MAX_LOG_TIME_S, MAX_TOKENS
    from evalkit.replay.storelock import HEARTBEAT_S, STALE_AFTER_S

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Reliability"):readme.index("## The run-log format")]
    flat = " ".join(section.split())
    for words in (f"{MAX_INNER_STEPS:,} inner steps", f"{MAX_MERGES:,} merges",
                  f"[0, {MAX_LOG_TIME_S:,.0f} s]", f"{MAX_HORIZON_S / 86400:.0f} days",
                  f"every {HEARTBEAT_S:.0f} s", f"within {STALE_AFTER_S / 60:.0f} minutes",
                  "never taken over on a guess", "--break-lock"):
        assert words in flat, words
    assert MAX_TOKENS == 2 ** 32 and "[0, 2**32] per request" in flat
