"""Report text helpers: Markdown escaping checked against a CommonMark renderer, figure file
names capped, wording guards."""

from __future__ import annotations

import html
import re

import pytest

from evalkit.names import file_part
from evalkit.document.words import p_value, pp
from evalkit.report.text import md, md_line, shorten

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (dev extra) renders "
                                                        "the escaped Markdown")

HOSTILE = [
    "[click](https://evil.example/x)",
    "![pixel](https://evil.example/p.png)",
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "**bold** _em_ `code` ~~strike~~",
    "a | b | c",
    "&lt;not an entity&gt; &amp; &#x41;",
    "$x^2$ and $$y$$",
    "@someone #12",
    "back\\slash\\",
    "{curly} (paren) [bracket]",
    "line\nbreak\r\nand\ttab",
    "wa_s3__calibrated_online",
]


def _render(text: str) -> str:
    return markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough") \
        .render(text)


def _one_line(text: str) -> str:
    """What md() keeps of a string: control characters become spaces."""
    return re.sub(r"[\r\n\t]", " ", text)


def _visible(rendered: str) -> str:
    inner = re.sub(r"<[^>]+>", "", rendered)
    return html.unescape(inner).strip()


@pytest.mark.parametrize("text", HOSTILE)
def test_md_renders_as_the_literal_text(text):
    rendered = _render(f"policy {md(text)} done")
    assert _visible(rendered) == f"policy {_one_line(text)} done"
    # nothing but the paragraph itself: no link, image, emphasis, code or raw HTML
    tags = set(re.findall(r"<(\w+)", rendered))
    assert tags == {"p"}, rendered


@pytest.mark.parametrize("text", HOSTILE)
def test_md_in_a_table_cell_keeps_the_table_shape(text):
    table = f"| a | b |\n|---|---|\n| {md(text)} | x |\n"
    rendered = _render(table)
    assert rendered.count("<td>") == 2, rendered
    cell = re.search(r"<td>(.*?)</td>", rendered, re.S).group(1)
    assert _visible(cell) == _one_line(text).strip()


@pytest.mark.parametrize("text", ["- item", "+ item", "1. first", "3) third", "# heading",
                                  "> quote", "= under"])
def test_md_line_escapes_line_start_markers(text):
    rendered = _render(md_line(text))
    assert set(re.findall(r"<(\w+)", rendered)) == {"p"}, rendered
    assert _visible(rendered) == text


def test_md_writes_no_html_entities():
    for text in HOSTILE:
        assert not re.search(r"&(#\d+|#x[0-9a-f]+|[a-z]+);", md(text).replace("\\&", ""))


def test_invisible_and_control_characters_are_removed():
    assert md("a\u202eb\u200bc\x00d") == "abc d"


def test_shorten_keeps_both_ends():
    s = "x" * 50 + "MIDDLE" + "y" * 50
    out = shorten(s, 40)
    assert len(out) == 40 and out.startswith("x") and out.endswith("y") and "\u2026" in out
    assert shorten("short", 40) == "short"


def test_file_part_caps_length_and_keeps_names_distinct():
    long_a, long_b = "p" * 5000, "p" * 4999 + "q"
    a, b = file_part(long_a), file_part(long_b)
    assert len(a) <= 51 and len(b) <= 51 and a != b
    assert file_part("wa") == "wa" and file_part("calibrated_online") == "calibrated_online"
    assert file_part("a/b") != file_part("a-b")       # sanitised names carry a hash
    assert "/" not in file_part("../../etc/passwd") and not file_part("..").startswith(".")


def test_number_formats():
    assert pp(0.0078417) == "+0.78" and pp(-0.0133) == "-1.33" and pp(None) == "n/a"
    assert p_value(0.0009765625) == "0.000977" and p_value(0.01171875) == "0.0117"
    assert p_value(0.0625) == "0.0625" and p_value(2e-07) == "2e-07"
    assert p_value(1.0) == "1" and p_value(None) == "n/a"
