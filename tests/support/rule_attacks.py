"""An honest fixture campaign to attack and the gate to judge it, for the adversarial tests
of the rules the audit judges by (SLO breakdown, protocol rules, verdict words, names,
table word)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli

CAMPAIGNS = Path(__file__).resolve().parents[2] / "fixtures" / "campaigns"
BASE = "sim_missing_no_sync"     # wa = good on 7 seeds, 2 draws each: reaches matched_budget


@pytest.fixture()
def runs(tmp_path):
    out = tmp_path / "runs"
    shutil.copytree(CAMPAIGNS / BASE, out)
    return out


def gate(path, *extra, policy="wa"):
    return CliRunner().invoke(cli, ["gate", str(path), "--policy", policy, *extra])


def check(claim, name):
    return next(c for c in claim.checks if c.name == name)


def run_dirs(root: Path):
    return sorted(d for d in root.iterdir() if (d / "run.json").exists())


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def edit_requests(run_dir: Path, fn) -> None:
    path = run_dir / "requests.parquet"
    pd.read_parquet(path).pipe(fn).to_parquet(path, index=False)


# ------------------------------------------------------- the gate compares rules, not labels

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "diloco-slo.toml"


def _baseline(runs: Path, out: Path, *extra) -> Path:
    res = CliRunner().invoke(cli, ["audit", str(runs), "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return out / "audit.json"


@pytest.fixture(scope="module")
def base_audit(tmp_path_factory) -> dict:
    """audit.json of the unmodified base campaign (the accepted baseline)."""
    out = tmp_path_factory.mktemp("baseline") / "report"
    return json.loads(_baseline(CAMPAIGNS / BASE, out).read_text())


@pytest.fixture()
def base(base_audit, tmp_path) -> Path:
    """A writable copy of the baseline's audit.json."""
    path = tmp_path / "old" / "audit.json"
    path.parent.mkdir()
    path.write_text(json.dumps(base_audit))
    return path


def _worse_policy(runs: Path, every: int = 5, extra_s: float = 6.0) -> None:
    """Every ``every``-th request of each wa run takes ``extra_s`` longer: wa loses."""
    def slower(req):
        req = req.copy()
        idx = req.index[::every]
        req.loc[idx, "end_s"] += extra_s
        return req
    for d in run_dirs(runs):
        if d.name.startswith("wa-"):
            edit_requests(d, slower)


# ------------------------------------------------------------ words that match the numbers

def _paired_table(path, d, v_policy=0.1):
    """Per seed: wa at ``v_policy``, one matched-random row ``d[seed]`` above it, K = 4 both."""
    rows = []
    for seed, diff in enumerate(d):
        rows.append({"policy": "wa", "seed": seed, "violation_rate": v_policy, "K": 4,
                     "draws_per_row": 1})
        rows.append({"policy": "matched_random", "seed": seed, "matched_to": "wa", "K": 4,
                     "violation_rate": v_policy + diff, "draws_per_row": 1})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _vouched(min_effect=None):
    from dataclasses import replace

    from evalkit.audit.protocol import load_protocol

    proto = load_protocol().with_accept_vouched(True)
    if min_effect is not None:
        spec = proto.checks["gain_significant"]
        spec = replace(spec, params={**spec.params, "min_effect": min_effect})
        proto = replace(proto, checks={**proto.checks, "gain_significant": spec})
    return proto
