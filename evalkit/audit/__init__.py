"""evalkit.audit."""
