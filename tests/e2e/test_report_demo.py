"""The demo's report as a reviewer opens it: headless Chromium at 1,400 px width."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tests.report.test_render import MIN_DPI, _png_dpi, check_layout, measure_page

MAX_PAGE_HEIGHT = 9_000


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    from evalkit.cli.main import cli

    out = tmp_path_factory.mktemp("demo") / "demo"
    res = CliRunner().invoke(cli, ["demo", "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    return out, res.output


@pytest.mark.slow
def test_demo_prints_the_path_of_report_html(demo_report):
    out, output = demo_report
    printed = re.search(r"^report: (.+)$", output, re.M).group(1).strip()
    assert printed.endswith("report.html") and (out / "report" / "report.html").samefile(printed)


@pytest.mark.slow
@pytest.mark.chromium
def test_demo_page_is_short_with_the_headline_on_the_first_screen(demo_report, tmp_path):
    out, _ = demo_report
    report = out / "report" / "report.html"
    m = measure_page(report, tmp_path)
    assert m["viewport"][0] == 1400
    assert m["height"] <= MAX_PAGE_HEIGHT, m["height"]
    check_layout(m)
    audit = json.loads((out / "report" / "audit.json").read_text())
    assert len(m["imgs"]) >= 3 * len(audit["claims"])      # V per seed, null and psi each


@pytest.mark.slow
def test_demo_figures_are_at_least_150_dpi(demo_report):
    out, _ = demo_report
    pngs = list((out / "report" / "figures").glob("*.png"))
    assert pngs
    for png in pngs:
        dpi, width = _png_dpi(png)
        assert dpi >= MIN_DPI - 0.5 and width >= 600, (png.name, dpi, width)


@pytest.mark.slow
def test_demo_audit_keeps_every_recorded_field(demo_report):
    """The demo's audit.json keeps every field of tests/golden/demo.audit.json, apart from
    what a fresh sweep takes from the clock and the host.  The input fingerprint hashes the
    per-run table; the simulator records the same bits on every CPU
    (tests/replay/test_cross_cpu_determinism.py), so one record serves AVX2 and AVX-512 hosts."""
    from tests.golden.compare import changed_fields, golden_path, without_wall_clock
    out, _ = demo_report
    new = json.loads((out / "report" / "audit.json").read_text())
    diff = changed_fields(without_wall_clock(json.loads(golden_path("demo").read_text())), new)
    hint = ["(input_fingerprint moved: run tests/replay/test_cross_cpu_determinism.py to see "
            "whether something the simulator records depends on the CPU)"] if any(
        "input_fingerprint" in d for d in diff) else []
    assert not diff, "\n".join(diff[:20] + hint)
