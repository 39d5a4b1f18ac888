"""A forged or edited audit.json is refused before use: exit 2 naming the field path.

`evalkit report`, `diff` and `gate --baseline` read the document through the one JSON front
door and check it against the document's shape (evalkit.document.schema.DOCUMENT).  Each case
here used to end in exit 3 (a crash where the document is drawn) or passed unnoticed (an
unknown status); the special-file and nesting cases used to hang or raise RecursionError.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.document.schema import DOCUMENT, check_derived, check_shape, shape_problem
from tests.support.deadline import alarm_after

DOC = Path(__file__).resolve().parents[1] / "report_documents" / "sim_underpowered.audit.json"
RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def _doc() -> dict:
    return json.loads(DOC.read_text())


def _set(doc: dict, path: str, value) -> dict:
    *head, last = path.split(".")
    node = doc
    for key in head:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return doc


def _invoke(args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


# (field to forge, value, the field path the error names, words of the error)
FORGED = [
    ("claims.0.checks", "x", "claims[0].checks", "is a string, expected an array"),
    ("claims.0.checks", [1, 2], "claims[0].checks[0]", "is an integer, expected an object"),
    ("claims.0.per_seed", {}, "claims[0].per_seed", "is an object, expected an array"),
    ("claims.0.regime", [], "claims[0].regime", "is an array, expected a string"),
    ("regimes.bursty", 1, "regimes.bursty", "is an integer, expected an object"),
    ("claims.0.slo_breakdown", {}, "claims[0].slo_breakdown.text", "is missing"),
    ("claims.0.tier_status.harness", "won", "claims[0].tier_status.harness", "'won'"),
    ("claims.0.claim_status", "proven", "claims[0].claim_status", "'proven'"),
    ("claims.0.checks.0.status", "fine", "claims[0].checks[0].status", "'fine'"),
    ("claims.0.ladder.0.state", "great", "claims[0].ladder[0].state", "'great'"),
    ("claims.0.figures.null", "../../outside.png", "claims[0].figures.null", "inside the report"),
    ("claims.0.figures.null", "/tmp/outside.png", "claims[0].figures.null", "inside the report"),
    ("claims.0.figures.null", "audit.json", "claims[0].figures.null", "inside the report"),
    ("claims.0.n_seeds", True, "claims[0].n_seeds", "is a boolean, expected an integer"),
    ("protocol.version", "1", "protocol.version", "is a string, expected an integer"),
    ("input.n_runs", "![x](http://e)", "input.n_runs", "expected an integer"),
    ("claims.0.load_match.rows", [{"seed": 0}], "claims[0].load_match.rows[0].passed",
     "is missing"),
    # what the sequential gate reads: the planned design and each claim's per-seed units
    ("design", {"sequential": None}, "design.seed_order", "is missing"),
    ("design", {"sequential": {"kind": "sequential"}, "seed_order": [], "why_not": ""},
     "design.sequential.alpha", "is missing"),
    ("design", {"sequential": None, "seed_order": ["3"], "why_not": ""},
     "design.seed_order[0]", "is a string, expected an integer"),
    ("claims.0.units", [{"seed": 0, "v_policy": 0.1, "v_draws": ["x"]}],
     "claims[0].units[0].v_draws[0]", "is a string"),
    ("claims.0.units", [{"seed": 0, "v_policy": 0.1}], "claims[0].units[0].v_draws",
     "is missing"),
]


@pytest.mark.parametrize("field, value, where, words", FORGED,
                         ids=[f"{f}={v!r}"[:40] for f, v, _, _ in FORGED])
def test_a_forged_field_is_named_by_its_path(field, value, where, words):
    doc = _set(_doc(), field, value)
    with pytest.raises(InputError) as err:
        check_shape(doc, "audit.json")
    assert err.value.column == where and words in err.value.message, err.value.format()


def test_the_statuses_are_the_writers():
    from evalkit.audit.checks.core import Status
    from evalkit.document.schema import CHECK_STATES

    assert CHECK_STATES == tuple(s.value for s in Status)


def test_every_written_document_has_the_shape():
    assert shape_problem(_doc(), DOCUMENT, "") is None
    for recorded in DOC.parent.glob("*.audit.json"):
        assert shape_problem(json.loads(recorded.read_text()), DOCUMENT, "") is None, recorded
    for golden in (Path(__file__).resolve().parents[1] / "golden").glob("*.audit.json"):
        assert shape_problem(json.loads(golden.read_text()), DOCUMENT, "") is None, golden


@pytest.mark.parametrize("field, value, where", [
    ("claims.0.checks", [1, 2], "claims[0].checks[0]"),
    ("claims.0.figures.null", "../../outside.png", "claims[0].figures.null"),
    ("claims.0.slo_breakdown", {}, "claims[0].slo_breakdown.text")])
def test_report_and_diff_refuse_a_forged_document_with_exit_2(tmp_path, field, value, where):
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(_set(_doc(), field, value)))
    for args in (["report", forged, "--out", tmp_path / "out"], ["diff", DOC, forged],
                 ["diff", forged, DOC]):
        code, out, err = _invoke(args)
        assert code == 2 and f"'{where}'" in err and str(forged) in err, (args, out + err)
        assert "internal error" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "outside.png").exists()


def test_gate_refuses_a_forged_baseline_before_auditing(tmp_path):
    forged = tmp_path / "old.json"
    forged.write_text(json.dumps(_set(_doc(), "claims.0.tier_status.harness", "won")))
    code, out, err = _invoke(["gate", RUNS, "--policy", "fixed_h", "--baseline", forged])
    assert code == 2 and "'claims[0].tier_status.harness'" in err, out + err


# ----------------------------------------------------------------- the JSON front door

@pytest.fixture
def deadline():
    with alarm_after(60, "a special audit.json blocked a read"):
        yield


def _commands(path: Path, tmp_path: Path):
    return [["report", path, "--out", tmp_path / "out"], ["diff", path, DOC],
            ["gate", RUNS, "--policy", "fixed_h", "--baseline", path]]


@pytest.mark.parametrize("kind, said", [("fifo", "a FIFO"), ("zero", "a character device")])
def test_a_special_audit_json_is_refused_without_blocking(tmp_path, deadline, kind, said):
    path = tmp_path / "audit.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    for args in _commands(path, tmp_path):
        code, out, err = _invoke(args)
        assert code == 2 and said in err and str(path) in err, (args, out + err)


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"claims": [], "claims": [], "protocol": {}}', "'claims' appears twice"),
    ('{"claims": [], "protocol": {}, "alpha": NaN}', "NaN is not allowed"),
    ('{"claims": [], "protocol": {}, "alpha": 1e999}', "1e999 is not allowed"),
    ("\xff\xfe{", "not UTF-8"),
])
def test_hostile_json_in_audit_json_is_exit_2(tmp_path, text, words):
    path = tmp_path / "audit.json"
    path.write_bytes(text.encode("latin-1"))
    for args in _commands(path, tmp_path):
        code, out, err = _invoke(args)
        assert code == 2 and words in err and "internal error" not in err, (args, out + err)


def test_a_document_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    import evalkit.document.schema as document

    monkeypatch.setattr(document, "MAX_DOCUMENT_BYTES", 1000)
    path = tmp_path / "audit.json"
    path.write_text(json.dumps({"claims": [], "protocol": {}, "notes": ["x" * 1000]}))
    code, out, err = _invoke(["diff", path, path])
    assert code == 2 and "more than 1,000 bytes" in err, out + err


@pytest.mark.parametrize("schema, words", [
    (None, "no 'schema' key (written by an evalkit before documents were versioned)"),
    ("evalkit-audit/0", "schema 'evalkit-audit/0'"),
])
def test_a_document_of_another_schema_is_refused_naming_what_it_carries(tmp_path, schema,
                                                                          words):
    from evalkit.document.schema import AUDIT_SCHEMA, read_document

    doc = _doc()
    if schema is None:
        del doc["schema"]
    else:
        doc["schema"] = schema
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        read_document(path)
    assert err.value.column == "schema" and str(path) in str(err.value)
    assert f"{words}; this evalkit renders {AUDIT_SCHEMA!r}" in str(err.value)


def test_read_document_takes_a_golden_document_and_refuses_a_claim_of_an_unknown_regime(
        tmp_path):
    from evalkit.document.schema import read_document
    from tests.golden.compare import golden_path

    doc = json.loads(golden_path("sim_bursty").read_text())
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    assert read_document(path)["claims"] == doc["claims"]
    regime = doc["claims"][0]["regime"]
    del doc["regimes"][regime]
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=f"regime {regime!r} of claim 0 has no figure data"):
        read_document(path)


def test_units_that_lost_draws_are_refused(tmp_path):
    # the sequential gate floors d's variance with the draws in the document's units: a
    # document whose units keep one draw a seed (no floor) contradicts its draws_per_seed
    src = Path(__file__).resolve().parents[1] / "report_documents" / "sim_bursty.audit.json"
    doc = json.loads(src.read_text())
    i, claim = next((i, c) for i, c in enumerate(doc["claims"]) if max(c["draws_per_seed"]) >= 2)
    check_derived(doc, "audit.json")                            # as written: consistent
    for unit in claim["units"]:
        unit["v_draws"] = unit["v_draws"][:1]
    with pytest.raises(InputError) as err:
        check_derived(doc, "audit.json")
    assert err.value.column == f"claims[{i}].units" and "draws_per_seed says" in err.value.message
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    code, out, err_text = _invoke(["gate", path, "--policy", claim["policy"], "--sequential"])
    assert code == 2 and f"claims[{i}].units" in out + err_text


@pytest.mark.parametrize("key, value", [
    ("v_policy", None), ("v_policy", -0.5), ("v_policy", math.nextafter(1.0, 2.0)),
    ("v_policy", 1e308), ("v_draws", None), ("v_draws", -1e-9)])
def test_a_unit_whose_v_is_no_violation_rate_is_refused(tmp_path, key, value):
    # the sequential gate computes d and the diagnostics from the units: a null V was an
    # internal error there, a negative or huge one a verdict on numbers no run can give
    src = Path(__file__).resolve().parents[1] / "report_documents" / "sim_bursty.audit.json"
    doc = json.loads(src.read_text())
    i, claim = next((i, c) for i, c in enumerate(doc["claims"]) if max(c["draws_per_seed"]) >= 2)
    unit = claim["units"][3]
    assert all(0.0 <= v <= 1.0 for v in [unit["v_policy"], *unit["v_draws"]])
    for edge in (0.0, 1.0):                                     # the ends are rates
        unit["v_policy"], unit["v_draws"][1] = edge, edge
        check_derived(doc, "audit.json")
    if key == "v_policy":
        unit["v_policy"], column = value, f"claims[{i}].units[3].v_policy"
    else:
        unit["v_draws"][1], column = value, f"claims[{i}].units[3].v_draws[1]"
    with pytest.raises(InputError) as err:
        check_derived(doc, "audit.json")
    assert err.value.column == column and "is not a violation rate in [0, 1]" in err.value.message
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    code, out, err_text = _invoke(["gate", path, "--policy", claim["policy"], "--sequential"])
    assert code == 2 and column in out + err_text and "Traceback" not in out + err_text


@pytest.mark.parametrize("edit, words", [
    ("drop the last unit", "9 units, its effective_n says 10"),
    ("a unit of another seed", "units of seeds [99] that its seeds do not list")])
def test_units_that_are_not_the_claims_independent_seeds_are_refused(tmp_path, edit, words):
    # the sequential gate decides on the units: a trailing seed dropped with its draws count
    # (draws_per_seed kept consistent) turned a decided campaign back into "continue"
    src = Path(__file__).resolve().parents[1] / "report_documents" / "sim_bursty.audit.json"
    doc = json.loads(src.read_text())
    i, claim = next((i, c) for i, c in enumerate(doc["claims"]) if c.get("units"))
    assert len(claim["units"]) == claim["effective_n"] == 10
    if edit == "drop the last unit":
        claim["units"], claim["draws_per_seed"] = claim["units"][:-1], claim["draws_per_seed"][:-1]
    else:
        claim["units"][-1]["seed"] = 99
    with pytest.raises(InputError) as err:
        check_derived(doc, "audit.json")
    assert err.value.column == f"claims[{i}].units" and words in err.value.message
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    code, out, err_text = _invoke(["gate", path, "--policy", claim["policy"], "--sequential"])
    assert code == 2 and f"claims[{i}].units" in out + err_text
