"""Build an audit's report: report.html (self-contained), report.md, audit.json and figures.

Templates are Jinja files shipped as package data in ``evalkit/report/templates/`` (the one
copy; nothing generates or duplicates them).  The HTML environment autoescapes everything:
run ids, policy names and error texts come from run logs; the Markdown environment escapes
every input string with :func:`evalkit.report.text.md`.  Figures are embedded in the HTML as
base64 PNG data URIs (the page needs no network) and written to ``figures/`` for report.md.
The files are published into ``--out`` atomically by :mod:`evalkit.report.publish`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2
import numpy as np

from evalkit.report import figures as figs
from evalkit.report.headline import STATES, headlines
from evalkit.report.provenance import provenance
from evalkit.report.text import (file_part, honest, md, md_line, md_name, num, p_value, pct, pp,
                                 shorten)

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
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(path)), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=num, pct=pct, pp=pp, p=p_value, md=md, mdname=md_name, mdline=md_line,
                       short=shorten)
    return env


# --------------------------------------------------------------------------------- figures

@dataclass(frozen=True)
class FigureFile:
    name: str                 # file name under figures/
    figure: figs.Figure

    @property
    def path(self) -> str:
        return f"figures/{self.name}"

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.figure.png).decode("ascii")


class _Names:
    """Unique, length-capped figure file names."""

    def __init__(self):
        self.used: set[str] = set()

    def __call__(self, *parts: str) -> str:
        base = "__".join(file_part(p) for p in parts)
        name, i = f"{base}.png", 2
        while name in self.used:
            name, i = f"{base}-{i}.png", i + 1
        self.used.add(name)
        return name


def _claim_figures(c, seed: int, names: _Names) -> dict[str, FigureFile]:
    out = {}
    per_seed = c.per_seed()
    if len(per_seed):
        out["v_per_seed"] = FigureFile(names(c.regime, c.policy, "v_per_seed"),
                                       figs.v_per_seed(per_seed, c.policy))
    test = getattr(c, "sign_flip", None)
    if test is not None:
        statistic = getattr(test, "null_statistic", "mean")
        out["null"] = FigureFile(names(c.regime, c.policy, "null"), figs.null_distribution(
            test.null_distribution(max_points=20_000, seed=seed),
            getattr(test, "null_observed", test.statistic), test.p_value, test.alternative,
            getattr(test, "test", "sign-flip"), statistic))
    ev = c.ctx.regime_evidence
    if ev.psi is not None and ev.phi_table is not None and len(ev.phi_table):
        table = ev.phi_table
        grid = np.linspace(0.0, float(table.phi.max()) * 1.05 + 1e-9, 200)
        draws = [r for p in c.data.pairs for r in p.draws.run_id.astype(str)]
        out["psi"] = FigureFile(names(c.regime, c.policy, "psi"), figs.psi_claim(
            table, grid, np.asarray(ev.psi.predict(grid), dtype=float), float(ev.psi.eps_cal),
            c.policy, [str(p.policy_run) for p in c.data.pairs], draws))
    return out


def build_figures(result, audit: dict) -> dict:
    """``{"claims": [{kind: FigureFile}], "regimes": {regime: {kind: FigureFile}},
    "transfer": FigureFile | None}``."""
    names = _Names()
    claims = [_claim_figures(c, result.seed, names) for c in result.claims]
    regimes: dict = {}
    for c in result.claims:
        if c.regime in regimes:
            continue
        regimes[c.regime] = {}
        ev = c.ctx.regime_evidence
        runs = ev.runs[ev.runs.role != "no_sync"]
        if len(runs) and np.isfinite(runs.exposure_requests.astype(float)).any():
            reg = ev.exposure[0]
            regimes[c.regime]["exposure"] = FigureFile(
                names(c.regime, "exposure"),
                figs.exposure_scatter(runs, None if reg is None else float(reg.r_squared)))
    mechanisms = {m: t for m, t in (audit.get("transfer") or {}).items() if isinstance(t, dict)}
    transfer = FigureFile(names("transfer"), figs.transfer(mechanisms)) if mechanisms else None
    return {"claims": claims, "regimes": regimes, "transfer": transfer}


def _figure_paths(figures: dict) -> list[FigureFile]:
    out = [f for claim in figures["claims"] for f in claim.values()]
    out += [f for reg in figures["regimes"].values() for f in reg.values()]
    if figures["transfer"] is not None:
        out.append(figures["transfer"])
    return out


# ------------------------------------------------------------------------------------ view

def _load_match(c, protocol) -> dict:
    spec = protocol.checks.get("load_match")
    if spec is None:
        return {"reason": "load matching is not part of this protocol", "rows": [], "bad": []}
    table = c.ctx.load_match_table(spec)
    if isinstance(table, str):
        return {"reason": table, "rows": [], "bad": []}
    rows = table.to_dict("records")
    bad = [r for r in rows if not r["passed"]]
    runs = table.groupby("run_id", sort=False).passed.all()
    summary = (f"{int(runs.sum())} of {len(runs)} runs load-matched to their seed's no-sync "
               f"run; {len(bad)} quantit{'y' if len(bad) == 1 else 'ies'} outside tolerance")
    return {"reason": "", "rows": rows[:MAX_TABLE_ROWS], "bad": bad[:MAX_TABLE_ROWS],
            "summary": summary, "rows_left_out": max(0, len(rows) - MAX_TABLE_ROWS),
            "bad_left_out": max(0, len(bad) - MAX_TABLE_ROWS)}


def _checks_summary(checks: list[dict]) -> str:
    n_pass = sum(1 for ch in checks if ch.get("passed") is True)
    n_fail = sum(1 for ch in checks if ch.get("passed") is False)
    n_na = sum(1 for ch in checks if ch.get("passed") is None)
    return (f"{len(checks)} checks: {n_pass} passed, {n_fail} failed, {n_na} not evaluable")


def _view(result, audit: dict, figures: dict, embed: bool) -> dict:
    heads = headlines(audit)
    claims = []
    for i, (c, d, head) in enumerate(zip(result.claims, audit["claims"], heads)):
        gain = d.get("mean_diff")
        checks = [dict(ch, found=honest(ch.get("found"), gain)) for ch in d.get("checks", [])]
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
            "load_match": _load_match(c, result.protocol),
            "regime_info": audit.get("regimes", {}).get(c.regime, {}),
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
        "claims": claims, "regimes": regimes, "tiers": audit["protocol"]["tiers"],
        "states": STATES, "exclusions": exclusions, "transfer_cols": TRANSFER_COLUMNS,
        "drain_notes": figs.drain_curve_notes(
            {m: t for m, t in (audit.get("transfer") or {}).items() if isinstance(t, dict)}),
        "transfer_fig": None if transfer is None else (
            transfer, transfer.data_uri if embed else transfer.path),
    }


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


# ----------------------------------------------------------------------------------- write

def build_report(result, template_dir=None) -> dict[str, bytes]:
    """Every file of the report, ``{relative path: bytes}``; sets ``result.figures`` and
    ``result.files``."""
    from evalkit.audit import canonical_json

    audit = result.to_dict()
    audit["provenance"] = provenance(result)
    figures = build_figures(result, audit)
    result.figures = {}
    for c, d, fig in zip(result.claims, audit["claims"], figures["claims"]):
        paths = {kind: f.path for kind, f in fig.items()}
        paths.update({kind: f.path for kind, f in
                      figures["regimes"].get(c.regime, {}).items()})
        d["figures"] = dict(sorted(paths.items()))
        result.figures.update({f"{c.regime}\0{c.policy}/{k}": v for k, v in paths.items()})
    if figures["transfer"] is not None:
        audit["transfer_figure"] = figures["transfer"].path
    files = {f.path: f.figure.png for f in _figure_paths(figures)}
    files["audit.json"] = canonical_json(audit).encode("utf-8")
    files["report.md"] = render_md(result, audit, figures, template_dir).encode("utf-8")
    files["report.html"] = render_html(result, audit, figures, template_dir).encode("utf-8")
    result.files = {"html": "report.html", "md": "report.md", "json": "audit.json",
                    "figures": sorted(f.path for f in _figure_paths(figures))}
    return files


def write_reports(result, out_dir: Path, template_dir=None):
    """Build the report and publish it into ``out_dir`` (see :mod:`evalkit.report.publish`)."""
    from evalkit.report.publish import publish

    files = build_report(result, template_dir)
    return publish(out_dir, files)
