"""The test copy of the bundled protocol that allows self-registration differs from the bundled
one in that one key only, and the bundled one lists the registration check."""

from __future__ import annotations

from importlib import resources

from evalkit.audit.protocol import load_protocol
from tests.support.selfreg import SELFREG_PROTOCOL, selfreg_protocol


def _rules(text: str) -> list[str]:
    lines = [ln.split("#", 1)[0].rstrip() for ln in text.splitlines()]
    return [ln for ln in lines if ln]


def test_selfreg_copy_is_the_bundled_protocol_but_allow_self_registered():
    bundled = resources.files("evalkit.audit.protocols").joinpath("diloco-slo.toml").read_text()
    mine, theirs = _rules(SELFREG_PROTOCOL.read_text()), _rules(bundled)
    differ = [(a, b) for a, b in zip(mine, theirs) if a != b]
    assert len(mine) == len(theirs)
    assert differ == [("allow_self_registered = true", "allow_self_registered = false")]


def test_bundled_protocol_caps_self_registered_campaigns():
    bundled = load_protocol()
    tier = next(t for t in bundled.tiers if t.name == "placement_gain")
    assert "registration" in tier.checks
    assert bundled.checks["registration"]["allow_self_registered"] is False
    assert selfreg_protocol().checks["registration"]["allow_self_registered"] is True
