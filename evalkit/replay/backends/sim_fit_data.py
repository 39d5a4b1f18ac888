"""Kept for existing imports: the module is :mod:`evalkit.replay.backends.sim.fit_data`."""

from evalkit.replay.backends.sim.fit_data import *  # noqa: F401,F403
