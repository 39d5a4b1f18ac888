"""The report of an audit document: report.html (self-contained), report.md, audit.json and
figures, a pure function of the document (:func:`render`); it reads no run.

Templates are Jinja files shipped as package data in ``evalkit/report/templates/`` (the one
copy; nothing generates or duplicates them).  The HTML environment autoescapes everything:
run ids, policy names and error texts come from run logs; the Markdown environment escapes
every printed value with :func:`evalkit.report.text.md_output`.  Figures are embedded in the
HTML as base64 PNG data URIs (the page needs no network) and written to ``figures/`` for report.md.
The files are published into ``--out`` atomically by :mod:`evalkit.report.publish`.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from evalkit.document.rules import content_sha256
from evalkit.jsonio import canonical_json
from evalkit.report import figures as figs
from evalkit.report.headline import STATES, headlines
from evalkit.document.words import num, p_value, pct, pp
from evalkit.report.text import md, md_line, md_name, md_output, shorten

__all__ = ["build_figures", "render", "render_html", "render_md"]

TEMPLATE_PACKAGE = "evalkit.report"
MD_LIMIT = 60_000      # GitHub comments hold 65,536 characters; job summaries 1 MiB
FIGURE_KINDS = ("v_per_seed", "null", "psi")
MAX_TABLE_ROWS = 1_000    # rows of one load-match table in the page (the page stays usable)
TRANSFER_COLUMNS = (("rho_harness", "\u03c1 harness"), ("rho_real", "\u03c1 real"),
                    ("gm_ratio_harness", "paired ratio harness"),
                    ("gm_ratio_real", "paired ratio real"),
                    ("paired_ratio", "paired ratio"),
                    ("transfer_fraction", "transfer fraction (\u03c1)"),
                    ("transfer_fraction_gm", "transfer fraction (paired)"))


def template_env(autoescape: bool, template_dir: str | Path | None = None) -> jinja2.Environment:
    path = Path(template_dir) if template_dir else Path(
        str(resources.files(TEMPLATE_PACKAGE).joinpath("templates")))
    return _environment(autoescape, str(path))


# one environment per folder and escaping: Jinja compiles a template once per environment and
# recompiles it when its file changes (auto_reload), so a process that renders many reports
# parses the templates once
@functools.lru_cache(maxsize=8)
def _environment(autoescape: bool, path: str) -> jinja2.Environment:
    # HTML: Jinja's autoescape; Markdown: md_output escapes every printed value
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(path), autoescape=autoescape,
                             finalize=None if autoescape else md_output,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=num, pct=pct, pp=pp, p=p_value, md=md, mdname=md_name, mdline=md_line,
                       short=shorten)
    return env


# --------------------------------------------------------------------------------- figures

@dataclass(frozen=True)
class FigureFile:
    path: str                 # figures/<name>.png, as the document names it
    figure: figs.Figure

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.figure.png).decode("ascii")


_NUMERIC_PER_SEED = ("v_policy", "v_mr_min", "v_mr_max", "v_mr_mean", "v_no_sync", "d")


def _per_seed_frame(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    for col in _NUMERIC_PER_SEED:
        if col in table:
            table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    return table


def _claim_figure(kind: str, claim: dict, regime: dict) -> figs.Figure:
    data = claim["figure_data"]
    if kind == "v_per_seed":
        return figs.v_per_seed(_per_seed_frame(claim["per_seed"]), claim["policy"])
    if kind == "null":
        return figs.null_distribution(data["null"])
    if kind == "psi":
        psi = regime["figure_data"]["psi"]
        table = pd.DataFrame({"run_id": psi["run_id"],
                              "phi": np.asarray(psi["phi"], dtype=float),
                              "vex": np.asarray(psi["vex"], dtype=float)})
        return figs.psi_claim(table, np.asarray(psi["grid_phi"], dtype=float),
                              np.asarray(psi["grid_psi"], dtype=float), float(psi["eps_cal"]),
                              claim["policy"], data["psi"]["policy_runs"],
                              data["psi"]["draw_runs"])
    if kind == "exposure":
        exp = regime["figure_data"]["exposure"]
        runs = pd.DataFrame({k: exp[k] for k in ("run_id", "role", "policy")})
        for k in ("exposure_requests", "violation_rate"):
            runs[k] = np.array([np.nan if v is None else v for v in exp[k]], dtype=float)
        return figs.exposure_scatter(runs, exp["r2"])
    raise ValueError(f"unknown figure kind {kind!r}")


def _mechanisms(doc: dict) -> dict:
    return {m: t for m, t in (doc.get("transfer") or {}).items() if isinstance(t, dict)}


def build_figures(doc: dict) -> dict:
    """Every figure the document names, drawn from its figure data:
    ``{"claims": [{kind: FigureFile}], "regimes": {regime: {kind: FigureFile}},
    "transfer": FigureFile | None}``."""
    claims, regimes = [], {}
    for c in doc["claims"]:
        regime = doc["regimes"][c["regime"]]
        mine = {}
        for kind, path in c["figures"].items():
            if kind in FIGURE_KINDS:
                mine[kind] = FigureFile(path, _claim_figure(kind, c, regime))
            elif c["regime"] not in regimes or kind not in regimes[c["regime"]]:
                regimes.setdefault(c["regime"], {})[kind] = FigureFile(
                    path, _claim_figure(kind, c, regime))
        regimes.setdefault(c["regime"], {})
        claims.append(mine)
    path = doc.get("transfer_figure")
    transfer = FigureFile(path, figs.transfer(_mechanisms(doc))) if path else None
    return {"claims": claims, "regimes": regimes, "transfer": transfer}


def _figure_files(figures: dict) -> list[FigureFile]:
    out = [f for claim in figures["claims"] for f in claim.values()]
    out += [f for reg in figures["regimes"].values() for f in reg.values()]
    if figures["transfer"] is not None:
        out.append(figures["transfer"])
    return out


# ------------------------------------------------------------------------------------ view

def _load_match(claim: dict) -> dict:
    """The page's view of the document's load-match rows (each table capped at
    MAX_TABLE_ROWS rows)."""
    lm = claim.get("load_match") or {"reason": "", "rows": []}
    if lm["reason"]:
        return {"reason": lm["reason"], "rows": [], "bad": []}
    rows = lm["rows"]
    bad = [r for r in rows if not r["passed"]]
    return {"reason": "", "rows": rows[:MAX_TABLE_ROWS], "bad": bad[:MAX_TABLE_ROWS],
            "summary": lm["summary"], "rows_left_out": max(0, len(rows) - MAX_TABLE_ROWS),
            "bad_left_out": max(0, len(bad) - MAX_TABLE_ROWS)}


def _checks_summary(checks: list[dict]) -> str:
    n_pass = sum(1 for ch in checks if ch.get("passed") is True)
    n_fail = sum(1 for ch in checks if ch.get("passed") is False)
    n_na = sum(1 for ch in checks if ch.get("passed") is None)
    return (f"{len(checks)} checks: {n_pass} passed, {n_fail} failed, {n_na} not evaluable")


def _view(audit: dict, figures: dict, embed: bool) -> dict:
    heads = headlines(audit)
    claims = []
    for i, (d, head) in enumerate(zip(audit["claims"], heads)):
        checks = d.get("checks", [])
        per_seed = d.get("per_seed") or []
        wins = sum(1 for r in per_seed if r.get("d") is not None and r["d"] > 0)
        fig = figures["claims"][i]
        claims.append({
            "d": d, "h": head, "anchor": f"claim-{i + 1}",
            "figs": [(k, fig[k]) for k in FIGURE_KINDS if k in fig],
            "fig_src": {k: (f.data_uri if embed else f.path) for k, f in fig.items()},
            "checks": checks, "checks_summary": _checks_summary(checks),
            "blocking": [ch for ch in checks if ch.get("blocking")],
            "noted": [ch for ch in checks if ch.get("passed") is None
                      and not ch.get("blocking") and ch.get("evaluable") is False
                      and not _skipped(ch, head)],
            "per_seed": per_seed,
            "per_seed_summary": (f"{len(per_seed)} seeds: the policy has a lower V than its "
                                 f"draws' mean in {wins}"),
            "load_match": _load_match(d),
            "regime_info": audit.get("regimes", {}).get(d["regime"], {}),
        })
    regimes = []
    for regime, info in sorted(audit.get("regimes", {}).items()):
        reg_figs = figures["regimes"].get(regime, {})
        regimes.append({"name": regime, "info": info,
                        "figs": [(k, f, f.data_uri if embed else f.path)
                                 for k, f in reg_figs.items()]})
    transfer = figures["transfer"]
    exclusions = _exclusions(audit, heads)
    return {
        "audit": audit, "prov": audit.get("provenance", {}), "heads": heads,
        "protocol_hash": protocol_hash(audit), "registration": registration_text(audit),
        "claims": claims, "regimes": regimes, "tiers": audit["protocol"]["tiers"],
        "states": STATES, "exclusions": exclusions, "transfer_cols": TRANSFER_COLUMNS,
        "drain_notes": figs.drain_curve_notes(_mechanisms(audit)),
        "transfer_fig": None if transfer is None else (
            transfer, transfer.data_uri if embed else transfer.path),
    }


def protocol_hash(audit: dict) -> str:
    """The protocol's one printed identity: the first 12 hex digits of its content sha256
    (the hash of its rules, the one ``gate --baseline`` and ``diff`` compare and name); a
    document written before the audit recorded it is hashed from the rules it lists."""
    protocol = audit.get("protocol") or {}
    return str(protocol.get("content_sha256") or content_sha256(protocol))[:12]


def registration_text(audit: dict) -> str | None:
    """How the campaign was registered (``pre_registration.registration``: under the
    reviewer's challenge, or self-registered and why); None for a document that predates it."""
    block = (audit.get("pre_registration") or {}).get("registration")
    return str(block["text"]) if isinstance(block, dict) and block.get("text") else None


def _exclusions(audit: dict, heads) -> list[dict]:
    """Excluded runs (with the claims that lose a seed by them), then claim-level exclusions
    (dropped seeds) not due to an excluded run: ``{what, reason}``."""
    runs = {}
    for e in audit.get("input", {}).get("excluded", []):
        runs[str(e.get("run_id"))] = {"e": e, "claims": []}
    extra = []
    for h in heads:
        for x in h.exclusions:
            rid = None if x["run_id"] is None else str(x["run_id"])
            if rid in runs:
                runs[rid]["claims"].append(h.policy)
            else:
                seed = "" if x["seed"] is None else f" seed {x['seed']}"
                extra.append({"what": f"{h.policy} ({h.regime}){seed}", "reason": x["reason"]})
    out = []
    for rid, item in runs.items():
        e = item["e"]
        seed = f", seed {e['seed']}" if e.get("seed") is not None else ""
        lost = (f"; a missing result for {', '.join(shorten(p, 40) for p in item['claims'])}"
                if item["claims"] else "")
        out.append({"what": f"run {rid}{seed}", "reason": f"{e.get('reason', '')}{lost}"})
    return out + extra


def _skipped(check: dict, head) -> bool:
    return any(r.tier == check.get("tier") and r.state == "skipped" for r in head.ladder)


def render_html(audit: dict, figures: dict, template_dir=None) -> str:
    env = template_env(autoescape=True, template_dir=template_dir)
    return env.get_template("report.html.j2").render(**_view(audit, figures, True))


def render_md(audit: dict, figures: dict, template_dir=None) -> str:
    env = template_env(autoescape=False, template_dir=template_dir)
    text = env.get_template("report.md.j2").render(**_view(audit, figures, False))
    if len(text) > MD_LIMIT:
        cut = text.rfind("\n", 0, MD_LIMIT - 200)
        text = text[:cut] + ("\n\n_(truncated to fit a pull-request comment; the full report "
                             "is report.html and audit.json)_\n")
    return text


# ----------------------------------------------------------------------------------- write

def render(document: dict, template_dir=None) -> dict[str, bytes]:
    """Every file of the report of an audit document, ``{relative path: bytes}``: the
    figures it names, audit.json (the document itself), report.md and report.html.  A pure
    function of the document: it reads no run and no file but the templates."""
    figures = build_figures(document)
    files = {f.path: f.figure.png for f in _figure_files(figures)}
    # the document's floats are rounded already (its figure data on purpose not)
    files["audit.json"] = canonical_json(document, digits=None).encode("utf-8")
    files["report.md"] = render_md(document, figures, template_dir).encode("utf-8")
    files["report.html"] = render_html(document, figures, template_dir).encode("utf-8")
    return files
