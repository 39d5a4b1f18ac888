"""The comparison on screen and in files: terminal text, ``compare.md``, ``compare.html`` and
``compare.json``, the verdict table first.  Every file is a pure function of the document.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import jinja2

from evalkit.fsutil import atomic_write
from evalkit.jsonio import dumps
from evalkit.report.text import md, md_output

__all__ = ["FILES", "fmt", "render_files", "render_text", "write_files"]

FILES = ("compare.html", "compare.md", "compare.json")
EXIT_WORDS = {0: "pass", 1: "fail", 4: "continue"}


def fmt(x, digits: int = 4) -> str:
    """A number in ``digits`` significant digits; "n/a" for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def _p(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "< 0.0001" if x < 1e-4 else f"{x:.4f}"


def _ci(pair) -> str:
    return f"[{fmt(pair[0])}, {fmt(pair[1])}]"


def _env(autoescape: bool) -> jinja2.Environment:
    path = Path(str(resources.files("evalkit.compare").joinpath("templates")))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(path)), autoescape=autoescape,
                             finalize=None if autoescape else md_output,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=fmt, p=_p, ci=_ci, md=md)
    return env


def _pairing_line(doc: dict) -> str:
    p = doc["pairing"]
    if p["paired"]:
        return f"{p['n']} pairs, paired by {p['key']} ({p['reason']})"
    return (f"UNPAIRED: {p['n_a']} runs of A, {p['n_b']} of B compared as independent samples "
            f"-- {p['reason']}")


def _view(doc: dict) -> dict:
    return {"doc": doc, "pairing_line": _pairing_line(doc),
            "outcome": EXIT_WORDS.get(doc["gate"]["exit_code"], "?")}


def render_text(doc: dict) -> str:
    """What ``evalkit compare`` prints: one verdict line per metric, then how it was decided."""
    lines = [f"evalkit compare: A = {doc['inputs'].get('A', 'A')}, "
             f"B = {doc['inputs'].get('B', 'B')}", _pairing_line(doc)]
    if not doc["pairing"]["paired"]:
        lines.append("WARNING: the runs could not be paired; the verdicts below are unpaired "
                     "(Welch) and need more runs than paired ones")
    width = max(len(r["metric"]) for r in doc["metrics"])
    for r in doc["metrics"]:
        lines.append(f"  {r['metric']:<{width}}  {r['verdict_text']}")
        lines.append(f"  {'':<{width}}    B - A = {fmt(r['difference'])} {r['unit']} "
                     f"(A {fmt(r['mean_a'])}, B {fmt(r['mean_b'])}; "
                     f"{r['confidence']:.0%} CI {_ci(r['difference_ci'])}), "
                     f"p = {_p(r['p_two_sided_holm'])} Holm"
                     + (f", equivalence p = {_p(r['p_equivalence_holm'])} Holm"
                        if r["p_equivalence_holm"] is not None else ""))
    for s in doc["skipped"]:
        lines.append(f"  {s['metric']:<{width}}  skipped: {s['reason']}")
    seq = doc["sequential"]
    if seq is not None:
        lines.append(f"look {seq['look']} of {seq['looks']} ({seq['rule']}: each look tests "
                     f"at alpha {fmt(seq['alpha_per_look'])})")
    lines.append(f"protocol {doc['protocol']['name']} v{doc['protocol']['version']} "
                 f"(sha256 {doc['protocol']['sha256'][:12]}), alpha {fmt(doc['protocol']['alpha'])}"
                 f" over {len(doc['metrics'])} metric(s), Holm; {doc['metrics'][0]['method']}")
    lines.append(f"exit {doc['gate']['exit_code']}: {doc['gate']['reason']}")
    return "\n".join(lines) + "\n"


def render_files(doc: dict) -> dict[str, bytes]:
    """``compare.html``, ``compare.md`` and ``compare.json`` of the document."""
    view = _view(doc)
    return {
        "compare.html": _env(True).get_template("compare.html.j2").render(**view).encode(),
        "compare.md": _env(False).get_template("compare.md.j2").render(**view).encode(),
        "compare.json": dumps(doc).encode(),
    }


def write_files(doc: dict, out_dir) -> list[Path]:
    """Write the three files into ``out_dir``, each atomically, compare.json last."""
    out = Path(out_dir)
    written = []
    for name, data in render_files(doc).items():
        written.append(atomic_write(out / name, lambda tmp, data=data: tmp.write_bytes(data)))
    return written
