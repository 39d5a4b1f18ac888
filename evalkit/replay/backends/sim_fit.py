"""Kept for existing imports: the module is :mod:`evalkit.replay.backends.sim.fit`."""

from evalkit.replay.backends.sim.fit import *  # noqa: F401,F403
