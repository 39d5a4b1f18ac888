"""Keeping freed heap memory is set once per process."""

from __future__ import annotations

from evalkit.heap import keep_freed_memory


def test_keeping_freed_memory_is_set_once():
    first = keep_freed_memory()
    assert isinstance(first, bool) and keep_freed_memory() is first
