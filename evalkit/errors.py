"""Errors that describe bad input in terms a user can act on.

Every error raised for bad input is an :class:`InputError`: it names the file (or
run), the column or key at fault, and a fix.  The CLI turns it into exit code 2.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a file, column or parameter that cannot be used as given."""

    def __init__(self, message: str, *, file: str | None = None, column: str | None = None,
                 fix: str | None = None):
        self.message = message
        self.file = None if file is None else str(file)
        self.column = column
        self.fix = fix
        super().__init__(self.format())

    def format(self) -> str:
        parts = []
        if self.file:
            parts.append(f"{self.file}")
        if self.column:
            parts.append(f"column/key '{self.column}'")
        where = (": ".join(parts) + ": ") if parts else ""
        text = f"{where}{self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class NotEstimable(InputError):
    """A quantity cannot be estimated from the data given (e.g. constant Φ for ψ)."""
