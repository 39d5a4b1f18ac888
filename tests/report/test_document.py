"""The report is a pure function of the audit document: ``render(document)`` and
``evalkit report AUDIT.json --out DIR`` need no runs.

tests/report_documents/ holds one recorded document and the report.md the audit wrote beside
it (``evalkit audit fixtures/campaigns/sim_underpowered --out DIR``: one claim, every figure
kind).  The fast tests render that document; the slow one audits the campaign afresh and checks
the recorded pair is still what the audit writes (re-record both files when it is not).
"""

from __future__ import annotations

import ast
import builtins
import copy
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.document.schema import AUDIT_SCHEMA
from evalkit.jsonio import canonical_json
from evalkit.report.render import (_claim_figure, _environment, build_figures, render,
                                   render_html)
from tests.conftest import REPO

DOCS = Path(__file__).resolve().parents[1] / "report_documents"
DOC = DOCS / "sim_underpowered.audit.json"


def _doc() -> dict:
    return json.loads(DOC.read_text())


def _report(*args):
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
            if p.is_file()}


# ------------------------------------------------------------------- render(document)

def test_render_of_the_recorded_document_gives_the_audits_report_md():
    files = render(_doc())
    assert files["report.md"] == (DOCS / "sim_underpowered.report.md").read_bytes()
    assert files["audit.json"] == DOC.read_bytes()          # the document, unchanged
    doc = _doc()
    named = sorted(p for c in doc["claims"] for p in c["figures"].values())
    assert sorted(k for k in files if k.startswith("figures/")) == named
    assert {k.split("__")[-1] for k in named} == {"v_per_seed.png", "null.png", "psi.png",
                                                    "exposure.png"}
    assert all(files[k][:8] == b"\x89PNG\r\n\x1a\n" for k in named)


def test_render_reads_no_file_but_its_templates(monkeypatch):
    """Every file render opens is a template or matplotlib's own (fonts): no run.json, no
    Parquet table, no fixture, no audit.json."""
    doc, opened = _doc(), []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    _environment.cache_clear()             # the templates are read again, by this render
    monkeypatch.setattr(builtins, "open", spy)
    render(doc)
    repo = [p for p in opened if p.startswith(str(REPO))]
    assert repo and all(p.endswith(".j2") for p in repo), repo
    assert not [p for p in opened if p.endswith(("run.json", ".parquet", "audit.json"))]


def test_figures_are_drawn_from_the_documents_figure_data():
    """Change one figure's data in the document: that figure changes."""
    doc = _doc()
    claim = doc["claims"][0]
    regime = doc["regimes"][claim["regime"]]
    base = {k: _claim_figure(k, claim, regime).png for k in ("null", "psi", "v_per_seed")}
    edited = copy.deepcopy(claim)
    null = edited["figure_data"]["null"]
    null["counts"] = [0] * (len(null["counts"]) - 1) + [sum(null["counts"])]
    assert _claim_figure("null", edited, regime).png != base["null"]
    assert _claim_figure("v_per_seed", edited, regime).png == base["v_per_seed"]
    edited_regime = copy.deepcopy(regime)
    edited_regime["figure_data"]["psi"]["eps_cal"] *= 3
    assert _claim_figure("psi", claim, edited_regime).png != base["psi"]
    edited["per_seed"][0]["v_policy"] += 0.1
    assert _claim_figure("v_per_seed", edited, regime).png != base["v_per_seed"]


def test_the_page_shows_the_documents_load_match_rows():
    doc = _doc()
    figures = build_figures(doc)
    lm = doc["claims"][0]["load_match"]
    assert lm["reason"] == "" and lm["rows"] and lm["summary"]
    summary = lm["summary"].split("'")[0]          # the page escapes the apostrophe
    page = render_html(doc, figures)
    assert summary in page
    edited = copy.deepcopy(doc)
    edited["claims"][0]["load_match"] = {"reason": "not evaluable: a marker reason",
                                         "rows": []}
    page = render_html(edited, figures)
    assert "not evaluable: a marker reason" in page and summary not in page


# ----------------------------------------------------------------- evalkit report

def test_report_command_rerenders_the_recorded_document(tmp_path):
    res = _report(DOC, "--out", tmp_path / "out")
    assert res.exit_code == 0, res.output
    got = _files(tmp_path / "out")
    assert got["audit.json"] == DOC.read_bytes()
    assert got["report.md"] == (DOCS / "sim_underpowered.report.md").read_bytes()
    # a report directory names its audit.json too, and the result is the same
    res = _report(tmp_path / "out", "--out", tmp_path / "again")
    assert res.exit_code == 0, res.output
    assert _files(tmp_path / "again") == got


def _bad(tmp_path, text: str, *expected: str):
    path = tmp_path / "audit.json"
    path.write_text(text)
    res = _report(path, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert str(path) in res.output and "evalkit audit" in res.output, res.output
    for part in expected:
        assert part in res.output, res.output
    assert not (tmp_path / "out").exists()
    return res


def test_truncated_document_exits_2_naming_the_file(tmp_path):
    text = DOC.read_text()
    _bad(tmp_path, text[:len(text) // 2], "not valid JSON")


def test_document_of_another_schema_version_exits_2(tmp_path):
    doc = _doc()
    doc["schema"] = "evalkit-audit/0"
    _bad(tmp_path, json.dumps(doc), "'evalkit-audit/0'", AUDIT_SCHEMA, "schema")


def test_unversioned_document_exits_2(tmp_path):
    """A recorded audit.json from before documents were versioned (no schema, no figure
    data) is refused, not half-drawn."""
    doc = _doc()
    del doc["schema"]
    for claim in doc["claims"]:
        claim.pop("figure_data", None)
    _bad(tmp_path, json.dumps(doc), "no 'schema' key")


def test_not_an_audit_exits_2(tmp_path):
    _bad(tmp_path, json.dumps({"schema": AUDIT_SCHEMA, "runs": []}), "not an evalkit audit")


@pytest.mark.parametrize("drop", ["figure_data", "load_match", "per_seed"])
def test_document_without_what_the_report_draws_exits_2(tmp_path, drop):
    doc = _doc()
    del doc["claims"][0][drop]
    _bad(tmp_path, json.dumps(doc), f"claims[0].{drop}")


def test_document_with_broken_figure_data_exits_2(tmp_path):
    doc = _doc()
    doc["claims"][0]["figure_data"]["null"] = {"edges": "x"}
    _bad(tmp_path, json.dumps(doc), "cannot be drawn")


def test_missing_document_exits_2(tmp_path):
    res = _report(tmp_path / "nope.json", "--out", tmp_path / "out")
    assert res.exit_code == 2 and "nope.json" in res.output


# ------------------------------------------------------------------------ the layers

def _evalkit_imports(path: Path) -> set[str]:
    """Every `evalkit...` module a file imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evalkit"):
            # `from evalkit.document import words` imports the module evalkit.document.words
            out |= ({f"{node.module}.{a.name}" for a in node.names}
                    if node.module in ("evalkit", "evalkit.audit", "evalkit.report", "evalkit.document")
                    else {node.module})
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("evalkit")}
    return out


def test_the_audit_never_imports_the_report_and_the_report_nothing_of_the_audit():
    for path in sorted((REPO / "evalkit" / "audit").rglob("*.py")):
        upward = {m for m in _evalkit_imports(path) if m.startswith("evalkit.report")
                  or m == "evalkit.compose"}
        assert not upward, path
    for path in sorted((REPO / "evalkit" / "report").rglob("*.py")):
        from_audit = {m for m in _evalkit_imports(path)
                      if m == "evalkit.audit" or m.startswith("evalkit.audit.")}
        assert not from_audit, (path, from_audit)


# ------------------------------------------------------------------- a fresh audit

@pytest.mark.slow        # one audit of a fixture campaign (~20-35 s on 2 shared cores)
def test_fresh_audit_rerenders_byte_identically_without_its_runs(tmp_path):
    runs = tmp_path / "sim_underpowered"
    shutil.copytree(REPO / "fixtures" / "campaigns" / "sim_underpowered", runs)
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(tmp_path / "audit")])
    assert res.exit_code in (0, 1), res.output
    shutil.rmtree(runs)
    res = _report(tmp_path / "audit" / "audit.json", "--out", tmp_path / "again")
    assert res.exit_code == 0, res.output
    first, again = _files(tmp_path / "audit"), _files(tmp_path / "again")
    assert again == first             # html, md, audit.json, figures and the manifest
    # the recorded pair is what the audit writes today
    assert first["audit.json"] == DOC.read_bytes()
    assert first["report.md"] == (DOCS / "sim_underpowered.report.md").read_bytes()
    assert json.loads(first["audit.json"])["schema"] == AUDIT_SCHEMA
    assert canonical_json(json.loads(first["audit.json"]), digits=None).encode() == \
        first["audit.json"]


def test_run_audit_is_one_function_under_its_public_names():
    import evalkit
    import evalkit.audit
    import evalkit.compose

    assert evalkit.run_audit is evalkit.compose.run_audit
    assert evalkit.audit_campaign is evalkit.audit.audit_campaign
    assert not hasattr(evalkit.audit, "run_audit")     # the composition is not the audit's
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        evalkit.nope    # noqa: B018 (the lazy names do not swallow unknown ones)
