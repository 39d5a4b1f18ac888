"""`evalkit gate`: a one-screen summary by default, the policy checked before the audit, an
audit.json read instead of auditing again, and a campaign without the harness baselines
told what to add (not evaluable, never failed).

The gate decides on documents: most cases gate the recorded audit of the fixture campaign
(``tests/report_documents/sim_bursty.audit.json``) or a small hand-built one; a few gate the
runs end to end."""

from __future__ import annotations

import json
import shutil
import tomllib
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import evalkit.audit.result as audit_result
from evalkit.audit.checks.core import Check, needs_real_backend, needs_runs
from evalkit.audit.gate import ADD_LINES, summary_lines
from evalkit.audit.protocol import load_protocol
from evalkit.cli.main import cli
from evalkit.compose import run_audit
from evalkit.replay.campaign import parse_campaign

from tests.conftest import REPO

BURSTY = REPO / "fixtures" / "campaigns" / "sim_bursty"
# the fixture campaign's audit.json as 'evalkit audit' writes it
RECORDED = REPO / "tests" / "report_documents" / "sim_bursty.audit.json"
MAX_SUMMARY_LINES = 15


def gate(*args):
    return CliRunner().invoke(cli, ["gate", *map(str, args)])


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """The fixture campaign's audit.json, as 'evalkit audit --out DIR' writes it (recorded)."""
    out = tmp_path_factory.mktemp("gate") / "report"
    out.mkdir()
    shutil.copyfile(RECORDED, out / "audit.json")
    return out / "audit.json"


@pytest.fixture(scope="module")
def no_baselines(tmp_path_factory):
    """The fixture campaign without its fixed_h and pressure_gate runs."""
    runs = tmp_path_factory.mktemp("nobase") / "runs"
    shutil.copytree(BURSTY, runs)
    for run in runs.iterdir():
        if run.name.startswith(("fixed_h-", "pressure_gate-")):
            shutil.rmtree(run)
    return runs


@pytest.fixture(scope="module")
def no_baselines_report(no_baselines, tmp_path_factory):
    """(AuditResult, report directory) of 'evalkit audit' on the campaign without its
    baselines, made once: the gate reads its audit.json (what a gate of the runs decides)."""
    out = tmp_path_factory.mktemp("nobase_report") / "report"
    return run_audit(no_baselines, out), out


@pytest.fixture
def no_audit(monkeypatch):
    """Fail the test if the campaign is read or any claim is evaluated."""
    def refuse(*_a, **_k):
        raise AssertionError("the gate audited")
    monkeypatch.setattr(audit_result, "evaluate_claims", refuse)
    monkeypatch.setattr(audit_result, "load_runset", refuse)


def test_an_unknown_policy_exits_2_listing_the_claims_before_any_claim_is_evaluated(
        monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the gate audited")
    monkeypatch.setattr(audit_result, "evaluate_claims", refuse)
    res = gate(BURSTY, "--policy", "nope")
    assert res.exit_code == 2, res.output
    assert "error: option --policy: no claim for policy 'nope'" in res.output
    assert "column/key" not in res.output
    assert "bursty/calibrated_online, bursty/ewma, bursty/wa" in res.output


def test_an_unknown_policy_in_an_audit_json_exits_2_without_auditing(audited, no_audit):
    res = gate(audited, "--policy", "nope")
    assert res.exit_code == 2 and "bursty/wa" in res.output, res.output
    assert "error: option --policy: no claim for policy 'nope'" in res.output


@pytest.mark.parametrize("tier, code", [("harness", 0), ("matched_budget", 0),
                                        ("placement_gain", 1)])
def test_the_gate_reads_a_fresh_audit_json_instead_of_auditing(audited, no_audit, tier,
                                                                code):
    doc = json.loads(audited.read_text())
    wa = next(c for c in doc["claims"] if c["policy"] == "wa")
    # self-registered under the bundled protocol: wa stops at matched_budget on registration
    assert wa["tier"] == "matched_budget"
    for where in (audited, audited.parent):          # the file or the --out directory
        res = gate(where, "--policy", "wa", "--tier", tier)
        assert res.exit_code == code, res.output
        first = res.output.splitlines()[0]
        assert first.startswith(f"gate {'PASS' if code == 0 else 'FAIL'}: bursty/wa reached "
                                f"{wa['tier']}; required {tier} ")
        assert res.output.splitlines()[1].strip() == wa["verdict"]


def test_the_gate_on_a_document_says_what_the_gate_on_the_runs_says(audited):
    on_runs = gate(BURSTY, "--policy", "ewma", "--verbose")
    on_doc = gate(audited, "--policy", "ewma", "--verbose")
    assert on_runs.exit_code == on_doc.exit_code == 1
    assert on_doc.output == on_runs.output


@pytest.mark.parametrize("change, args, words", [
    (lambda d: d.update(seed=7), (), "audited with --seed 7"),
    (lambda d: d.update(evalkit_version="0.0.1"), (), "written by evalkit 0.0.1"),
    (lambda d: d.update(schema="evalkit-audit/0"), (), "evalkit-audit/0"),
    (None, ("--alpha", "0.1"), "audited under other rules"),
    (lambda d: d.pop("design"), ("--sequential",), "no planned design"),
    (lambda d: d["claims"][1].pop("units"), ("--sequential",), "claims[1].units"),
])
def test_a_stale_or_mismatched_audit_json_is_refused_with_exit_2(audited, no_audit, tmp_path,
                                                                 change, args, words):
    doc = json.loads(audited.read_text())
    if change is not None:
        change(doc)
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    res = gate(path, "--policy", "wa", *args)
    assert res.exit_code == 2, res.output
    assert words in res.output and str(path) in res.output


def _raise_ewma(doc):
    ewma = next(c for c in doc["claims"] if c["policy"] == "ewma")
    assert ewma["tier"] != "deployable"
    return ewma


@pytest.mark.parametrize("forge", [
    lambda c: c.update(tier="deployable"),                     # the tier alone
    lambda c: c.update(tier="deployable", tier_status={t: "passed" for t in c["tier_status"]}),
])
def test_a_document_whose_tier_its_checks_do_not_give_is_refused(audited, no_audit, tmp_path,
                                                                  forge):
    doc = json.loads(audited.read_text())
    forge(_raise_ewma(doc))
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    res = gate(path, "--policy", "ewma", "--tier", "deployable")
    assert res.exit_code == 2, res.output
    assert "records tier 'deployable', but its checks reach" in res.output
    assert "claims[" in res.output and "].tier" in res.output


def test_documents_evalkit_audit_wrote_pass_the_tier_walk_check(audited, no_audit):
    recorded = REPO / "tests" / "report_documents" / "sim_underpowered.audit.json"
    for path in (audited, recorded):
        doc = json.loads(path.read_text())
        for claim in doc["claims"]:
            res = gate(path, "--policy", claim["policy"], "--tier", "matched_budget")
            assert res.exit_code in (0, 1), res.output
            assert f"reached {claim['tier'] or 'no tier'};" in res.output.splitlines()[0]


@pytest.mark.parametrize("policy, tier, code", [("wa", "matched_budget", 0),
                                                ("ewma", "matched_budget", 1),
                                                ("wa", "calibrated", 1)])
def test_the_default_output_fits_one_screen_and_verbose_has_every_check(audited, policy,
                                                                        tier, code):
    res = gate(audited, "--policy", policy, "--tier", tier)
    assert res.exit_code == code
    lines = res.output.splitlines()
    assert len(lines) <= MAX_SUMMARY_LINES, res.output
    assert lines[2].startswith("  G = ") and " pp [" in lines[2] and "p = " in lines[2]
    assert "expected:" not in res.output and "--verbose" in lines[-1]
    verbose = gate(audited, "--policy", policy, "--tier", tier, "--verbose")
    assert verbose.exit_code == code
    assert verbose.output.count("expected:") >= 10
    if code == 1:          # the blocking check is named, with its fix, in the summary
        blocking = [x for x in lines if x.startswith("  [FAIL] ")]
        assert blocking and "fix: " in blocking[0]


def test_a_campaign_without_the_harness_baselines_is_told_what_to_add(no_baselines_report):
    res = gate(no_baselines_report[1] / "audit.json", "--policy", "wa")
    # as before: the claim stops below the harness tier (exit 1), but not evaluable, not failed
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert len(lines) <= MAX_SUMMARY_LINES, res.output
    stop = next(x for x in lines if x.startswith("  stops before harness"))
    assert "(not evaluable: the campaign has no runs" in stop and "failed" not in stop
    assert "  [not evaluable] harness/fixed_cadence_baseline: no fixed_h runs" in res.output
    assert "  [not evaluable] harness/deferral_baseline: no pressure_gate or random_deferral" \
        in res.output
    start = lines.index("  add to the campaign file, then sweep again:")
    toml = "\n".join(x.strip() for x in lines[start + 1:start + 7])
    assert tomllib.loads(toml) == {"policies": [{"name": "fixed_h", "draws": 0},
                                                {"name": "pressure_gate", "draws": 0}]}
    # the lines make a valid campaign that plans both baselines, without draws
    example = (REPO / "examples" / "bursty.toml").read_text()
    trimmed = example.split("[[policies]]", 1)[0] + '[[policies]]\nname = "wa"\n'
    camp = parse_campaign(tomllib.loads(trimmed + toml))
    assert {(p.name, p.draws) for p in camp.policies} >= {("fixed_h", 0), ("pressure_gate", 0)}


def test_the_audit_document_records_missing_runs_apart_from_a_failure(no_baselines_report):
    result, report = no_baselines_report
    wa = next(c for c in result.document["claims"] if c["policy"] == "wa")
    assert wa["tier"] is None and wa["tier_status"]["harness"] == "missing_runs"
    assert wa["ladder"][0] == {"tier": "harness", "state": "not_evaluable", "reached": False,
                               "beyond": False}
    harness = {c["name"]: c for c in wa["checks"] if c["tier"] == "harness"}
    assert {c["status"] for c in harness.values()} == {"not_evaluable"}
    assert harness["fixed_cadence_baseline"]["values"]["missing_policies"] == ["fixed_h"]
    md = (report / "report.md").read_text()
    assert "fixed\\_cadence\\_baseline not evaluable: add fixed\\_h runs to the campaign" in md
    html = (report / "report.html").read_text()
    assert '<pre>[[policies]]\nname = &#34;fixed_h&#34;\ndraws = 0</pre>' in html


REAL_STEP = ("  replace the campaign's [backend] table and its [backend.config] with these lines, "
             "then sweep into a new runs directory:")


def test_a_sim_only_campaign_gated_at_deployable_is_told_the_backend_lines(audited, no_audit):
    """real_sidecar on a campaign that never planned a real sidecar: not evaluable, with the
    [backend] lines in place of the sim ones; exit 1 as before (the claim does not reach
    deployable), and the lines make a valid campaign on a real backend."""
    res = gate(audited, "--policy", "wa", "--tier", "deployable")
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert any(x.startswith("  [not evaluable] deployable/real_sidecar: backends: sim")
               for x in lines), res.output
    assert any(x.startswith("  [FAIL] deployable/pre_registered: ") for x in lines)
    start = lines.index(REAL_STEP)
    toml = "\n".join(x.strip() for x in lines[start + 1:start + 3])
    assert tomllib.loads(toml) == {"backend": {"name": "torch"}}
    example = (REPO / "examples" / "bursty.toml").read_text()
    head, rest = example.split("[backend]", 1)
    camp = parse_campaign(tomllib.loads(head + toml + "\n\n[[policies]]"
                                        + rest.split("[[policies]]", 1)[1]))
    assert camp.backend == "torch" and {p.name for p in camp.policies} >= {"wa"}
    doc = json.loads(audited.read_text())
    wa = next(c for c in doc["claims"] if c["policy"] == "wa")
    real = next(c for c in wa["checks"] if c["name"] == "real_sidecar")
    assert real["status"] == "not_evaluable" and real["values"]["missing_backends"] == [
        "torch", "vllm"]
    # beside a real failure (no plan.json) the tier is failed, not missing runs
    assert wa["tier_status"]["deployable"] == "failed"


def test_campaign_lines_of_two_steps_are_printed_under_each_step():
    """Baselines to add and a backend to replace: each step once, its lines below it."""
    def blocking(name, tier, out):
        return Check(name, tier, None, False, "e", out.found, out.recommendation, True,
                     values=out.values)
    checks = [blocking("fixed_cadence_baseline", "harness", needs_runs("e", "f", "fixed_h")),
              blocking("real_sidecar", "deployable",
                       needs_real_backend("e", "g", ["torch", "vllm"])),
              blocking("deferral_baseline", "harness", needs_runs("e", "h", "pressure_gate"))]
    out = summary_lines(SimpleNamespace(checks=checks), "deployable",
                        load_protocol("diloco-slo"))
    add, real = out.index(f"  {ADD_LINES}"), out.index(REAL_STEP)
    assert out[add + 1:add + 7] == ["    [[policies]]", '    name = "fixed_h"', "    draws = 0",
                                    "    [[policies]]", '    name = "pressure_gate"',
                                    "    draws = 0"]
    assert out[real + 1:real + 3] == ["    [backend]", '    name = "torch"    # or "vllm"']
    assert sum(x.startswith("  add to the") or x.startswith("  replace") for x in out) == 2


def test_a_fail_names_its_blocking_check_once_and_verbose_keeps_the_stop_reason(audited):
    res = gate(audited, "--policy", "ewma")
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert lines[3] == "  stops before matched_budget (failed)", res.output
    assert lines.count("  stops before matched_budget (failed)") == 1
    assert res.output.count("gain_significant") == 1
    assert any(x.startswith("  [FAIL] matched_budget/gain_significant: mean d = ")
               for x in lines)
    verbose = gate(audited, "--policy", "ewma", "--verbose")
    assert verbose.exit_code == 1
    assert verbose.output.splitlines()[3].startswith(
        "  stops before matched_budget (failed): gain_significant: mean d = ")


def test_a_stop_check_the_summary_has_no_room_for_stays_on_the_stop_line():
    """More blocking checks above the stop than the summary lists: the stop line keeps the
    check that stops the walk, so it is named somewhere."""
    from evalkit.audit.gate import SUMMARY_CHECKS, decide

    def failed(name, tier):
        return Check(name, tier, False, True, "e", f"{name} found", f"fix {name}",
                     True).to_dict()
    above = [failed(f"p{i}", "placement_gain") for i in range(SUMMARY_CHECKS)]
    claim = dict(
        regime="r", policy="wa", tier="harness", verdict="v", notes=[],
        tier_status={"harness": "passed", "sidecar_transfer": "not_evaluable",
                     "matched_budget": "failed", "placement_gain": "failed"},
        stop_reason="stops before matched_budget (failed): mb: mb found",
        checks=above + [failed("mb", "matched_budget")])
    doc = {"claims": [claim], "input": {"excluded": []}}
    lines = decide(doc, claim, load_protocol("diloco-slo"), "placement_gain").lines
    assert "  stops before matched_budget (failed): mb: mb found" in lines, lines
    assert not any(x.startswith("  [FAIL] matched_budget/mb") for x in lines)
    claim["checks"] = [failed("mb", "matched_budget")] + above
    lines = decide(doc, claim, load_protocol("diloco-slo"), "placement_gain").lines
    assert "  stops before matched_budget (failed)" in lines, lines
