"""tools/level_probe.py: every run noise has mean 1 (the equal-means null holds), the
zero-inflated ones hold their share of zeros, and the report's summary is derived from its
table."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
probe = load_script(ROOT / "tools" / "level_probe.py", "level_probe")


@pytest.mark.parametrize("noise", probe.NOISES)
def test_run_noise_has_mean_one(noise):
    x = probe.run_noise(np.random.default_rng(0), noise, 2_000_000)
    tolerance = 0.02 if noise in ("pareto 2.5", "lognormal 1.2") else 0.006
    assert x.mean() == pytest.approx(1.0, abs=tolerance)
    assert np.all(x >= 0)


@pytest.mark.parametrize("zero", [0.5, 0.8])
def test_zero_inflated_share(zero):
    x = probe.run_noise(np.random.default_rng(1), f"zero-inflated {zero}", 400_000)
    assert np.mean(x == 0) == pytest.approx(zero, abs=0.003)


@pytest.mark.parametrize("policy", probe.POLICIES)
def test_campaigns_are_at_equal_means(policy):
    p, dr = probe.campaigns(np.random.default_rng(2), 20_000, 10, 3, "bursts x8 on 5%",
                            policy, 0.2)
    assert p.shape == (20_000, 10) and dr.shape == (20_000, 10, 3)
    assert p.mean() / dr.mean() == pytest.approx(1.0, abs=0.01)


def test_summary_is_the_tables_maximum(tmp_path):
    out = tmp_path / "probe.md"
    assert probe.main(["--campaigns", "60", "--seed", "3", "--out", str(out)]) == 0
    text = out.read_text()
    sections, header = {}, None
    for line in text.splitlines():
        if line.startswith("| noise"):
            header = line
        elif line.startswith("| ") and header is not None:
            sections.setdefault(header, []).append(
                [c.strip() for c in line.strip("|").split("|")])
    power_rows = next(v for k, v in sections.items() if "gate: pass" in k)
    sequential_rows = next(v for k, v in sections.items() if "mean seeds" in k)
    rows = next(v for k, v in sections.items() if "false \"worse\"" in k)
    assert len(power_rows) == 9 and all(0 <= float(x) <= 1 for r in power_rows for x in r[3:])
    assert len(sequential_rows) == (len(probe.NOISES) * len(probe.POLICIES)
                                    * len(probe.SEQUENTIAL_SEED_SDS))
    assert all(0 <= float(r[3]) <= 1 and 5 <= float(r[4]) <= 40 for r in sequential_rows)
    assert len(rows) == (len(probe.NOISES) * len(probe.DESIGNS) * len(probe.POLICIES)
                         * len(probe.SEED_SDS))
    for noise in probe.NOISES:
        for policy in probe.POLICIES:
            rates = [float(r[5].split()[0]) for r in rows if r[0] == noise and r[3] == policy]
            line = next(x for x in text.splitlines() if x.startswith(f"- {noise}, {policy}:"))
            assert float(re.search(r": ([\d.]+) \(", line).group(1)) == max(rates)
            assert ("over" in line) == (max(rates) > probe.TARGET)
