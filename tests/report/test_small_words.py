"""Small words of what evalkit prints: the input named once, sentences that do not run into each
other, one protocol-hash form, a drift share that is never negative, one plan note per
``--until-decided``, and the CPU-real run count said the same everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalkit.document import words as wording
from evalkit.document.rules import protocol_change
from evalkit.report.render import render_html, render_md
from tests.conftest import REPO

DOC = Path(__file__).resolve().parents[1] / "report_documents" / "sim_underpowered.audit.json"


def _doc() -> dict:
    return json.loads(DOC.read_text())


def _no_figures(doc: dict) -> dict:
    return {"claims": [{} for _ in doc["claims"]], "regimes": {}, "transfer": None}


def test_the_input_is_named_once_with_what_it_is():
    doc = _doc()
    doc["input"].update(kind="runs", name="runs")
    page = render_html(doc, _no_figures(doc))
    assert "input runs <b>runs</b>" not in page
    assert f"input <b>runs</b> (run directories), {doc['input']['n_runs']} runs" in page


def test_the_calibration_and_exposure_sentences_do_not_run_together():
    doc = _doc()
    page = render_html(doc, _no_figures(doc))
    assert "leave-one-seed-out. V regressed" in page or "leave-one-seed-out. V on exposure" \
        in page
    assert not re.search(r"seed-out\.V", page)


def test_report_shows_the_protocol_hash_the_gate_and_diff_name():
    """One form: the content sha256 of the rules (``gate --baseline`` and ``diff`` print it),
    never the file text's sha256 beside it."""
    doc = _doc()
    content, text = doc["protocol"]["content_sha256"], doc["protocol"]["sha256"]
    assert content[:12] != text[:12]
    changed = json.loads(json.dumps(doc["protocol"]))
    changed["alpha"] = 0.01
    changed.pop("content_sha256")
    assert f"content sha256 {content[:12]} ->" in protocol_change(doc["protocol"], changed)
    for shown in (render_md(doc, _no_figures(doc)), render_html(doc, _no_figures(doc))):
        assert content[:12] in shown and text[:12] not in shown
    legacy = _doc()                        # written before content_sha256 was recorded
    legacy["protocol"].pop("content_sha256")
    assert f"content sha256 {content[:12]}" in render_md(legacy, _no_figures(legacy))


@pytest.mark.parametrize("share, words", [
    (-0.91, "drift explains none of G (adjusting for it raises G by 91%)"),
    (0.57, "57% of G explained by drift"), (0.0, "0% of G explained by drift")])
def test_a_drift_share_is_worded_by_its_sign(share, words):
    assert wording.drift_share_words(share) == words


def test_until_decided_keeps_one_plan_note(monkeypatch, tmp_path):
    """Batch 1 writes the plan, batch 2 follows it: one note about the plan, the first."""
    from evalkit.compose import until_decided as ud

    notes = iter([["plan plan.json written (sha256 0123456789ab)", "lock taken"],
                  ["runs follow the existing plan.json (sha256 0123456789ab)", "lock taken"]])
    camp = SimpleNamespace(design={"kind": "sequential", "max_seeds": 4, "batch": 2},
                           seeds=[0, 1, 2, 3], path=None)
    undecided = [SimpleNamespace(decided=False, decision="continue", n_seeds=2)]
    monkeypatch.setattr(ud, "load_campaign", lambda c: camp)
    monkeypatch.setattr(ud, "load_protocol", lambda p: SimpleNamespace(tier=lambda t: t))
    monkeypatch.setattr(ud, "plan_campaign", lambda c: [SimpleNamespace(seed=s)
                                                       for s in camp.seeds])
    monkeypatch.setattr(ud, "run_campaign", lambda *a, **k: SimpleNamespace(
        notes=next(notes), ok=True, count=lambda state: 0))
    monkeypatch.setattr(ud, "audit_campaign",
                        lambda *a, **k: SimpleNamespace(decision_dict=dict))
    monkeypatch.setattr(ud, "sequential_verdicts", lambda *a, **k: undecided)
    summary = ud.sweep_until_decided("c.toml", tmp_path / "runs", min_effect=0.01)
    assert len(summary.batches) == 2
    assert summary.notes == ["plan plan.json written (sha256 0123456789ab)", "lock taken"]


def test_the_cpu_real_run_count_is_the_committed_one_everywhere():
    runs = [p for p in (REPO / "examples" / "cpu_real" / "runs").iterdir()
            if (p / "run.json").is_file()]
    seeds = {json.loads((p / "run.json").read_text())["seed"] for p in runs}
    examples = (REPO / "examples" / "README.md").read_text()
    said = re.search(r"\[`cpu_real/`\]\(cpu_real/\): (\d+) torch runs \((\d+) seeds", examples)
    assert said and (int(said[1]), int(said[2])) == (len(runs), len(seeds))
    readme = re.sub(r"\s+", " ", (REPO / "README.md").read_text())
    said = re.search(r"\*\*The CPU-real evidence\*\*.*?(\d+) seeds ×.*?= (\d+) runs", readme)
    assert said and (int(said[2]), int(said[1])) == (len(runs), len(seeds))
