"""A re-run of a finished ``sweep --until-decided`` prints the seed count its verdicts were
computed over (the one the first run recorded), not the size of the first batch."""

from __future__ import annotations

from types import SimpleNamespace

import evalkit.compose.until_decided as until_decided
from evalkit.audit.sequential import SequentialVerdict
from evalkit.replay.job import JobOutcome
from evalkit.replay.sweep import SweepSummary
from tests.audit.test_sequential_gate import CAMPAIGN


def _fake_store(monkeypatch, seeds_in_store: int, decision: str = "pass"):
    """The sweep finds every run complete; the audit sees ``seeds_in_store`` seeds."""
    def run_campaign(camp, runs_dir, *, jobs, **kw):
        return SweepSummary([JobOutcome(j.run_id, "skipped") for j in jobs], runs_dir=runs_dir)

    def verdicts(doc, proto, tier, min_effect):
        return [SequentialVerdict(regime="seqdemo", policy="calibrated_offline",
                                  decision=decision, reason="e-process", n_seeds=seeds_in_store,
                                  max_seeds=12, seeds=list(range(seeds_in_store)))]

    monkeypatch.setattr(until_decided, "run_campaign", run_campaign)
    monkeypatch.setattr(until_decided, "audit_campaign",
                        lambda *a, **k: SimpleNamespace(decision_dict=dict))
    monkeypatch.setattr(until_decided, "sequential_verdicts", verdicts)


def test_a_rerun_of_a_finished_sweep_reports_the_seeds_the_decision_counted(tmp_path,
                                                                             monkeypatch):
    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN)
    _fake_store(monkeypatch, seeds_in_store=10)
    summary = until_decided.sweep_until_decided(camp, tmp_path / "runs", progress=False)
    text = summary.format()
    assert len(summary.batches) == 1 and summary.seeds_run == 2      # stopped at batch 1
    assert "decided after 10 of at most 12 seeds" in text
    assert "decided after 2 " not in text
    assert "the runs directory holds 10 seeds, the verdicts count them all" in text


def test_a_first_run_reports_its_batches(tmp_path, monkeypatch):
    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN)
    _fake_store(monkeypatch, seeds_in_store=2, decision="continue")
    summary = until_decided.sweep_until_decided(camp, tmp_path / "runs", max_seeds=2,
                                                progress=False)
    text = summary.format()
    assert "stopped after 2 of at most 2 seeds with claims undecided" in text
    assert "the verdicts count them all" not in text


def test_the_batches_freeze_their_plan_under_the_protocol_they_are_audited_under(tmp_path,
                                                                                 monkeypatch):
    """The composition loads the protocol once and gives the same one to the sweep (a fresh
    plan is frozen under it) and to the audit, not the bundled one to the sweep."""
    from importlib import resources

    from evalkit.audit.protocol import BUILTIN_PACKAGE, load_protocol
    from tests.support.protocols import BUNDLED

    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN)
    own = tmp_path / "own.toml"
    bundled = resources.files(BUILTIN_PACKAGE).joinpath("diloco-slo.toml").read_text()
    own.write_text(bundled + "\n# our copy\n")
    given = {}

    def run_campaign(camp, runs_dir, *, jobs, protocol, **kw):
        given["sweep"] = protocol
        return SweepSummary([JobOutcome(j.run_id, "ran") for j in jobs], runs_dir=runs_dir)

    def audit(runs_dir, *, protocol, **kw):
        given["audit"] = protocol
        return SimpleNamespace(decision_dict=dict)

    _fake_store(monkeypatch, seeds_in_store=2)
    monkeypatch.setattr(until_decided, "run_campaign", run_campaign)
    monkeypatch.setattr(until_decided, "audit_campaign", audit)
    until_decided.sweep_until_decided(camp, tmp_path / "runs", protocol=own, progress=False)
    assert given["sweep"] is given["audit"]
    assert given["sweep"].sha256 == load_protocol(own).sha256 != BUNDLED.sha256


def test_a_plan_with_a_first_look_runs_to_it_then_a_batch_at_a_time(tmp_path, monkeypatch):
    camp = tmp_path / "seq.toml"
    camp.write_text(CAMPAIGN.replace("batch = 2", "batch = 3\nfirst_look = 5"))
    _fake_store(monkeypatch, seeds_in_store=2, decision="continue")
    summary = until_decided.sweep_until_decided(camp, tmp_path / "runs", progress=False)
    assert [len(b.seeds) for b in summary.batches] == [5, 8, 11, 12]   # the plan's looks
    again = until_decided.sweep_until_decided(camp, tmp_path / "runs2", batch=4,
                                              progress=False)
    assert [len(b.seeds) for b in again.batches] == [4, 8, 12]        # --batch: its own
