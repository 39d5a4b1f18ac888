"""Data model and I/O: the run-log format every other layer reads and writes."""
