"""Kept for existing imports: the module is :mod:`evalkit.replay.backends.sim.model`."""

from evalkit.replay.backends.sim.model import *  # noqa: F401,F403
