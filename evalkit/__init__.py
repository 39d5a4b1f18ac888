"""evalkit: audit claimed serving-SLO improvements of training-sync schedulers."""

__version__ = "0.1.0"
