"""Commands from README's marked blocks, as argv lists (shared by the tests that run them)."""

from __future__ import annotations

import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(marker: str) -> list[list[str]]:
    """The fenced bash block between ``<!-- marker -->`` and ``<!-- /marker -->``: one argv
    per command, backslash continuations joined."""
    text = README.read_text()
    block = text.split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    body = block.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [shlex.split(line) for line in body.splitlines() if line.strip()]
