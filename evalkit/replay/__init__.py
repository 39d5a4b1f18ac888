"""evalkit.replay."""
