"""CLI commands (audit)."""


def register(cli):
    """Add this module's commands to the top-level group."""
