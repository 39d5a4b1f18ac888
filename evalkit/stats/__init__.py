"""evalkit.stats."""
