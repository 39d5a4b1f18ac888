"""report.html / report.md / audit.json: content, order, escaping, figures, Chromium rendering."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evalkit.compose import run_audit
from evalkit.report.render import render
from tests.golden.compare import golden_path

# bursty_report (tests/report/conftest.py) is built once: one worker runs its readers
pytestmark = pytest.mark.xdist_group("bursty_report")

REQUIRED_CLAIM_KEYS = {"regime", "policy", "baseline", "n_seeds", "wins", "mean_diff", "ci",
                       "p_one_sided", "p_two_sided", "exact", "min_p", "tier", "oracle",
                       "checks", "figures"}
CHECK_KEYS = {"name", "tier", "passed", "evaluable", "expected", "found", "recommendation"}
MIN_DPI = 150
FIRST_SCREEN = (1400, 900)        # --window-size of the "first screen" measurement


# ------------------------------------------------------------------------------- files

def test_outputs_written_and_listed_in_the_manifest(bursty_report):
    result, out = bursty_report
    for name in ("report.html", "report.md", "audit.json"):
        assert (out / name).stat().st_size > 0
    pngs = sorted((out / "figures").glob("*.png"))
    assert len(pngs) >= 7 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert sorted(f"figures/{p.name}" for p in pngs) == result.files["figures"]
    manifest = json.loads((out / ".evalkit-manifest.json").read_text())
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                     if p.is_file() and p.name != ".evalkit-manifest.json")
    assert manifest["files"] == on_disk
    assert result.published.atomic


def test_audit_json_fields_and_provenance(bursty_report):
    result, out = bursty_report
    audit = json.loads((out / "audit.json").read_text())
    assert {"evalkit_version", "protocol", "alpha", "claims", "provenance"} <= set(audit)
    prov = audit["provenance"]
    assert prov["campaign"] == "sim_bursty" and prov["campaign_source"] == "input directory"
    assert prov["protocol"] == "diloco-slo" and prov["protocol_sha256"] == \
        audit["protocol"]["sha256"] and len(prov["protocol_sha256"]) == 64
    assert re.fullmatch(r"[0-9a-f]{64}", prov["input_fingerprint"])
    assert prov["evalkit_version"] == audit["evalkit_version"]
    for claim in audit["claims"]:
        assert REQUIRED_CLAIM_KEYS <= set(claim)
        for chk in claim["checks"]:
            assert CHECK_KEYS <= set(chk)
        assert {"v_per_seed", "null", "psi", "exposure"} <= set(claim["figures"])
        for rel in claim["figures"].values():
            assert (out / rel).is_file()


def test_audit_json_is_byte_identical_and_has_no_absolute_paths(tmp_path, repo_root):
    src = repo_root / "fixtures" / "campaigns" / "sim_underpowered"
    runs = tmp_path / "elsewhere" / "sim_underpowered"     # another location, same inputs
    shutil.copytree(src, runs)
    run_audit(src, tmp_path / "first", seed=3)
    run_audit(runs, tmp_path / "again", seed=3)
    first = (tmp_path / "first" / "audit.json").read_bytes()
    assert (tmp_path / "again" / "audit.json").read_bytes() == first
    for name in sorted(p.name for p in (tmp_path / "first" / "figures").iterdir()):
        assert (tmp_path / "first" / "figures" / name).read_bytes() == \
            (tmp_path / "again" / "figures" / name).read_bytes()
    text = first.decode()
    assert str(repo_root) not in text and str(tmp_path) not in text and "/tmp" not in text
    assert "created_at" not in text
    assert json.loads(text)["seed"] == 3


def test_campaign_name_comes_from_the_campaign_file(tmp_path, repo_root):
    from evalkit.audit import audit_campaign
    from evalkit.audit.provenance import campaign_name

    src = repo_root / "fixtures" / "campaigns" / "sim_underpowered"
    runs = tmp_path / "runs"
    shutil.copytree(src, runs)
    for meta_path in runs.glob("*/run.json"):
        meta = json.loads(meta_path.read_text())
        meta.setdefault("settings", {}).setdefault("requested", {})["campaign"] = \
            "/somewhere/else/my-campaign.toml"
        meta_path.write_text(json.dumps(meta))
    assert campaign_name(audit_campaign(runs).runset) == ("my-campaign", "campaign file")


# -------------------------------------------------------------------------------- html

def _section(page: str, start_id: str, end_marker: str) -> str:
    i = page.index(f'id="{start_id}"')
    return page[i:page.index(end_marker, i)]


def test_html_order_headline_ladder_exclusions_definitions_detail(bursty_report):
    _, out = bursty_report
    page = (out / "report.html").read_text()
    order = [page.index(m) for m in ('id="headline"', 'id="ladder"', 'id="exclusions"',
                                     'id="tiers"', 'id="detail"')]
    assert order == sorted(order)
    assert "<title>sim_bursty: evalkit audit</title>" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "data:image/png;base64," in page and 'src="figures/' not in page


def test_headline_has_one_plain_sentence_per_claim(bursty_report):
    result, out = bursty_report
    page = (out / "report.html").read_text()
    head = _section(page, "headline", "</section>")
    items = re.findall(r"<li id=\"head-\d+\">(.*?)</li>", head, re.S)
    assert len(items) == len(result.claims)
    for item, claim in zip(items, result.claims):
        text = html.unescape(re.sub(r"<[^>]+>", "", item))
        assert re.search(r"\b(supported|not supported|underpowered)\b", text)
        assert "G = " in text and "pp" in text and "95% CI" in text and "p = " in text
        assert claim.policy in text
        if claim.tier is None or claim.tier in ("harness", "sidecar_transfer"):
            assert "not supported" in text or "underpowered" in text
        assert "Not higher:" in text


def test_ladder_shows_colour_and_text_for_every_tier(bursty_report):
    result, out = bursty_report
    page = (out / "report.html").read_text()
    ladder = _section(page, "ladder", "</table>")
    cells = re.findall(r'<td class="rung ([a-z-]+)[^"]*"[^>]*>([^<]+)</td>', ladder)
    n_tiers = len(result.protocol.tier_names)
    assert len(cells) == n_tiers * len(result.claims)
    words = {"passed": "passed", "failed": "failed", "skipped": "skipped",
             "not-evaluable": "not evaluable", "not-run": "not run"}
    assert all(words[css] == text for css, text in cells)       # colour class and same text
    assert {"passed", "failed", "skipped"} <= {css for css, _ in cells}
    assert ladder.count(" reached") == sum(c.tier is not None for c in result.claims)


def test_long_tables_are_collapsed_behind_a_summary(bursty_report):
    _, out = bursty_report
    page = (out / "report.html").read_text()
    summaries = [(o, html.unescape(t)) for o, t in
                 re.findall(r"<details( open)?><summary[^>]*>([^<]+)</summary>", page)]
    texts = [t for _, t in summaries]
    assert any(re.fullmatch(r"\d+ of \d+ runs load-matched to their seed's no-sync run; "
                            r"\d+ quantit(y|ies) outside tolerance", t) for t in texts)
    assert any(re.fullmatch(r"\d+ checks: \d+ passed, \d+ failed, \d+ not evaluable", t)
               for t in texts)
    # only failures are open by default
    for opened, text in summaries:
        if opened:
            assert re.search(r"; [1-9]\d* quantit(y|ies) outside tolerance", text), text


def test_excluded_runs_are_listed_near_the_top(bursty_report):
    result, out = bursty_report
    page = (out / "report.html").read_text()
    excl = _section(page, "exclusions", "</div>")
    for e in result.runset.excluded:
        assert html.escape(e["run_id"]) in excl


def test_a_negative_gain_is_never_within_the_calibration_error(bursty_report):
    result, out = bursty_report
    page = (out / "report.html").read_text()
    audit = json.loads((out / "audit.json").read_text())
    negative = [i for i, c in enumerate(audit["claims"])
                if c["mean_diff"] is not None and c["mean_diff"] <= 0]
    assert negative, "the fixture has a policy worse than matched random"
    for i in negative:
        end = f'id="claim-{i + 2}"' if i + 1 < len(audit["claims"]) else 'id="regime-1"'
        section = page[page.index(f'id="claim-{i + 1}"'):page.index(end)]
        assert "within the calibration error" not in section
        head = _section(page, f"head-{i + 1}", "</li>")
        assert "more requests violate the SLO" in head


# ---------------------------------------------------------------------------- markdown

def test_markdown_is_a_github_job_summary(bursty_report):
    result, out = bursty_report
    md = (out / "report.md").read_text()
    assert len(md) < 65_536 and md.startswith("## sim\\_bursty: evalkit audit")
    assert not re.search(r"&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);", md)     # no HTML entities
    assert not re.search(r"<[a-zA-Z/]", md.replace("\\<", ""))           # no raw HTML
    assert "### Which claims hold" in md and "### Failed checks" in md
    assert md.index("### Which claims hold") < md.index("### Tier ladder") < \
        md.index("### Failed checks")
    for claim in result.claims:
        assert claim.policy.replace("_", "\\_") in md
    tables = [line for line in md.splitlines() if line.startswith("|")]
    assert tables and all(line.count("|") - 1 <= 1 + len(result.protocol.tier_names)
                          for line in tables)
    cells = [c.strip() for line in tables for c in line.strip("|").split("|")]
    assert max(len(c) for c in cells) <= 60                            # narrow columns
    failed = [c for c in json.loads((out / "audit.json").read_text())["claims"]
              if any(ch["blocking"] for ch in c["checks"])]
    assert md.count("- \u274c failed:") + md.count("- \u2754 not evaluable:") == \
        sum(sum(ch["blocking"] for ch in c["checks"]) for c in failed)
    assert "data:image" not in md


def test_markdown_renders_without_links_images_or_html(bursty_report):
    markdown_it = pytest.importorskip("markdown_it")
    _, out = bursty_report
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(
        (out / "report.md").read_text())
    tags = set(re.findall(r"<(\w+)", rendered))
    assert tags <= {"h2", "h3", "p", "ul", "li", "strong", "em", "table", "thead", "tbody",
                    "tr", "th", "td", "blockquote"}, tags
    assert "<table>" in rendered


def _hostile_table(tmp_path, policy, regime="r"):
    rows = ["policy,seed,violation_rate,regime,draws_per_row"]
    for seed in range(6):
        rows.append(f"\"{policy}\",{seed},0.10,\"{regime}\",1")
        rows.append(f"matched_random,{seed},{0.2 + seed / 100},\"{regime}\",1")
    table = tmp_path / "t.csv"
    table.write_text("\n".join(rows) + "\n")
    return table


def test_run_log_text_is_escaped_in_html_and_markdown(tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    evil = "<script>alert(1)</script>|[x](https://e.example)![i](https://e.example/i.png)"
    run_audit(_hostile_table(tmp_path, evil, regime="**r**"), tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in md and "&lt;" not in md and "\\<script\\>" in md
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    assert "<a " not in rendered and "<img" not in rendered and "<script" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;|[x](https://e.example)" in rendered
    audit = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert audit["claims"][0]["policy"] == evil


def test_a_5000_character_policy_name_gives_short_file_names(tmp_path):
    name = "p" * 2500 + "/" + "q" * 2499
    result = run_audit(_hostile_table(tmp_path, name), tmp_path / "out")
    figures = list((tmp_path / "out" / "figures").iterdir())
    assert figures and all(len(f.name.encode()) <= 120 for f in figures)
    assert result.claims[0].policy == name
    md = (tmp_path / "out" / "report.md").read_text()
    assert "p" * 200 not in md and "\u2026" in md          # shortened in the summary


# ----------------------------------------------------------------------------- figures

def _png_dpi(path: Path) -> tuple[float, int]:
    from PIL import Image

    with Image.open(path) as img:
        return float(img.info.get("dpi", (0, 0))[0]), img.size[0]


def test_every_figure_is_at_least_150_dpi_and_shown_at_its_native_width(bursty_report):
    _, out = bursty_report
    for png in (out / "figures").glob("*.png"):
        dpi, width = _png_dpi(png)
        assert dpi >= MIN_DPI - 0.5 and width >= 600, (png.name, dpi, width)
    page = (out / "report.html").read_text()
    imgs = re.findall(r'<img src="data:image/png;base64,([^"]+)" width="(\d+)" height="(\d+)" '
                      r'alt="([^"]+)">', page)
    assert len(imgs) == len(list((out / "figures").glob("*.png")))
    import base64
    import io

    from PIL import Image

    for data, css_w, css_h, alt in imgs:
        with Image.open(io.BytesIO(base64.b64decode(data))) as img:
            # one image pixel per CSS pixel: the figure's text reads at the report's width
            # (424 px wide, its physical size, was too small to read)
            assert (int(css_w), int(css_h)) == img.size
        assert len(html.unescape(alt)) > 40                    # alt text says what it shows
    assert "figure img { max-width: 100%; height: auto;" in page   # narrow screens scale down


def test_per_seed_figure_draws_the_draws_spread():
    """The per-seed figure draws the draws' spread: removing it changes the picture."""
    import io

    import pandas as pd
    from PIL import Image

    from evalkit.report.figures import v_per_seed

    table = pd.DataFrame({"seed": [0, 1, 2], "v_policy": [0.1, 0.12, 0.09],
                          "v_mr_mean": [0.2, 0.21, 0.19], "v_mr_min": [0.15, 0.16, 0.14],
                          "v_mr_max": [0.25, 0.26, 0.24], "v_no_sync": [0.05, 0.05, 0.05],
                          "d": [0.1, 0.09, 0.1]})
    with_band = v_per_seed(table, "wa")
    without = v_per_seed(table.assign(v_mr_min=np.nan, v_mr_max=np.nan), "wa")
    assert with_band.png != without.png
    assert with_band.dpi >= MIN_DPI and "no-sync" in with_band.alt
    img = np.asarray(Image.open(io.BytesIO(with_band.png)).convert("RGB"))
    assert img.shape[1] == round(with_band.width_in * with_band.dpi)


def test_transfer_figure_draws_a_drain_curve_when_present_and_skips_it_when_absent():
    from evalkit.report.figures import drain_curves, transfer

    base = {"rho_harness": 2.9, "rho_harness_ci": [2.8, 3.0], "rho_real": 1.4,
            "rho_real_ci": [1.2, 1.6], "drain_min_requests": 30}
    plain = transfer({"sync": base})
    curve = [{"lag_lo": lo, "lag_hi": lo + 5, "n": 40, "ratio": 1.5 - lo / 40,
              "ci_low": 1.2 - lo / 40, "ci_high": 1.8 - lo / 40} for lo in range(0, 20, 5)]
    paired = {**base, "gm_ratio_real": 1.5, "gm_ratio_real_ci": [1.3, 1.7]}
    per_condition = transfer({"sync": {**paired, "drain_curve": {"harness": curve,
                                                                 "real": curve[:3]}}})
    as_list = transfer({"sync": {**paired, "drain_curve": curve}})
    for drawn in (per_condition, as_list):
        assert drawn.width_in > plain.width_in and "drain curve" in drawn.alt
    assert "sync harness, sync real" in per_condition.alt
    assert "drain" not in plain.alt
    assert list(drain_curves({"sync": {"drain_curve": {"real": curve},
                                       "drain_min_requests": 30}})["sync real"][0]) == \
        [2.5, 1.5, 1.2, 1.8]
    # the document's minimum decides which bins are drawn: above every bin's 40, none is
    assert drain_curves({"sync": {"drain_curve": {"real": curve},
                                  "drain_min_requests": 41}}) == {}
    broken = transfer({"sync": {**base, "drain_curve": [{"lag_lo": None}], "rho_real_ci": None}})
    assert broken.png[:8] == b"\x89PNG\r\n\x1a\n" and "drain" not in broken.alt


def test_transfer_campaign_report_has_the_table_and_figure():
    # the report is a function of the document: the transfer campaign's recorded one
    # (tests/e2e/test_audit_golden.py holds it to the campaign's audit)
    audit = json.loads(golden_path("transfer").read_text())
    files = render(audit)
    assert audit["transfer_figure"] in files
    page = files["report.html"].decode()
    section = _section(page, "transfer", 'id="detail"')
    assert "\u03c1 harness [CI]" in section and "<img" in section
    assert "transfer fraction" in section


# ---------------------------------------------------------------------------- chromium

def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


_MEASURE = """<script>
window.addEventListener('load', function () {
  function box(el) { var b = el.getBoundingClientRect();
    return {top: b.top, bottom: b.bottom, width: b.width, height: b.height}; }
  var out = {height: document.documentElement.scrollHeight,
             width: document.documentElement.scrollWidth,
             viewport: [window.innerWidth, window.innerHeight],
             headline: box(document.getElementById('headline')),
             ladder: box(document.getElementById('ladder')),
             imgs: Array.prototype.map.call(document.images, function (i) {
               var b = box(i); b.nw = i.naturalWidth; b.nh = i.naturalHeight; b.alt = i.alt;
               return b; })};
  var pre = document.createElement('pre'); pre.id = 'evalkit-measure';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def _chromium_cmd(binary, tmp: Path, size) -> list[str]:
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}",
            f"--window-size={size[0]},{size[1]}"]


def measure_page(report: Path, tmp: Path, size=FIRST_SCREEN) -> dict:
    """Lay the page out in headless Chromium at ``size`` and return its measurements: page
    height, the headline's and the ladder's boxes, and every image's natural and shown size.
    A copy of the page gets a measuring script (the report itself forbids scripts)."""
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium binary found (Debian package: chromium)")
    page = report.read_text()
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    copy = tmp / "measure.html"
    copy.write_text(page.replace("</body>", _MEASURE + "</body>"))
    cmd = _chromium_cmd(binary, tmp, size) + ["--virtual-time-budget=20000", "--dump-dom",
                                              copy.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HOME": str(tmp)})
    found = re.search(r'<pre id="evalkit-measure">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def check_layout(m: dict) -> None:
    """The reviewer's first screen holds the headline; figures are shown at their native
    width (one image pixel per CSS pixel) where the page is wide enough for it."""
    assert m["width"] <= m["viewport"][0]                          # no horizontal scrolling
    assert m["headline"]["top"] < m["viewport"][1]
    assert m["headline"]["bottom"] <= m["viewport"][1], m["headline"]
    for img in m["imgs"]:
        assert img["nw"] > 0, "an image did not load"
        assert img["width"] >= min(img["nw"], m["viewport"][0] - 100) - 1, img
        assert img["alt"]


@pytest.mark.chromium
def test_report_renders_in_headless_chromium(bursty_report, tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium binary found (Debian package: chromium)")
    _, out = bursty_report
    shot = tmp_path / "shot.png"
    cmd = _chromium_cmd(binary, tmp_path, FIRST_SCREEN) + [
        f"--screenshot={shot}", (out / "report.html").resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert shot.exists() and shot.stat().st_size > 10_000, proc.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=np.int64)
    assert pixels.shape[:2] == (FIRST_SCREEN[1], FIRST_SCREEN[0])
    assert pixels.std() > 20                                      # not a blank page
    assert (pixels < 100).all(axis=-1).mean() > 0.002              # dark text pixels exist
    # the status colours of the headline are on the first screen
    red = (pixels[..., 0] > 140) & (pixels[..., 1] < 60) & (pixels[..., 2] < 60)
    assert red.sum() > 50


@pytest.mark.chromium
def test_fixture_report_layout(bursty_report, tmp_path):
    _, out = bursty_report
    m = measure_page(out / "report.html", tmp_path)
    check_layout(m)
    assert len(m["imgs"]) == len(list((out / "figures").glob("*.png")))
    assert m["height"] <= 9_000


def test_null_figure_shows_the_null_law_the_p_counts(bursty_report):
    # the claim's p is the draw-floored t-test on d: the figure is its null law of G (the
    # null shift plus the floored se times t with n - 1 df), with its p
    result, out = bursty_report
    tests = [c.ctx.paired for c in result.claims if c.sign_flip is not None]
    assert {t.null_statistic for t in tests} == {"mean"}
    assert {t.test for t in tests} == {"draw-floored t-test"}
    page = (out / "report.html").read_text(encoding="utf-8")
    alts = re.findall(r'alt="(Null distribution[^"]*)"', page)
    assert alts and all(a.startswith("Null distribution of G (draw-floored t-test)") for a in alts)
    assert all("evenly spaced quantiles of its t law" in a for a in alts)
