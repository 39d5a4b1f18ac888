"""Data model and I/O: the run-log format every other layer reads and writes."""

from evalkit.runlog.io import Run, iter_run_dirs, read_meta, read_run, read_table, write_run
from evalkit.runlog.schema import SCHEMA_VERSION

__all__ = ["Run", "SCHEMA_VERSION", "iter_run_dirs", "read_meta", "read_run", "read_table",
           "write_run"]
