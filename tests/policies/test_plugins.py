"""Policy plugins: resolution by name, entry point and module:Class; identity; bad plugins.

Plugins here are written into a temporary directory put on ``sys.path``; the entry point
comes from a hand-written ``.dist-info`` there (what ``pip install`` leaves behind), so
nothing is installed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import uuid

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.policies import (POLICIES, get_policy, policy_identity, resolve_policy)
from tests.support.protocols import BUNDLED

PLUGIN = '''
from evalkit.policies import Decision, Policy


class EveryH(Policy):
    """The same rule as the built-in fixed_h, in a plugin."""
    name = "every_h"

    def __init__(self, H: int = 256):
        super().__init__(H=int(H))
        self.H = int(H)

    def decide(self, state):
        return Decision(state.steps_since_merge >= self.H, float(state.steps_since_merge))


class Peek(Policy):
    """An oracle plugin: it must be handed the request intervals."""
    name = "peek"
    oracle = True

    def reset(self, ctx):
        super().reset(ctx)
        if ctx.future_requests is None:
            raise RuntimeError("an oracle plugin got no future requests")

    def decide(self, state):
        return Decision(True, 0.0)


class Boom(Policy):
    name = "boom"

    def decide(self, state):
        raise ZeroDivisionError("plugin bug in decide")


class NotAPolicy:
    name = "nap"

    def decide(self, state):
        return None


class NoName(Policy):
    def decide(self, state):
        return Decision(False)


class Shadow(Policy):
    name = "fixed_h"

    def decide(self, state):
        return Decision(False)


class NoDecide(Policy):
    name = "no_decide"


class Needs(Policy):
    name = "needs"

    def __init__(self, theta: float):
        if not 0 <= theta <= 1:
            raise ValueError(f"theta must be in [0, 1], got {theta}")
        super().__init__(theta=theta)

    def decide(self, state):
        return Decision(False)


class FakeRole(Policy):
    name = "fake_role"
    role = "matched_random"

    def decide(self, state):
        return Decision(False)


class InstanceOracle(Policy):
    name = "instance_oracle"

    def __init__(self):
        super().__init__()
        self.oracle = True

    def decide(self, state):
        return Decision(False)
'''


@pytest.fixture
def plug(tmp_path, monkeypatch):
    """A plugin module (unique name) and an installed-looking distribution with entry points."""
    mod = f"plug_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{mod}.py").write_text(PLUGIN)
    (site / f"{mod}_broken.py").write_text("import not_a_module_xyz_evalkit\n")
    info = site / "everyh_plugin-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: everyh-plugin\n"
                                   "Version: 1.2.3\n")
    (info / "top_level.txt").write_text(f"{mod}\n{mod}_broken\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [evalkit.policies]
        every_h = {mod}:EveryH
        misnamed = {mod}:Peek
        """))
    monkeypatch.syspath_prepend(str(site))
    yield mod, site
    for name in (mod, f"{mod}_broken"):
        sys.modules.pop(name, None)


def _add_broken_entry_point(site, mod):
    ep = site / "everyh_plugin-1.2.3.dist-info" / "entry_points.txt"
    ep.write_text(ep.read_text() + f"broken = {mod}_broken:Anything\n")


def test_resolves_built_ins_entry_points_and_module_classes(plug):
    mod, _ = plug
    assert resolve_policy("fixed_h") is POLICIES["fixed_h"]
    by_ep = resolve_policy("every_h")
    by_path = resolve_policy(f"{mod}:EveryH")
    assert by_ep is by_path and by_ep.__module__ == mod
    pol = get_policy(f"{mod}:EveryH", H=7)
    assert pol.name == "every_h" and pol.params == {"H": 7} and pol.oracle is False
    assert resolve_policy(f"{mod}:Peek").oracle is True


def test_identity_names_the_distribution_and_hashes_the_source(plug):
    mod, site = plug
    ident = policy_identity(resolve_policy("every_h"))
    want = hashlib.sha256((site / f"{mod}.py").read_bytes()).hexdigest()
    assert ident == {"name": "every_h", "class": f"{mod}:EveryH", "builtin": False,
                     "distribution": "everyh-plugin", "version": "1.2.3",
                     "source_sha256": want}
    builtin = policy_identity(POLICIES["ewma"])
    assert builtin["builtin"] is True and builtin["class"].endswith(":EWMA")
    assert len(builtin["source_sha256"]) == 64


def test_identity_of_code_no_distribution_provides(tmp_path, monkeypatch):
    mod = f"loose_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        ident = policy_identity(resolve_policy(f"{mod}:Boom"))
    finally:
        sys.modules.pop(mod, None)
    assert ident["distribution"] is None and ident["version"] is None
    assert ident["source_sha256"] == hashlib.sha256(
        (tmp_path / f"{mod}.py").read_bytes()).hexdigest()


@pytest.mark.parametrize("spec, params, words", [
    ("{mod}_broken:Anything", {}, ["importing", "not_a_module_xyz_evalkit", "install"]),
    ("{mod}:Missing", {}, ["has no 'Missing'", "class name"]),
    ("{mod}:NotAPolicy", {}, ["not a subclass", "derive the class"]),
    ("{mod}:NoName", {}, ["name", 'set name = "my_policy"']),
    ("{mod}:Shadow", {}, ["built-in policy's name", "name of its own"]),
    ("{mod}:NoDecide", {}, ["does not implement decide"]),
    ("{mod}:FakeRole", {}, ["role 'matched_random'"]),
    ("{mod}:InstanceOracle", {}, ["oracle on the instance", "class attribute"]),
    ("{mod}:EveryH", {"h": 3}, ["unknown parameter(s) ['h']", "valid parameters: H"]),
    ("{mod}:Needs", {}, ["needs parameter(s) ['theta']"]),
    ("{mod}:Needs", {"theta": 2.0}, ["rejected its parameters", "theta must be in [0, 1]"]),
    ("misnamed", {}, ["loads a policy named 'peek'", "name the entry point 'peek'"]),
    ("nope", {}, ["unknown policy 'nope'", "every_h", "package.module:ClassName"]),
    ("a.b:c:d", {}, ["not of the form package.module:ClassName"]),
])
def test_bad_plugins_name_the_spec_and_the_fix(plug, spec, params, words):
    mod, _ = plug
    spec = spec.format(mod=mod)
    with pytest.raises(InputError) as err:
        get_policy(spec, **params)
    text = err.value.format()
    assert spec in text and err.value.fix
    for w in words:
        assert w in text


def _trace_file(tmp_path):
    from evalkit.replay.traces import generate
    tr = generate("square_wave", seed=0, period_s=60.0, burst_s=20.0, quiet_rate=2.0,
                  busy_rate=8.0, duration_s=150.0)
    path = tmp_path / "trace.parquet"
    tr.write(path)
    return path


def _replay(tmp_path, policy, *extra):
    return CliRunner().invoke(cli, [
        "replay", "--trace", str(_trace_file(tmp_path)), "--policy", policy, "--seed", "1",
        "--out", str(tmp_path / "runs"), "--h-min", "40", "--h-max", "120", *extra])


def test_replay_cli_runs_a_module_class_plugin_and_records_its_identity(plug, tmp_path):
    mod, _ = plug
    res = _replay(tmp_path, f"{mod}:EveryH", "--param", "H=50")
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "runs" / "adhoc__every_h__s1" / "run.json").read_text())
    assert meta["complete"] and meta["policy"] == "every_h" and meta["oracle"] is False
    assert meta["policy_identity"]["class"] == f"{mod}:EveryH"
    assert meta["policy_identity"]["distribution"] == "everyh-plugin"
    assert meta["policy_params"] == {"H": 50}


@pytest.mark.parametrize("which, words", [
    ("{mod}:NotAPolicy", ["not a subclass"]),
    ("{mod}_broken:Anything", ["importing"]),
    ("{mod}:EveryH --param X=1", ["unknown parameter(s) ['X']"]),
])
def test_replay_cli_exits_2_for_a_bad_plugin_and_writes_nothing(plug, tmp_path, which, words):
    mod, _ = plug
    spec, *extra = which.format(mod=mod).split()
    res = _replay(tmp_path, spec, *extra)
    assert res.exit_code == 2, res.output
    assert spec in res.output and "fix:" in res.output
    for w in words:
        assert w in res.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_decide_raising_fails_the_run_with_the_traceback_and_nothing_half_written(plug,
                                                                                   tmp_path):
    mod, site = plug
    res = _replay(tmp_path, f"{mod}:Boom")
    assert res.exit_code == 2 and "INCOMPLETE" in res.output and "ZeroDivisionError" in res.output
    runs = tmp_path / "runs"
    assert [p.name for p in runs.iterdir()] == ["adhoc__boom__s1"]     # no .tmp-* leftovers
    meta = json.loads((runs / "adhoc__boom__s1" / "run.json").read_text())
    assert meta["complete"] is False
    assert "ZeroDivisionError: plugin bug in decide" in meta["error"]
    assert "Traceback" in meta["error"] and f"{mod}.py" in meta["error"]
    assert "in decide" in meta["error"]
    req = pd.read_parquet(runs / "adhoc__boom__s1" / "requests.parquet")
    assert len(req) == 0                # no partial request log passed off as a result


CAMPAIGN = """
regime = "plug"
seeds = 2
matched_random_draws = 1
horizon_s = 200.0
inner_step_s = 0.5
h_min = 40
h_max = 120
[slo]
e2e_s = 8.0
[trace]
generator = "square_wave"
period_s = 60.0
burst_s = 20.0
quiet_rate = 2.0
busy_rate = 8.0
prompt_tokens = "lognormal:256,0.5"
output_tokens = "lognormal:64,0.5"
[[policies]]
name = "fixed_h"
params = {{ H = 60 }}
[[policies]]
name = "{mod}:EveryH"
params = {{ H = 60 }}
[[policies]]
name = "every_h"
label = "every_h_ep"
params = {{ H = 60 }}
[[policies]]
name = "{mod}:Peek"
draws = 0
"""


def test_a_campaign_of_plugins_sweeps_and_audits_like_built_ins(plug, tmp_path):
    from evalkit.audit import audit_campaign
    from evalkit.replay.campaign import load_campaign
    from evalkit.replay.sweep import run_campaign

    mod, _ = plug
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(mod=mod))
    camp = load_campaign(path)
    assert [p.label for p in camp.policies] == ["fixed_h", "every_h", "every_h_ep", "peek"]
    runs = tmp_path / "runs"
    summary = run_campaign(path, runs, progress=False, protocol=BUNDLED)
    assert summary.ok, [o.message for o in summary.outcomes if o.status != "ran"]
    for seed in (0, 1):
        base = runs / f"plug__fixed_h__s{seed}"
        for label in ("every_h", "every_h_ep"):
            d = runs / f"plug__{label}__s{seed}"
            meta = json.loads((d / "run.json").read_text())
            assert meta["policy"] == label and meta["policy_identity"]["name"] == "every_h"
            for table in ("requests", "merges"):        # same rule -> the same run
                pd.testing.assert_frame_equal(pd.read_parquet(d / f"{table}.parquet"),
                                              pd.read_parquet(base / f"{table}.parquet"))
        peek = json.loads((runs / f"plug__peek__s{seed}" / "run.json").read_text())
        assert peek["oracle"] is True and peek["complete"]
        assert peek["settings"]["requested"]["oracle_intervals_from"] == f"plug__no_sync__s{seed}"
    audit = audit_campaign(runs)
    claims = {c.policy: c for c in audit.claims}
    assert {"fixed_h", "every_h", "every_h_ep", "peek"} <= set(claims)
    for label in ("every_h", "every_h_ep"):
        ours, theirs = claims[label].data.pairs, claims["fixed_h"].data.pairs
        assert [p.v_policy for p in ours] == [p.v_policy for p in theirs]
        assert [p.k_policy for p in ours] == [p.k_policy for p in theirs]
        assert [c.name for c in claims[label].checks] == [c.name for c in claims["fixed_h"].checks]
    assert claims["peek"].data.oracle


def test_campaign_with_a_bad_plugin_exits_2_naming_file_line_and_spec(plug, tmp_path):
    mod, _ = plug
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(mod=mod).replace(f"{mod}:Peek", f"{mod}:NotAPolicy"))
    res = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    assert "c.toml" in res.output and f"{mod}:NotAPolicy" in res.output
    assert "not a subclass" in res.output and "(line " in res.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_policies_list_shows_parameters_defaults_oracle_and_source(plug):
    mod, site = plug
    res = CliRunner().invoke(cli, ["policies", "list", "--json"])
    rows = {r["name"]: r for r in json.loads(res.output[:res.output.rindex("]") + 1])}
    assert rows["every_h"]["source"] == "entry point (everyh-plugin 1.2.3)"
    assert rows["every_h"]["params"] == {"H": 256} and rows["every_h"]["oracle"] is False
    assert rows["calibrated_offline"]["oracle"] is True
    assert rows["wa"]["params"]["tau"] == 0.0 and rows["fixed_h"]["params"] == {"H": 256}
    assert "loads a policy named 'peek'" in rows["misnamed"]["error"]
    assert res.exit_code == 2                       # the misnamed entry point is unusable
    text = CliRunner().invoke(cli, ["policies", "list"]).output
    assert "every_h  [entry point (everyh-plugin 1.2.3); causal]" in text
    assert "    H=256" in text and "calibrated_offline  [built-in; oracle]" in text


def test_policies_list_exits_0_when_every_plugin_loads_and_2_for_a_broken_one(plug):
    mod, site = plug
    ep = site / "everyh_plugin-1.2.3.dist-info" / "entry_points.txt"
    ep.write_text(f"[evalkit.policies]\nevery_h = {mod}:EveryH\n")
    assert CliRunner().invoke(cli, ["policies", "list"]).exit_code == 0
    _add_broken_entry_point(site, mod)
    res = CliRunner().invoke(cli, ["policies", "list"])
    assert res.exit_code == 2 and "ERROR:" in res.output and "not_a_module_xyz" in res.output


def test_a_changed_plugin_makes_its_finished_runs_stale(plug, tmp_path):
    from evalkit.replay.campaign import load_campaign, plan_campaign
    from evalkit.replay.job import job_fingerprint

    mod, site = plug
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(mod=mod))
    camp = load_campaign(path)
    jobs = {j.run_id: j for j in plan_campaign(camp)}
    before = {r: job_fingerprint(camp, j) for r, j in jobs.items()}
    (site / f"{mod}.py").write_text(PLUGIN + "\n# edited\n")
    policy_identity.cache_clear()
    after = {r: job_fingerprint(camp, j) for r, j in jobs.items()}
    changed = {r for r in jobs if before[r] != after[r]}
    plugin_runs = {f"plug__{label}__s{s}" for label in ("every_h", "every_h_ep", "peek")
                   for s in (0, 1)}
    draws = {f"plug__mr-{label}__s{s}__d0" for label in ("every_h", "every_h_ep")
             for s in (0, 1)}
    assert changed == plugin_runs | draws            # fixed_h and no_sync runs are kept
