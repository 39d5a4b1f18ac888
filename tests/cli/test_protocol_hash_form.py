"""One protocol hash form in every human-facing output: plan freeze, the report, gate (the
detail and against a baseline) and diff print the protocol's content sha256 (12 hex digits,
labelled "content sha256"), never the sha256 of its file."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from evalkit.audit.protocol import load_protocol
from evalkit.document.rules import content_sha256
from evalkit.cli.main import cli
from evalkit.runlog.plan import plan_sha256, read_plan
from tests.support.reliability_tools import tiny_campaign

HASH = re.compile(r"(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])")
LABELLED = re.compile(r"content sha256 ([0-9a-f]{12})(?: -> ([0-9a-f]{12}))?")


def invoke(*args, ok=(0, 1)):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code in ok, res.output
    return res.output


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every output of one small campaign's plan freeze, sweep, audit, gate and diff, and
    the hashes that are not the protocol's (the plan's, the input fingerprint, the
    baseline's protocol)."""
    root = tmp_path_factory.mktemp("hashes")
    camp = root / "tiny.toml"
    camp.write_text(tiny_campaign(seeds=2, draws=2))
    runs = root / "runs"
    runs.mkdir()
    out = {"freeze": invoke("plan", "freeze", camp, "--out", runs / "plan.json", ok=(0,))}
    invoke("sweep", camp, "--out", runs, ok=(0,))
    invoke("audit", runs, "--out", root / "report", ok=(0,))
    audit = root / "report" / "audit.json"
    out["report"] = (root / "report" / "report.md").read_text()
    # a baseline audited under other rules: gate --baseline and diff name both content hashes
    doc = json.loads(audit.read_text())
    doc["protocol"]["checks"]["enough_seeds"]["min_seeds"] = 2
    doc["protocol"]["content_sha256"] = content_sha256(doc["protocol"])
    baseline = root / "baseline.json"
    baseline.write_text(json.dumps(doc))
    out["gate"] = invoke("gate", audit, "--policy", "wa", "--verbose")
    out["gate_baseline"] = invoke("gate", audit, "--policy", "wa", "--baseline", baseline,
                                  "--accept-protocol-change")
    out["diff"] = invoke("diff", baseline, audit)
    fresh = json.loads(audit.read_text())
    others = {plan_sha256(read_plan(runs))[:12],
              fresh["provenance"]["input_fingerprint"][:12],
              doc["protocol"]["content_sha256"][:12]}
    return out, others, fresh


def test_every_printed_protocol_hash_is_the_one_content_sha256(outputs):
    out, others, fresh = outputs
    protocol = load_protocol()
    content, file_hash = protocol.content_sha256[:12], protocol.sha256[:12]
    assert content != file_hash and content not in others
    for name, text in out.items():
        assert file_hash not in text, (name, text)
        assert content in {h for pair in LABELLED.findall(text) for h in pair}, (name, text)
        assert set(HASH.findall(text)) - others == {content}, (name, text)
    # the audit.json records both, and says which is which
    assert fresh["provenance"]["protocol_content_sha256"] == protocol.content_sha256
    assert fresh["provenance"]["protocol_sha256"] == protocol.sha256
    assert fresh["protocol"]["content_sha256"] == protocol.content_sha256
