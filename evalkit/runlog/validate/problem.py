"""One problem found in a run store, and the value predicates the rules share."""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.errors import InputError

__all__ = ["Problem"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run (or with RUNS_DIR as a whole)."""

    run: str
    file: str | None
    column: str | None
    message: str
    fix: str
    severity: str = "error"      # "error" | "warning"
    kind: str = "format"         # "format" | "scale" | "incomplete" | "layout" | "unreadable"

    def as_error(self) -> InputError:
        return InputError(f"run {self.run}: {self.message}", file=self.file,
                          column=self.column, fix=self.fix)

    def format(self) -> str:
        label = "EXCLUDED" if self.kind == "incomplete" else self.severity.upper()
        where = [f"run={self.run}"]
        if self.file:
            where.append(f"file={self.file}")
        if self.column:
            where.append(f"column={self.column}")
        return f"{label:8s} {' '.join(where)}: {self.message} (fix: {self.fix})"



def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _nonempty_str(x) -> bool:
    return isinstance(x, str) and bool(x.strip())
