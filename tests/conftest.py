"""Shared test helpers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
AZURE_TRACE = SHARED / "traces" / "azure_llm_2023_code.csv"


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def azure_trace() -> Path:
    if not AZURE_TRACE.exists():
        pytest.skip("shared/traces/azure_llm_2023_code.csv is not beside the checkout")
    return AZURE_TRACE


@pytest.fixture
def fixtures_dir() -> Path:
    return REPO / "fixtures"


@pytest.fixture
def copy_fixture(tmp_path):
    """Copy a fixture directory into tmp_path so a test may damage it."""

    def _copy(name: str) -> Path:
        src = REPO / "fixtures" / name
        dst = tmp_path / name
        shutil.copytree(src, dst)
        return dst

    return _copy


def pytest_configure(config):
    """With -n (pytest-xdist's default 'load' distribution), distribute by 'loadgroup': the
    tests of one ``xdist_group`` run on one worker, so a module that marks itself starts its
    server once, not once a worker; every other test is spread as before."""
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get("loadgroup"):
        config.option.loadgroup = True     # the worker names each test with its group


@pytest.hookimpl(tryfirst=True)        # before the worker names each test with its group
def pytest_collection_modifyitems(config, items):
    """With loadgroup, a test of no ``xdist_group`` joins its module's: one worker runs a
    module, so its module fixtures (a sweep, an audit, a fit) are built once, not once a
    worker.  A group a test names itself (a server, a session fixture) stays as it is."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """A worker parses the command line, not the distribution chosen above: tell it."""
    node.workerinput["loadgroup"] = node.config.getvalue("dist") == "loadgroup"
