"""Comparison protocols shipped with evalkit (TOML data files)."""
