"""Kept for existing imports: the module is :mod:`evalkit.replay.backends.sim.fit_predictive`."""

from evalkit.replay.backends.sim.fit_predictive import *  # noqa: F401,F403
