"""Decisions of the deployable checks (``not_oracle``, ``real_sidecar``) on a stub context,
and what a sim-only claim is told to add (the campaign's [backend] lines)."""

from __future__ import annotations

import tomllib
from types import SimpleNamespace

import pandas as pd
import pytest

from evalkit.document import tiers as T
from evalkit.audit import registry
from evalkit.audit.checks import deployable as C
from evalkit.audit.checks.core import Check, needs_real_backend, run_check
from evalkit.audit.protocol import TierSpec
from evalkit.policies import POLICIES, Decision, Policy, policy_identity
from evalkit.policies.forecast import EWMA
from evalkit.replay.backends.torch.config import resolve
from evalkit.replay.campaign import parse_campaign
from evalkit.replay.runner import BACKENDS
from evalkit.report.headline import blocker_phrase

from tests.conftest import REPO
from tests.policies.test_causality import FrameReader
from tests.support.decision_stubs import claim, ctx, pair, spec


# ---------------------------------------------------------------------------- deployable

TIMING = {"server_time_allowance_s": 0.05, "server_time_min_share": 0.99}   # the defaults

def _run_ctx(pairs, metas=None, backends=None, has_logs=True, oracle=False):
    """A claim context whose campaign knows each run's backend and run.json."""
    ids = [r for p in pairs for r in [p.policy_run, *p.draws.run_id, p.no_sync.run_id]]
    backends = backends or {}
    runs = pd.DataFrame({"run_id": ids, "backend": [backends.get(r, "torch") for r in ids]})
    metas = metas or {}
    c = ctx(claim=claim(pairs, oracle=oracle),
            runset=SimpleNamespace(has_logs=has_logs, runs=runs, _cache={}))
    c._meta = lambda r: metas.get(r, {"policy": "ewma", "oracle": False})
    return c


def _ran(cls, **extra) -> dict:
    """A run.json of ``cls`` with its recorded code identity."""
    return {"policy": cls.name, "oracle": False, "policy_identity": policy_identity(cls),
            "settings": {"effective": {"policy": {"name": cls.name}}}, **extra}


class Seer(Policy):
    name = "seer"
    oracle = True

    def decide(self, state):
        return Decision(merge=True)


def _installed(monkeypatch, *plugins):
    monkeypatch.setattr(registry, "installed_classes",
                        lambda: [*POLICIES.values(), *plugins])


def test_not_oracle_resolves_the_recorded_code_not_the_name(monkeypatch):
    _installed(monkeypatch, Seer, FrameReader)
    two = [pair(0), pair(1)]
    honest = {r: _ran(EWMA) for r in ("s0-pol", "s1-pol")}
    out = C.not_oracle(_run_ctx(two, metas=honest), spec())
    assert out.passed is True and "causality probe" in out.found
    # the attack: an oracle plugin whose settings name it "ewma"
    seer = _ran(Seer)
    seer["policy"] = "ewma"
    seer["settings"]["effective"]["policy"]["name"] = "ewma"
    out = C.not_oracle(_run_ctx(two, metas={**honest, "s1-pol": seer}), spec())
    assert out.passed is False and "s1-pol" in out.found and "Seer" in out.found
    said = _ran(EWMA, oracle=True)                       # the run's own word counts against it
    assert C.not_oracle(_run_ctx(two, metas={**honest, "s0-pol": said}), spec()).passed is False
    # a non-oracle class that names itself ewma: its word does not match its code
    liar = _ran(FrameReader)
    liar["settings"]["effective"]["policy"]["name"] = "ewma"
    out = C.not_oracle(_run_ctx(two, metas={**honest, "s0-pol": liar}), spec())
    assert out.passed is False and "does not match its code" in out.found


def test_not_oracle_runs_the_causality_probe_on_the_resolved_code(monkeypatch):
    """A plugin that reads the future through the driver's stack, registered and honest
    about its name, fails: causality is tested, not declared."""
    _installed(monkeypatch, FrameReader)
    two = [pair(0), pair(1)]
    metas = {"s0-pol": _ran(EWMA), "s1-pol": _ran(FrameReader)}
    out = C.not_oracle(_run_ctx(two, metas=metas), spec())
    assert out.passed is False and "reads the future" in out.found


@pytest.mark.parametrize("edit, said", [
    (lambda m: m.pop("policy_identity"), "records no policy_identity"),
    (lambda m: m["policy_identity"].update({"class": "mine:Seer"}), "neither a built-in"),
    (lambda m: m["policy_identity"].update({"source_sha256": "0" * 64}),
     "not the code installed"),
])
def test_not_oracle_fails_closed_when_the_code_cannot_be_resolved(monkeypatch, edit, said):
    _installed(monkeypatch)
    meta = _ran(EWMA)
    meta["policy_identity"] = dict(meta["policy_identity"])
    edit(meta)
    out = C.not_oracle(_run_ctx([pair(0)], metas={"s0-pol": meta}), spec())
    assert out.evaluable is False and said in out.found


def test_not_oracle_on_a_summary_table_is_the_tables_word():
    two = [pair(0), pair(1)]
    # a summary table: its oracle column can fail the check, never pass it
    assert C.not_oracle(_run_ctx(two, has_logs=False, oracle=True), spec()).passed is False
    assert C.not_oracle(_run_ctx(two, has_logs=False), spec()).evaluable is False


@pytest.fixture
def every_run_shown(monkeypatch):
    """Every stub run carries a real sidecar's evidence (tested in test_deployable_sidecar_evidence)."""
    monkeypatch.setattr(C, "sidecar_evidence", lambda runset, run_id: None)
    monkeypatch.setattr(C, "server_timing_faults", lambda *args: (None, None))


def test_real_sidecar_needs_every_runs_server_times(monkeypatch, every_run_shown):
    """Scrapes alone do not pass: a run whose server times fail (missing or beyond the
    client's latency) fails the check; runs recorded before the client wrote them leave it
    not evaluable, never passed."""
    sp = spec(**TIMING, real_backends=["torch", "vllm"])
    two = [pair(0), pair(1)]
    monkeypatch.setattr(C, "server_timing_faults", lambda runset, r, *a: (
        "s1-d0: 50.0% of 20 completed requests ..." if r == "s1-d0" else None, None))
    out = C.real_sidecar(_run_ctx(two), sp)
    assert out.passed is False and "s1-d0: 50.0% of 20" in out.found
    monkeypatch.setattr(C, "server_timing_faults", lambda runset, r, *a: (
        None, f"{r}: recorded before server timings (no server_*_s columns)"))
    out = C.real_sidecar(_run_ctx(two), sp)
    assert out.evaluable is False and out.passed is None
    assert out.found.startswith("not evaluable: ") and "recorded before server timings" in out.found


def test_real_sidecar_looks_at_every_run_of_the_seed(every_run_shown):
    sp = spec(**TIMING, real_backends=["torch", "vllm"])
    two = [pair(0), pair(1)]
    assert C.real_sidecar(_run_ctx(two, backends={"s1-pol": "vllm"}), sp).passed is True
    for run in ("s1-pol", "s0-d0", "s1-ns"):          # policy, draw or no-sync on the harness
        out = C.real_sidecar(_run_ctx(two, backends={run: "sim"}), sp)
        assert out.passed is False and f"{run} (sim)" in out.found
    out = C.real_sidecar(_run_ctx(two, backends={"s0-d0": None}), sp)
    assert out.passed is False and "unknown" in out.found
    none = {r: None for r in ("s0-pol", "s0-d0", "s0-ns", "s1-pol", "s1-d0", "s1-ns")}
    assert C.real_sidecar(_run_ctx(two, backends=none), sp).evaluable is False
    sims = {r: "sim" for r in none}
    assert C.real_sidecar(_run_ctx(two, backends=sims),
                          spec(**TIMING, real_backends=["sim"])).passed


def test_real_sidecar_fails_runs_labelled_real_without_the_evidence(monkeypatch):
    """The backend string is not evidence: runs labelled torch whose logs lack a sidecar's
    metrics scrape fail (the attack: simulator runs with backend "torch" in run.json)."""
    monkeypatch.setattr(C, "sidecar_evidence",
                        lambda runset, run_id: None if run_id != "s1-d0" else "no scrape")
    out = C.real_sidecar(_run_ctx([pair(0), pair(1)]),
                         spec(**TIMING, real_backends=["torch", "vllm"]))
    assert out.passed is False and "s1-d0: no scrape" in out.found


# ------------------------------------------- a campaign that never planned a real sidecar

SIX = ("s0-pol", "s0-d0", "s0-ns", "s1-pol", "s1-d0", "s1-ns")


def test_a_claim_replayed_on_the_simulator_only_is_missing_runs_not_failed():
    """No run of the claim on a real sidecar, every one on the simulator: the campaign never
    planned one, so the check is not evaluable and names the [backend] lines to switch to."""
    sp = spec(**TIMING, real_backends=["torch", "vllm"])
    out = C.real_sidecar(_run_ctx([pair(0), pair(1)], backends=dict.fromkeys(SIX, "sim")), sp)
    assert out.passed is None and out.evaluable is False
    assert "s0-pol (sim)" in out.found
    assert out.values["missing_backends"] == ["torch", "vllm"]
    assert out.values["campaign_toml"].splitlines() == ["[backend]",
                                                         'name = "torch"    # or "vllm"']
    assert "[backend.config]" in out.values["campaign_step"]
    assert 'name = "torch" (or vllm)' in out.recommendation
    assert "new runs directory" in out.recommendation


def test_the_real_backend_lines_parse_into_a_valid_campaign_on_that_backend():
    """The printed lines, in place of a sim campaign's [backend] tables, make a campaign the
    reader accepts, on the real backend, whose settings that backend accepts as they are."""
    out = C.real_sidecar(_run_ctx([pair(0)], backends=dict.fromkeys(SIX, "sim")),
                         spec(**TIMING, real_backends=["torch", "vllm"]))
    example = (REPO / "examples" / "bursty.toml").read_text()
    head, rest = example.split("[backend]", 1)
    tail = "[[policies]]" + rest.split("[[policies]]", 1)[1]
    camp = parse_campaign(tomllib.loads(head + out.values["campaign_toml"] + "\n\n" + tail))
    assert camp.backend == "torch" and camp.backend_config == {}
    assert resolve(camp.backend_config, backend="torch")["device"] == "cpu"


def test_the_campaign_backends_are_the_ones_the_campaign_reader_knows():
    assert set(C.CAMPAIGN_BACKENDS) == set(BACKENDS)


@pytest.mark.parametrize("backends, real", [
    ({"s0-d0": "torch"}, ["torch", "vllm"]),      # one run on a real sidecar: a failure
    ({"s0-d0": None}, ["torch", "vllm"]),         # a run with no backend recorded
    ({"s0-d0": "import"}, ["torch", "vllm"]),     # imported runs have no campaign to change
    ({}, ["sglang"]),                             # no campaign can name the real backend
])
def test_runs_that_do_not_meet_the_bar_still_fail(backends, real):
    runs = {**dict.fromkeys(SIX, "sim"), **backends}
    out = C.real_sidecar(_run_ctx([pair(0), pair(1)], backends=runs),
                         spec(**TIMING, real_backends=real))
    assert out.passed is False and out.evaluable is True
    assert "campaign_toml" not in out.values


def test_the_deployable_tier_of_a_sim_only_claim_is_missing_runs_unless_a_check_failed():
    """Through run_check and the tier rule: a sim-only claim whose other deployable checks
    pass stops at deployable as not evaluable (missing runs), never "failed"; beside a real
    failure (no plan) or with runs partly off a real sidecar the tier is failed."""
    def passing(name):
        return Check(name, "deployable", True, True, "e", "ok", "", False)

    sp = spec("real_sidecar", **TIMING, real_backends=["torch", "vllm"])
    sim = run_check("real_sidecar", "deployable",
                    _run_ctx([pair(0), pair(1)], backends=dict.fromkeys(SIX, "sim")), sp)
    assert sim.blocking and sim.status.value == "not_evaluable"
    assert T.tier_state([passing("not_oracle"), sim, passing("pre_registered")]) == \
        T.MISSING_RUNS
    tiers = [TierSpec("deployable", "d", False, ())]
    status = {"deployable": T.MISSING_RUNS}
    assert T.stop_reason(tiers, status, [sim]).startswith(
        "stops before deployable (not evaluable: the campaign has no runs")
    unplanned = Check("pre_registered", "deployable", False, True, "e", "no plan.json", "r",
                      True)
    assert T.tier_state([passing("not_oracle"), sim, unplanned]) == T.FAILED
    mixed = run_check("real_sidecar", "deployable", _run_ctx(
        [pair(0), pair(1)], backends={**dict.fromkeys(SIX, "sim"), "s1-pol": "torch"}), sp)
    assert mixed.status.value == "failed"
    assert T.tier_state([passing("not_oracle"), mixed, passing("pre_registered")]) == T.FAILED


def test_readme_shows_the_backend_lines_the_check_prints():
    toml = needs_real_backend("e", "f", ["torch", "vllm"]).values["campaign_toml"]
    assert f"```toml\n{toml}\n```" in (REPO / "README.md").read_text()


def test_the_report_headline_names_the_backend_runs_to_add():
    out = C.real_sidecar(_run_ctx([pair(0), pair(1)], backends=dict.fromkeys(SIX, "sim")),
                         spec(**TIMING, real_backends=["torch", "vllm"]))
    check = {"name": "real_sidecar", "passed": out.passed, "values": out.values}
    assert blocker_phrase(check, {}, 0.05) == ("real_sidecar not evaluable: add torch or vllm "
                                               "runs to the campaign")
