"""One copy of each template, protocol and campaign: the packaged file is the only file, and
the top-level names (reports/, protocols/, examples/bursty.toml) are relative symlinks to it."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest

LINKS = [
    ("reports", "evalkit/report/templates"),
    ("protocols", "evalkit/audit/protocols"),
    ("examples/bursty.toml", "evalkit/replay/campaigns/bursty.toml"),
]
# every packaged data file that a top-level name shows, and where the package finds it
PACKAGED = [
    ("evalkit.report", "templates/report.html.j2"),
    ("evalkit.report", "templates/report.md.j2"),
    ("evalkit.audit", "protocols/diloco-slo.toml"),
    ("evalkit.replay", "campaigns/bursty.toml"),
]


@pytest.mark.parametrize("link, target", LINKS)
def test_top_level_name_is_a_relative_link_to_the_packaged_file(repo_root, link, target):
    path = repo_root / link
    assert path.is_symlink(), f"{link} must be a symlink to {target}, not a copy"
    assert not os.path.isabs(os.readlink(path)), f"{link}: the link must be relative"
    assert path.resolve() == (repo_root / target).resolve()
    assert (repo_root / target).exists() and not (repo_root / target).is_symlink()


def _real_files(root: Path, suffixes: tuple[str, ...]) -> list[str]:
    """Every regular file (links not followed) under ``root`` ending in ``suffixes``, outside
    hidden folders and build outputs."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")
                       and d not in ("__pycache__", "build", "dist")
                       and not d.endswith(".egg-info")]
        for name in filenames:
            p = Path(dirpath) / name
            if name.endswith(suffixes) and not p.is_symlink():
                found.append(p.relative_to(root).as_posix())
    return sorted(found)


def test_no_second_copy_of_a_template_or_the_protocol(repo_root):
    assert _real_files(repo_root, (".j2",)) == ["evalkit/compare/templates/compare.html.j2",
                                                "evalkit/compare/templates/compare.md.j2",
                                                "evalkit/report/templates/report.html.j2",
                                                "evalkit/report/templates/report.md.j2"]
    assert [p for p in _real_files(repo_root, ("diloco-slo.toml",))
            if not p.startswith("tests/")] == ["evalkit/audit/protocols/diloco-slo.toml"]
    assert [p for p in _real_files(repo_root, ("bursty.toml",))
            if not p.startswith(("tests/", "fixtures/"))] == [
        "evalkit/replay/campaigns/bursty.toml"]


@pytest.mark.parametrize("package, name", PACKAGED)
def test_the_package_finds_the_same_bytes_as_the_link(repo_root, package, name):
    shipped = resources.files(package).joinpath(name).read_bytes()
    top = {"templates": "reports", "protocols": "protocols",
           "campaigns": "examples"}[name.split("/")[0]]
    assert (repo_root / top / name.split("/")[1]).read_bytes() == shipped


def test_pyproject_ships_the_packaged_files(repo_root):
    pyproject = (repo_root / "pyproject.toml").read_text()
    for pattern in ('"report/templates/*.j2"', '"audit/protocols/*.toml"',
                    '"replay/campaigns/*.toml"', '"compare/templates/*.j2"',
                    '"compare/protocols/*.toml"'):
        assert pattern in pyproject
