"""CLI commands (replay)."""


def register(cli):
    """Add this module's commands to the top-level group."""
