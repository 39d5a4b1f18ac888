"""Stub claims, seed pairs and check contexts for the tests of each audit check's decision
(tests/audit/checks/) and of the claim context."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from evalkit.audit.runset import SeedPair
from evalkit.audit.protocol import CheckSpec


def spec(name="check", on_not_evaluable="block", **params):
    return CheckSpec(name, f"{name} description", on_not_evaluable, params)


def draws(seed, ks=(3,), vs=None, durations=None):
    n = len(ks)
    vs = [0.2] * n if vs is None else vs
    return pd.DataFrame({"run_id": [f"s{seed}-d{i}" for i in range(n)], "draw": range(n),
                         "k_observed": [float(k) for k in ks], "violation_rate": vs,
                         "seed": [seed] * n})


def pair(seed, k_policy=3.0, ks=(3,), vs=None, no_sync=True, v_policy=0.1):
    ns = pd.Series({"run_id": f"s{seed}-ns", "violation_rate": 0.05}) if no_sync else None
    return SeedPair(seed=seed, policy_run=f"s{seed}-pol", v_policy=v_policy, k_policy=k_policy,
                    realisation=None, draws=draws(seed, ks, vs), no_sync=ns)


def claim(pairs, policy="ewma", regime="r", oracle=False, backends=None):
    seeds = [p.seed for p in pairs]
    backends = backends or ["torch"] * len(pairs)
    return SimpleNamespace(
        regime=regime, policy=policy, pairs=pairs, seeds=seeds,
        paired=[p for p in pairs if len(p.draws)], oracle=oracle,
        policy_runs=pd.DataFrame({"run_id": [p.policy_run for p in pairs], "seed": seeds,
                                  "backend": backends}))


def ctx(pairs=None, **kw):
    pairs = [pair(0), pair(1)] if pairs is None else pairs
    base = dict(claim=claim(pairs), protocol=SimpleNamespace(accept_vouched=False,
                                                             multiplicity="holm"),
                alpha=0.05, alternative="two-sided")
    base.update(kw)
    return SimpleNamespace(**base)
