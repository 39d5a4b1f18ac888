"""Command-line interface: one module per command group, all registered in :mod:`main`."""
