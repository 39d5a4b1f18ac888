"""evalkit.replay.policies."""
