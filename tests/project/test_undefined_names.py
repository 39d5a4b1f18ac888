"""No module of the package uses a name it never defines or imports: a moved definition whose
importers were not all updated fails here, before any code path reaches it (a sweep once
failed at run time with NameError after an import was dropped)."""

from __future__ import annotations

from pathlib import Path

import pytest

pyflakes_api = pytest.importorskip("pyflakes.api")
from pyflakes import messages  # noqa: E402
from pyflakes.reporter import Reporter  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
UNDEFINED = (messages.UndefinedName, messages.UndefinedExport, messages.UndefinedLocal,
             messages.ImportStarUsage)


class _Collect(Reporter):
    def __init__(self, root: Path):
        super().__init__(None, None)
        self.root, self.found = root, []

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            where = Path(message.filename).relative_to(self.root)
            self.found.append(f"{where}:{message.lineno}: "
                              f"{message.message % message.message_args}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


def undefined_names(root: Path) -> list[str]:
    reporter = _Collect(root)
    for path in sorted(root.rglob("*.py")):
        pyflakes_api.checkPath(str(path), reporter)
    return reporter.found


def test_every_name_the_package_uses_is_defined():
    assert undefined_names(REPO / "evalkit") == []


def test_the_check_finds_a_name_left_undefined(tmp_path):
    (tmp_path / "sweep.py").write_text(
        "from evalkit.replay.storelock import current_holders\n\n\n"
        "def sweep(runs_dir):\n    with StoreLock(runs_dir):\n        return current_holders\n")
    assert undefined_names(tmp_path) == ["sweep.py:5: undefined name 'StoreLock'"]
