"""The bundled protocol, loaded once: what the CLI freezes a fresh sweep's plan under, passed
to :func:`evalkit.replay.sweep.run_campaign`, :func:`evalkit.replay.plan.freeze_plan` and
:func:`evalkit.replay.plan.directory_plan` by the tests (the replay reads no protocol itself)."""

from __future__ import annotations

from evalkit.audit.protocol import load_protocol

__all__ = ["BUNDLED"]

BUNDLED = load_protocol(None)
