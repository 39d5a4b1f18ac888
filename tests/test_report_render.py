"""report.html / report.md / audit.json: determinism, content, escaping, Chromium rendering."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evalkit.audit import run_audit

REQUIRED_CLAIM_KEYS = {"regime", "policy", "baseline", "n_seeds", "wins", "mean_diff", "ci",
                       "p_one_sided", "p_two_sided", "exact", "min_p", "tier", "oracle",
                       "checks"}
CHECK_KEYS = {"name", "tier", "passed", "evaluable", "expected", "found", "recommendation"}


@pytest.fixture(scope="module")
def bursty_report(tmp_path_factory):
    from tests.conftest import REPO

    out = tmp_path_factory.mktemp("report")
    result = run_audit(REPO / "fixtures" / "campaigns" / "sim_bursty", out, seed=3)
    return result, out


def test_templates_in_reports_match_packaged_copies(repo_root):
    for name in ("report.html.j2", "report.md.j2"):
        packaged = repo_root / "evalkit" / "report" / "templates" / name
        assert packaged.read_bytes() == (repo_root / "reports" / name).read_bytes()


def test_outputs_written(bursty_report):
    result, out = bursty_report
    for name in ("report.html", "report.md", "audit.json"):
        assert (out / name).stat().st_size > 0
    pngs = sorted((out / "figures").glob("*.png"))
    assert len(pngs) >= 4 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert sorted(f"figures/{p.name}" for p in pngs) == result.files["figures"]


def test_audit_json_fields(bursty_report):
    _, out = bursty_report
    audit = json.loads((out / "audit.json").read_text())
    assert {"evalkit_version", "protocol", "alpha", "claims"} <= set(audit)
    assert audit["alpha"] == 0.05 and audit["protocol"]["name"] == "diloco-slo"
    for claim in audit["claims"]:
        assert REQUIRED_CLAIM_KEYS <= set(claim)
        assert claim["baseline"] == "matched_random"
        for chk in claim["checks"]:
            assert CHECK_KEYS <= set(chk)
    wa = next(c for c in audit["claims"] if c["policy"] == "wa")
    assert wa["tier"] == "calibrated" and wa["exact"] is True and wa["oracle"] is False


def test_audit_json_is_byte_identical_and_has_no_absolute_paths(tmp_path, repo_root):
    src = repo_root / "fixtures" / "campaigns" / "sim_underpowered"
    runs = tmp_path / "elsewhere" / "sim_underpowered"     # another location, same inputs
    shutil.copytree(src, runs)
    run_audit(src, tmp_path / "first", seed=3)
    run_audit(runs, tmp_path / "again", seed=3)
    first = (tmp_path / "first" / "audit.json").read_bytes()
    assert (tmp_path / "again" / "audit.json").read_bytes() == first
    text = first.decode()
    assert str(repo_root) not in text and str(tmp_path) not in text and "/tmp" not in text
    assert "created_at" not in text
    assert json.loads(text)["seed"] == 3


def test_html_is_self_contained(bursty_report):
    _, out = bursty_report
    html = (out / "report.html").read_text()
    assert '<table id="claims">' in html
    assert html.index('id="claims"') < html.index("Placement gain G")   # claims table first
    assert "data:image/png;base64," in html
    assert "http://" not in html and "https://" not in html and "<script" not in html
    assert 'src="figures/' not in html


def test_markdown_fits_a_pr_comment(bursty_report):
    _, out = bursty_report
    md = (out / "report.md").read_text()
    assert len(md) < 65_536
    assert md.splitlines()[0].startswith("## evalkit audit")
    assert "| bursty | wa | **calibrated** |" in md
    assert "data:image" not in md


def test_run_log_text_is_escaped(tmp_path):
    evil = "<script>alert(1)</script>|x"
    rows = ["policy,seed,violation_rate,regime"]
    for seed in range(6):
        rows.append(f"\"{evil}\",{seed},0.10,r")
        rows.append(f"matched_random,{seed},{0.2 + seed / 100},r")
    table = tmp_path / "t.csv"
    table.write_text("\n".join(rows) + "\n")
    run_audit(table, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in md and "&lt;script&gt;" in md and "\\|x" in md
    audit = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert audit["claims"][0]["policy"] == evil


def _png_pixels(path: Path) -> np.ndarray:
    from PIL import Image   # pillow comes with matplotlib

    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), dtype=np.int64)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.chromium
def test_report_renders_in_headless_chromium(bursty_report, tmp_path):
    binary = _chromium()
    if binary is None:
        pytest.skip("no chromium binary found (Debian package: chromium)")
    _, out = bursty_report
    shot = tmp_path / "shot.png"
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
           "--window-size=1280,2000", (out / "report.html").resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert shot.exists() and shot.stat().st_size > 10_000, proc.stderr[-2000:]
    pixels = _png_pixels(shot)
    assert pixels.shape[:2] == (2000, 1280)
    assert pixels.std() > 20                       # not a blank page
    assert (pixels < 100).all(axis=-1).mean() > 0.002   # dark text/figure pixels exist
