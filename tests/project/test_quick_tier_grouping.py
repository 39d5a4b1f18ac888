"""A test module that starts a server in a module-scoped fixture starts it once in the quick
tier: it marks itself ``xdist_group`` and, with -n, the load distribution becomes loadgroup
(tests/conftest.py), so one worker runs the whole module."""

from __future__ import annotations

import re
from types import SimpleNamespace

from tests.conftest import REPO, pytest_configure, pytest_configure_node

SERVER_START = re.compile(r"\b(start_server|configured_server)\(")
MODULE_FIXTURE = re.compile(r'@pytest\.fixture\(scope="(module|session)"\)\s*\ndef \w+\([^)]*\):'
                            r'(?:\n(?:    .*|\s*))*')


def test_every_quick_module_that_starts_a_server_in_a_module_fixture_is_one_group():
    ungrouped = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        marks = re.search(r"^pytestmark = (.*(?:\n[ \]].*)*)", text, re.M)
        if marks and "pytest.mark.slow" in marks.group(1):
            continue
        if any(SERVER_START.search(m.group(0)) for m in MODULE_FIXTURE.finditer(text)):
            if not marks or "xdist_group" not in marks.group(1):
                ungrouped.append(str(path.relative_to(REPO)))
    assert ungrouped == [], f"add pytest.mark.xdist_group to their pytestmark: {ungrouped}"


def test_the_load_distribution_becomes_loadgroup_and_the_workers_are_told():
    controller = SimpleNamespace(option=SimpleNamespace(dist="load"))
    pytest_configure(controller)
    assert controller.option.dist == "loadgroup"
    node = SimpleNamespace(config=SimpleNamespace(getvalue=lambda name: controller.option.dist),
                           workerinput={})
    pytest_configure_node(node)
    assert node.workerinput["loadgroup"] is True
    worker = SimpleNamespace(option=SimpleNamespace(dist="no", loadgroup=False),
                             workerinput=node.workerinput)
    pytest_configure(worker)
    assert worker.option.loadgroup is True and worker.option.dist == "no"
    chosen = SimpleNamespace(option=SimpleNamespace(dist="loadfile"))   # a --dist given stays
    pytest_configure(chosen)
    assert chosen.option.dist == "loadfile"
