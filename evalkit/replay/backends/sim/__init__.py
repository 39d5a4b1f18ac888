"""The simulator and its twin: the ``sim`` backend and the fit of its settings to real runs.

- :mod:`.model`: ``SimConfig``, the engine's settings and their defaults;
- :mod:`.engine`: the event loop (``replay``, the backend entry point, bound here);
- :mod:`.fit_data`, :mod:`.fit`, :mod:`.fit_check`, :mod:`.fit_predictive`: real runs, the
  fit, its held-out and predictive checks (``evalkit sim fit``);
- :mod:`.twin`: the twin file the fit writes and ``--sim-params`` reads.

The backend registry names this package (``--backend sim``): a backend is a module with
``replay(spec, trace, policy, *, progress=None)``.
"""

# the runner loads a backend by package name and calls its ``replay``
from evalkit.replay.backends.sim.engine import replay

__all__ = ["replay"]
