"""Tables written as CSV for people to open: no cell can be a live spreadsheet formula.

Policy names, run ids and reasons come from run logs and may begin with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return, which Excel, LibreOffice and Google Sheets read as the
start of a formula (``=HYPERLINK(...)``).  As OWASP's advice on CSV injection has it, such a
text cell is written with a single quote in front (``'=HYPERLINK(...)``), which the
spreadsheet shows as text; quotes and separators inside a cell are quoted by the CSV writer.
Numbers stay numbers (a negative number is not text and keeps its sign).  Rows end in CRLF
(RFC 4180): the writer quotes a cell holding either line-break character, so a carriage
return inside a name cannot split its row.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["to_csv"]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(value):
    """``value`` with a single quote in front when it is text a spreadsheet would evaluate."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def inert_table(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose text cells and column names are :func:`inert_cell`."""
    out = df.copy()
    for col in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[col])
                or pd.api.types.is_datetime64_any_dtype(out[col])):
            out[col] = out[col].map(inert_cell)
    out.columns = [inert_cell(c) for c in out.columns]
    return out


def to_csv(df: pd.DataFrame, path=None):
    """The one CSV writer of tables for people: ``df`` (index left out) as inert cells, to
    ``path``, or returned as text when ``path`` is None."""
    return inert_table(df).to_csv(path, index=False, lineterminator="\r\n")
