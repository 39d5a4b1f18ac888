"""evalkit.replay.backends."""
