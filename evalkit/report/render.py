"""Write an audit's report.html (self-contained), report.md, audit.json and figure files.

Templates are Jinja files shipped as package data in ``evalkit/report/templates/`` (the
repository's ``reports/`` holds identical copies for readers; a test keeps them equal).  The
HTML environment autoescapes everything: run ids, policy names and error texts come from run
logs.  Figures are embedded as base64 PNG data URIs, so the page needs no network.
"""

from __future__ import annotations

import base64
import re
import zlib
from importlib import resources
from pathlib import Path

import jinja2
import numpy as np

from evalkit.report import figures as figs

TEMPLATE_PACKAGE = "evalkit.report"
MD_LIMIT = 60_000      # GitHub comments hold 65,536 characters


def template_env(autoescape: bool, template_dir: str | Path | None = None) -> jinja2.Environment:
    path = Path(template_dir) if template_dir else Path(
        str(resources.files(TEMPLATE_PACKAGE).joinpath("templates")))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(path)), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = _num
    env.filters["pct"] = _pct
    env.filters["md"] = _md_cell
    return env


def _num(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "n/a"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.{digits}g}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * float(x):.2f}%"


def _md_cell(text) -> str:
    """Text safe inside a Markdown table cell of a PR comment (no raw HTML, no pipes)."""
    s = str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "x"
    if slug != name:
        slug += f"-{zlib.crc32(name.encode()):08x}"[:7]
    return slug


def build_figures(result) -> dict:
    """``{key: (file name, png bytes)}``; keys are ``"<regime>\\0<policy>/<kind>"``."""
    out = {}
    done: dict = {}            # regime-level figures, drawn once
    for c in result.claims:
        base = f"{_slug(c.regime)}__{_slug(c.policy)}"
        key = f"{c.regime}\0{c.policy}"
        per_seed = c.per_seed()
        if len(per_seed):
            out[f"{key}/v_per_seed"] = (f"{base}__v_per_seed.png",
                                        figs.v_per_seed(per_seed, c.policy))
        sf = c.sign_flip
        if sf is not None:
            out[f"{key}/null"] = (f"{base}__signflip_null.png", figs.null_distribution(
                sf.null_distribution(max_points=20_000, seed=result.seed), sf.statistic,
                sf.p_value, sf.alternative))
        ev = c.ctx.regime_evidence
        runs = ev.runs[ev.runs.role != "no_sync"]
        if np.isfinite(runs.exposure_requests.astype(float)).any():
            if ("exposure", c.regime) not in done:
                reg = ev.exposure[0]
                done["exposure", c.regime] = (f"{_slug(c.regime)}__exposure.png",
                                              figs.exposure_scatter(
                                                  runs, None if reg is None else float(reg.r_squared)))
            out[f"{key}/exposure"] = done["exposure", c.regime]
        if ev.psi is not None:
            if ("psi", c.regime) not in done:
                table = ev.phi_table
                grid = np.linspace(0.0, float(table.phi.max()) * 1.05 + 1e-9, 200)
                done["psi", c.regime] = (f"{_slug(c.regime)}__psi.png", figs.psi_fit(
                    table, grid, np.asarray(ev.psi.predict(grid), dtype=float),
                    float(ev.psi.eps_cal)))
            out[f"{key}/psi"] = done["psi", c.regime]
    return out


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _view(result, audit: dict, figures: dict, embed: bool) -> dict:
    claims = []
    for c, d in zip(result.claims, audit["claims"]):
        key = f"{c.regime}\0{c.policy}"
        fig = {}
        for kind in ("v_per_seed", "null", "exposure", "psi"):
            if f"{key}/{kind}" in figures:
                name, png = figures[f"{key}/{kind}"]
                fig[kind] = _data_uri(png) if embed else name
        lm_spec = result.protocol.checks.get("load_match")
        load_match = c.ctx.load_match_table(lm_spec) if lm_spec is not None else \
            "load matching is not part of this protocol"
        d = dict(d)
        d["figs"] = fig
        d["load_match_reason"] = load_match if isinstance(load_match, str) else ""
        d["load_match_rows"] = [] if isinstance(load_match, str) else load_match.to_dict("records")
        d["failed"] = [ch for ch in d["checks"] if ch["blocking"]]
        d["regime_info"] = audit["regimes"].get(c.regime, {})
        claims.append(d)
    return {"audit": audit, "claims": claims, "tiers": audit["protocol"]["tiers"]}


def render_html(result, audit: dict, figures: dict, template_dir=None) -> str:
    env = template_env(autoescape=True, template_dir=template_dir)
    return env.get_template("report.html.j2").render(**_view(result, audit, figures, True))


def render_md(result, audit: dict, figures: dict, template_dir=None) -> str:
    env = template_env(autoescape=False, template_dir=template_dir)
    text = env.get_template("report.md.j2").render(**_view(result, audit, figures, False))
    if len(text) > MD_LIMIT:
        cut = text.rfind("\n", 0, MD_LIMIT - 200)
        text = text[:cut] + ("\n\n_(truncated to fit a pull-request comment; the full report "
                             "is report.html and audit.json)_\n")
    return text


def write_reports(result, out_dir: Path, template_dir=None) -> None:
    from evalkit.audit import canonical_json

    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    for stale in fig_dir.glob("*.png"):      # figures of an earlier audit into the same DIR
        stale.unlink()
    figures = build_figures(result)
    result.figures = {k: f"figures/{name}" for k, (name, _) in figures.items()}
    for name, png in {v[0]: v[1] for v in figures.values()}.items():
        (fig_dir / name).write_bytes(png)
    audit = result.to_dict()
    (out_dir / "audit.json").write_text(canonical_json(audit))
    md_figs = {k: (f"figures/{name}", png) for k, (name, png) in figures.items()}
    (out_dir / "report.md").write_text(render_md(result, audit, md_figs, template_dir))
    (out_dir / "report.html").write_text(render_html(result, audit, figures, template_dir))
    result.files = {"html": "report.html", "md": "report.md", "json": "audit.json",
                    "figures": sorted(set(result.figures.values()))}
