"""Summary-table CSVs written for the tests of reading summary tables and assembling campaigns."""

from __future__ import annotations


# =========================================================================== summary tables

def write_csv(tmp_path, text, name="t.csv", one_draw_a_row=True):
    """The table as a CSV; ``one_draw_a_row``: add draws_per_row = 1 to every row (each row is
    one replayed run), which a table with single matched-random rows must state."""
    if one_draw_a_row and "draws_per_row" not in text.split("\n", 1)[0]:
        lines = text.split("\n")
        lines = [lines[0] + ",draws_per_row"] + [ln + ",1" if ln else ln for ln in lines[1:]]
        text = "\n".join(lines)
    path = tmp_path / name
    path.write_text(text)
    return path
