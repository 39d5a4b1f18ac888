"""evalkit.replay.traces."""
