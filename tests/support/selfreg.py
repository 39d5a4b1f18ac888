"""The bundled protocol with self-registration allowed, for tests about the machinery of tiers
above ``matched_budget`` on self-registered fixture campaigns (the bundled protocol stops
those at ``matched_budget``: its ``registration`` check needs the reviewer's challenge)."""

from __future__ import annotations

from pathlib import Path

from evalkit.audit.protocol import load_protocol

__all__ = ["SELFREG_PROTOCOL", "selfreg_protocol"]

SELFREG_PROTOCOL = Path(__file__).resolve().parent / "protocol_files" / "diloco-slo-selfreg.toml"


def selfreg_protocol():
    """The bundled ``diloco-slo`` rules with ``allow_self_registered = true``."""
    return load_protocol(SELFREG_PROTOCOL)
