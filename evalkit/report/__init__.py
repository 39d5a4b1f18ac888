"""evalkit.report."""
