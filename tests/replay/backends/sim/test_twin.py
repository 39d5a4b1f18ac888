"""The twin file and how the sim backend takes it (CLI --sim-params, campaign key)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.replay.backends import sim
from evalkit.replay.backends.sim.engine import serve_with_windows
from evalkit.replay.backends.sim.model import SimConfig, inverse_cdf
from evalkit.replay.campaign import load_campaign
from evalkit.policies import get_policy
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces import generate
from evalkit.replay.backends.sim.twin import Twin, load_twin, twin_backend_config

SETTINGS = {"max_batch": 8, "iter_base_s": 0.008, "decode_per_seq_s": 0.001,
            "prefill_base_s": 0.006, "prefill_per_token_s": 5e-5, "train_slowdown": 1.5,
            "merge_slowdown": 1.0, "merge_duration_quantiles": [1.5, 1.55, 1.7],
            "send_lag_quantiles": [0.0, 0.001, 0.01], "response_overhead_s": 0.003,
            "step_s": 0.06, "merge_extra": {"gpu": 1.2}}


@pytest.fixture
def twin_file(tmp_path):
    path = tmp_path / "twin.toml"
    Twin(sim=SETTINGS, ci={"iter_base_s": [0.007, 0.009]}, source={"regime": "x"},
         notes=["a note with \"quotes\""]).write(path)
    return path


def test_twin_round_trips_and_hashes_the_file(twin_file):
    twin = load_twin(twin_file)
    assert twin.settings == SETTINGS
    assert twin.sha256 == hashlib.sha256(twin_file.read_bytes()).hexdigest()
    cfg = twin_backend_config(twin_file, {"max_batch": 4})
    assert cfg["max_batch"] == 4 and cfg["twin_sha256"] == twin.sha256
    assert SimConfig.from_dict(cfg).slowdowns() == (1.5, 1.0)


@pytest.mark.parametrize("text, key", [
    ('schema = "evalkit.twin/1"\n[sim]\niter_base_s = -1.0\n', "iter_base_s"),
    ('schema = "evalkit.twin/1"\n[sim]\nwarp = 2\n', "warp"),
    ('schema = "evalkit.twin/1"\n[sim]\nmerge_duration_quantiles = [2.0, 1.0]\n',
     "merge_duration_quantiles"),
    ('[sim]\niter_base_s = 1.0\n', "schema"),
    ('schema = "evalkit.twin/1"\n[sim\n', None),
])
def test_bad_twin_files_are_refused(tmp_path, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_twin(path)
    assert str(path) in err.value.format()
    if key:
        assert key in err.value.format()


def _trace(tmp_path):
    trace = generate("square_wave", seed=1, duration_s=20.0, period_s=10.0, burst_s=3.0,
                     phase_s=2.0, quiet_rate=1.5, busy_rate=7.0)
    path = tmp_path / "t.parquet"
    trace.write(path)
    return path


REPLAY = ["--policy", "fixed_h", "--param", "H=60", "--seed", "1", "--merge-duration-s", "1.5",
          "--inner-step-s", "0.1", "--h-min", "30", "--h-max", "200", "--slo-e2e-s", "0.5"]


def test_replay_with_sim_params_records_the_twin(tmp_path, twin_file):
    trace = _trace(tmp_path)
    res = CliRunner().invoke(cli, ["replay", "--trace", str(trace), "--out",
                                   str(tmp_path / "runs"), "--sim-params", str(twin_file),
                                   *REPLAY])
    assert res.exit_code == 0, res.output
    meta = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    eff = meta["settings"]["effective"]
    assert eff["twin_sha256"] == hashlib.sha256(twin_file.read_bytes()).hexdigest()
    assert eff["slowdown_merge"] == 1.0 and eff["prefill_base_s"] == 0.006
    merges = pd.read_parquet(next((tmp_path / "runs").glob("*/merges.parquet")))
    d = (merges["end_s"] - merges["start_s"]).to_numpy()
    assert len(d) and np.all((d >= 1.5 - 1e-9) & (d <= 1.7 + 1e-9))


def test_sim_params_needs_the_sim_backend(tmp_path, twin_file):
    res = CliRunner().invoke(cli, ["replay", "--trace", str(_trace(tmp_path)), "--out",
                                   str(tmp_path / "runs"), "--sim-params", str(twin_file),
                                   "--backend", "torch", *REPLAY])
    assert res.exit_code == 2 and "--sim-params" in res.output


def test_missing_twin_file_exits_2(tmp_path):
    res = CliRunner().invoke(cli, ["replay", "--trace", str(_trace(tmp_path)), "--out",
                                   str(tmp_path / "runs"), "--sim-params",
                                   str(tmp_path / "none.toml"), *REPLAY])
    assert res.exit_code == 2 and "twin file not found" in res.output


CAMPAIGN = """regime = "twin"
seeds = 2
matched_random_draws = 1
horizon_s = 20.0
merge_duration_s = 1.5
inner_step_s = 0.05
h_min = 20
h_max = 200
min_gap_s = 2.5
max_gap_s = 10.0
[slo]
e2e_s = 0.5
[trace]
generator = "square_wave"
period_s = 10.0
burst_s = 3.0
quiet_rate = 1.5
busy_rate = 7.0
[backend]
name = "{backend}"
sim_params = "twin.toml"
[[policies]]
name = "fixed_h"
params = {{ H = 60 }}
"""


def test_campaign_key_resolves_next_to_the_campaign(tmp_path, twin_file):
    camp_file = tmp_path / "c.toml"
    camp_file.write_text(CAMPAIGN.format(backend="sim"))
    camp = load_campaign(camp_file)
    assert camp.backend_config["twin_sha256"] == load_twin(twin_file).sha256
    assert camp.backend_config["merge_slowdown"] == 1.0
    before = camp.fingerprint()
    Twin(sim=dict(SETTINGS, merge_slowdown=2.0)).write(twin_file)
    assert load_campaign(camp_file).fingerprint() != before     # a new twin: runs are stale


def test_campaign_key_needs_the_sim_backend(tmp_path, twin_file):
    camp_file = tmp_path / "c.toml"
    camp_file.write_text(CAMPAIGN.format(backend="torch"))
    with pytest.raises(InputError) as err:
        load_campaign(camp_file)
    assert "sim_params" in err.value.format()


def test_campaign_key_names_a_missing_twin(tmp_path):
    camp_file = tmp_path / "c.toml"
    camp_file.write_text(CAMPAIGN.format(backend="sim"))
    with pytest.raises(InputError) as err:
        load_campaign(camp_file)
    assert "twin.toml" in err.value.format() and "sim_params" in err.value.format()


# ----------------------------------------------------------------------------- sim model

def _spec(**cfg):
    return ReplaySpec(run_id="r", seed=3, regime="x", horizon_s=60.0, merge_duration_s=2.0,
                      inner_step_s=0.1, h_min=20, h_max=100, min_gap_s=5.0, max_gap_s=20.0,
                      slo={"e2e_s": 0.5, "ttft_s": None, "tpot_s": None},
                      backend_config=cfg)


def test_unset_twin_settings_leave_the_simulator_unchanged():
    # red team for the defaults: explicit zero/None twin settings give byte-identical runs
    trace = generate("square_wave", seed=2, duration_s=60.0, period_s=20.0, burst_s=5.0,
                     quiet_rate=2.0, busy_rate=12.0)
    plain = sim.replay(_spec(), trace, get_policy("fixed_h", H=40))
    explicit = sim.replay(_spec(prefill_base_s=0.0, response_overhead_s=0.0,
                                merge_slowdown=None, step_s=None,
                                merge_duration_quantiles=None, send_lag_quantiles=None),
                          trace, get_policy("fixed_h", H=40))
    pd.testing.assert_frame_equal(plain.requests, explicit.requests)
    pd.testing.assert_frame_equal(plain.merges, explicit.merges)
    changed = sim.replay(_spec(prefill_base_s=0.01), trace, get_policy("fixed_h", H=40))
    assert (changed.requests["end_s"] > plain.requests["end_s"]).mean() > 0.5


def test_merge_slowdown_below_training_speeds_serving_during_merges():
    trace = generate("poisson", seed=4, duration_s=60.0, rate=6.0)
    fast = sim.replay(_spec(train_slowdown=2.0, merge_slowdown=1.0), trace,
                      get_policy("fixed_h", H=40))
    slow = sim.replay(_spec(train_slowdown=2.0, merge_slowdown=4.0), trace,
                      get_policy("fixed_h", H=40))
    lat_fast = fast.requests["end_s"] - fast.requests["arrival_s"]
    lat_slow = slow.requests["end_s"] - slow.requests["arrival_s"]
    assert lat_fast.mean() < lat_slow.mean()
    assert fast.effective["slowdown_merge"] == 1.0


def test_inverse_cdf_matches_numpy_quantiles():
    rng = np.random.default_rng(0)
    x = rng.lognormal(size=5000)
    grid = np.quantile(x, np.linspace(0, 1, 21))
    u = rng.uniform(size=200_000)
    draws = inverse_cdf(grid, u)
    for q in (0.1, 0.5, 0.9):
        assert np.quantile(draws, q) == pytest.approx(np.quantile(x, q), rel=0.03)


def test_serve_with_windows_places_merges_exactly():
    req = pd.DataFrame({"request_id": np.arange(40), "arrival_s": np.linspace(0, 19, 40),
                        "prompt_tokens": 20, "output_tokens": 10})
    cfg = SimConfig.from_dict({"train_slowdown": 1.0, "merge_slowdown": 3.0})
    with_w = serve_with_windows(req, [5.0, 12.0], [6.5, 13.2], cfg, seed=1, horizon_s=20.0)
    without = serve_with_windows(req, [], [], cfg, seed=1, horizon_s=20.0)
    inside = (with_w["arrival_s"] >= 5.0) & (with_w["arrival_s"] < 6.4)
    assert (with_w["end_s"] - without["end_s"])[inside].min() > 0
    assert np.allclose(with_w["end_s"][with_w["arrival_s"] < 4.9],
                       without["end_s"][without["arrival_s"] < 4.9])


def test_prefill_pass_emits_the_first_token_after_the_prefill_part():
    # one request alone: admission = prefill (0.02 + 10 * 0.001) then decode (0.01 each)
    req = pd.DataFrame({"request_id": [0], "arrival_s": [1.0], "prompt_tokens": [10],
                        "output_tokens": [3]})
    base = {"iter_base_s": 0.01, "decode_per_seq_s": 0.0, "prefill_base_s": 0.02,
            "prefill_per_token_s": 0.001, "train_slowdown": 1.0, "send_jitter_s": 0.0}
    chunked = serve_with_windows(req, [], [], SimConfig.from_dict(base), seed=0, horizon_s=5.0)
    split = serve_with_windows(req, [], [], SimConfig.from_dict(dict(base, prefill_pass=True)),
                               seed=0, horizon_s=5.0)
    assert chunked["first_token_s"][0] == pytest.approx(1.0 + 0.04)      # end of admission
    assert chunked["end_s"][0] == pytest.approx(1.0 + 0.04 + 2 * 0.01)
    assert split["first_token_s"][0] == pytest.approx(1.0 + 0.03)        # after the prefill
    assert split["end_s"][0] == pytest.approx(1.0 + 0.04 + 0.01)         # 2nd token at 1.04
