"""Kept for existing imports: the module is :mod:`evalkit.replay.backends.sim.twin`."""

from evalkit.replay.backends.sim.twin import *  # noqa: F401,F403
