"""Generate the machine-readable schemas and FORMAT.md's tables from :mod:`schema`.

``python -m evalkit.runlog.export`` rewrites ``schemas/run.schema.json``,
``schemas/<table>.arrow.json`` and the generated blocks of ``FORMAT.md`` (between
``<!-- BEGIN GENERATED: name -->`` and ``<!-- END GENERATED: name -->``); ``--check``
exits 1 when any of them differs from what the definitions give.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from evalkit.runlog import codes, schema

__all__ = ["FORMAT_MD", "SCHEMA_DIR", "arrow_schema", "main", "stale"]

HERE = Path(__file__).resolve().parent
SCHEMA_DIR = HERE / "schemas"
FORMAT_MD = HERE / "FORMAT.md"
_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (\S+) -->\n)(.*?)(<!-- END GENERATED: \2 -->)",
                    re.S)


# ----------------------------------------------------------------------------- JSON Schema

def _key_schema(key: schema.MetaKey) -> dict:
    out: dict = {"type": list(key.types) if len(key.types) > 1 else key.types[0],
                 "description": key.doc + (f" [{key.unit}]" if key.unit else "")}
    for attr, name in (("enum", "enum"), ("minimum", "minimum"),
                       ("exclusive_minimum", "exclusiveMinimum"), ("min_length", "minLength")):
        value = getattr(key, attr)
        if value is not None:
            out[name] = list(value) if attr == "enum" else value
    if key.enum is not None and "null" in key.types:
        out["enum"] = [*key.enum, None]
    if key.keys:
        out["properties"] = {k.name: _key_schema(k) for k in key.keys}
        out["required"] = [k.name for k in key.keys if k.required]
    return out


def run_json_schema() -> dict:
    """JSON Schema (2020-12) of run.json; unknown keys are allowed (writers may add notes)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"evalkit-run-v{schema.SCHEMA_VERSION}.schema.json",
        "title": f"evalkit run.json, format version {schema.SCHEMA_VERSION}",
        "description": "Generated from evalkit/runlog/schema.py; see FORMAT.md section 3.",
        "type": "object",
        "required": list(schema.REQUIRED_META),
        "properties": {k.name: _key_schema(k) for k in schema.META_KEYS},
        "allOf": [
            {"if": {"properties": {"role": {"const": "matched_random"}},
                    "required": ["role"]},
             "then": {"properties": {"draw": {"type": "integer"},
                                     "matched_to": {"type": "string"}}},
             "else": {"properties": {"draw": {"type": "null"},
                                     "matched_to": {"type": "null"}}}},
            {"if": {"properties": {"role": {"const": "no_sync"}}, "required": ["role"]},
             "then": {"properties": {"policy": {"const": "no_sync"},
                                     "oracle": {"const": False}}}},
        ],
    }


# ----------------------------------------------------------------------------- Arrow

def _column(col: schema.Column, required: bool) -> dict:
    return {"name": col.name, "type": schema.ARROW_TYPES[col.kind], "nullable": col.nullable,
            "required": required, "unit": col.unit, "doc": col.doc}


def arrow_schema_doc(table: str) -> dict:
    """The Arrow schema of one table as JSON: required fields, then optional extras."""
    return {"table": table, "file": f"{table}.parquet",
            "format_version": schema.SCHEMA_VERSION,
            "required_table": table in schema.REQUIRED_TABLES,
            "fields": [_column(c, True) for c in schema.TABLES[table]]
            + [_column(c, False) for c in schema.OPTIONAL_COLUMNS.get(table, ())],
            "extra_columns": "allowed, ignored by readers"}


def arrow_schema(table: str):
    """The same as a ``pyarrow.Schema`` (the schema-defined fields only)."""
    import pyarrow as pa
    types = {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(),
             "string": pa.string()}
    return pa.schema([pa.field(c.name, types[schema.ARROW_TYPES[c.kind]], c.nullable)
                      for c in schema.TABLES[table]])


# ----------------------------------------------------------------------------- FORMAT.md

def _types(key: schema.MetaKey) -> str:
    return " \\| ".join(key.types)


def _meta_rows(keys, prefix="") -> list[str]:
    rows = []
    for k in keys:
        rows.append(f"| `{prefix}{k.name}` | {_types(k)} | {k.unit or ''} | "
                    f"{'required' if k.required else 'optional'} | {k.check} | {k.doc} |")
        rows.extend(_meta_rows(k.keys, f"{prefix}{k.name}."))
    return rows


def _meta_table() -> str:
    head = ["| key | JSON type | unit | | value rule | meaning |", "|---|---|---|---|---|---|"]
    return "\n".join(head + _meta_rows(schema.META_KEYS)) + "\n"


def _table_md(table: str) -> str:
    lines = ["| column | Arrow type | unit | nullable | | meaning |", "|---|---|---|---|---|---|"]
    for c, req in ([(c, True) for c in schema.TABLES[table]]
                   + [(c, False) for c in schema.OPTIONAL_COLUMNS.get(table, ())]):
        lines.append(f"| `{c.name}` | {schema.ARROW_TYPES[c.kind]} | {c.unit or ''} | "
                     f"{'yes' if c.nullable else 'no'} | "
                     f"{'required' if req else 'optional'} | {c.doc} |")
    return "\n".join(lines) + "\n"


def _codes_md() -> str:
    lines = ["| code | severity | section | invariant |", "|---|---|---|---|"]
    for inv in sorted(codes.INVARIANTS, key=lambda i: i.code):
        lines.append(f"| {inv.code} | {inv.severity} | §{inv.section} | {inv.rule} |")
    return "\n".join(lines) + "\n"


def _section_codes(section: str) -> str:
    invs = sorted((i for i in codes.INVARIANTS if i.section == section), key=lambda i: i.code)
    return "".join(f"- **{i.code}** ({i.severity}): {i.rule}\n" for i in invs)


def generated_blocks() -> dict[str, str]:
    blocks = {"meta-keys": _meta_table(), "codes": _codes_md()}
    for table in schema.TABLES:
        blocks[f"table-{table}"] = _table_md(table)
    for section in sorted({i.section for i in codes.INVARIANTS}):
        blocks[f"codes-{section}"] = _section_codes(section)
    return blocks


def render_format_md(text: str) -> str:
    """``text`` with every generated block replaced; an unknown block name is an error."""
    blocks = generated_blocks()

    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in blocks:
            raise KeyError(f"FORMAT.md has a generated block {name!r} that export does not know")
        return m.group(1) + blocks[name] + m.group(4)

    return _BLOCK.sub(fill, text)


def outputs() -> dict[Path, str]:
    """Every generated file and its content."""
    dump = lambda obj: json.dumps(obj, indent=2, sort_keys=False) + "\n"  # noqa: E731
    out = {SCHEMA_DIR / "run.schema.json": dump(run_json_schema())}
    for table in schema.TABLES:
        out[SCHEMA_DIR / f"{table}.arrow.json"] = dump(arrow_schema_doc(table))
    out[FORMAT_MD] = render_format_md(FORMAT_MD.read_text(encoding="utf-8"))
    return out


def stale() -> list[Path]:
    return [p for p, text in outputs().items()
            if not p.exists() or p.read_text(encoding="utf-8") != text]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = stale()
        for p in bad:
            print(f"out of date: {p.relative_to(HERE.parents[1])} (run python -m "
                  "evalkit.runlog.export)")
        return 1 if bad else 0
    SCHEMA_DIR.mkdir(exist_ok=True)
    for p, text in outputs().items():
        p.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
