"""The per-run summary-table reader lives in :mod:`evalkit.runlog.table` (a file format);
this name stays importable."""

from evalkit.runlog.table import (OPTIONAL, PASSTHROUGH, REQUIRED, TEXT_PASSTHROUGH,
                                  is_summary_table, read_summary_table)

__all__ = ["OPTIONAL", "PASSTHROUGH", "REQUIRED", "TEXT_PASSTHROUGH", "is_summary_table",
           "read_summary_table"]
