"""Kept for existing imports: the module is :mod:`evalkit.replay.backends.sim.fit_check`."""

from evalkit.replay.backends.sim.fit_check import *  # noqa: F401,F403
