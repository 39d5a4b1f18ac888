"""run.json keys a policy adds about itself (Policy.run_meta, evalkit/replay/runner.py)."""

from __future__ import annotations

import json

import pytest

from evalkit.errors import InputError
from evalkit.policies import POLICIES, Decision, Policy, get_policy
from evalkit.replay.runner import _empty_output, build_meta, run_one
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces import generate


@pytest.fixture(scope="module")
def trace():
    return generate("poisson", seed=0, rate=1.0, duration_s=60.0)


def _meta(policy, trace):
    spec = ReplaySpec(run_id="r", seed=0, regime="x", horizon_s=60.0, h_min=4, h_max=20)
    return build_meta(spec, trace, policy, _empty_output("none"), policy_label=policy.name)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_only_the_forecasters_record_their_smoothing_factor(name, trace):
    kw = {"k": 1} if name in ("matched_random", "calibrated_offline") else {}
    policy = get_policy(name, **kw)
    meta = _meta(policy, trace)
    if name in ("ewma", "calibrated_online"):
        assert meta["ewma_alpha"] == policy.params["alpha"] == 0.2
    else:
        assert "ewma_alpha" not in meta


def test_ewma_alpha_follows_the_parameter(trace):
    assert _meta(get_policy("ewma", alpha=0.35), trace)["ewma_alpha"] == 0.35
    assert _meta(get_policy("calibrated_online", alpha=0.5), trace)["ewma_alpha"] == 0.5


class _Alpha(Policy):
    """A policy with a parameter named alpha that is no smoothing factor."""

    name = "alpha_named"

    def __init__(self, alpha: float = 0.05):
        super().__init__(alpha=alpha)


class _Clobber(Policy):
    name = "clobber"

    def run_meta(self) -> dict:
        return {"seed": 99, "mine": 1}


class _NotADict(Policy):
    name = "not_a_dict"

    def run_meta(self):
        return [("mine", 1)]


def test_a_parameter_named_alpha_is_not_taken_for_an_ewma(trace):
    assert "ewma_alpha" not in _meta(_Alpha(), trace)


def test_a_policy_key_may_not_replace_a_runner_key(trace):
    with pytest.raises(InputError, match=r"would replace run.json key\(s\) \['seed'\]"):
        _meta(_Clobber(), trace)
    with pytest.raises(InputError, match="returned list, not a dict"):
        _meta(_NotADict(), trace)


def test_a_policy_key_is_written_when_it_is_its_own(trace, tmp_path):
    class Own(Policy):
        name = "own"

        def run_meta(self) -> dict:
            return {"own_setting": 3}

        def decide(self, state):
            return Decision(merge=False)

    spec = ReplaySpec(run_id="own", seed=0, regime="x", horizon_s=80.0, h_min=20, h_max=60)
    res = run_one(spec, trace, Own(), tmp_path)
    meta = json.loads((tmp_path / "own" / "run.json").read_text())
    assert res.complete and meta["own_setting"] == 3
