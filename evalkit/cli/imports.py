"""CLI commands (imports)."""


def register(cli):
    """Add this module's commands to the top-level group."""
