"""Choose the CPU-real campaign's number of seeds from this pilot with `evalkit plan power`.

    python examples/cpu_real_pilot/power.py     # writes examples/cpu_real_pilot/power.json

The pilot runs the campaign's design (rig, trace, corridor, SLO) on its own seeds.  Its
run.json SLO is checked against the campaign's, and the power analysis stops if they differ.
For each gain of interest `evalkit plan power` gives the seeds a fixed design with the
campaign's draws per seed needs for 80% power; the campaign takes the smallest gain whose
seed count fits the run budget, or the budget when none does (and says so).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CAMPAIGN = ROOT / "examples" / "cpu_real" / "campaign.toml"
GAINS = (0.01, 0.02, 0.03, 0.05)
MAX_SEEDS = 13          # run budget: 13 seeds x 6 runs of ~52 s is about 68 minutes
MIN_SEEDS = 8           # the fewest the evidence keeps: the twin's leave-one-seed-out fit and
                        # the sign-flip test of fixed_h's single draw (min p 2/2^8 = 0.0078)


def pilot_runs(e2e_s: float) -> Path:
    runs = HERE / "runs"
    for meta in runs.glob("*/run.json"):
        slo = json.loads(meta.read_text())["slo"]["e2e_s"]
        if slo != e2e_s:
            raise SystemExit(f"{meta}: the pilot's SLO {slo} s is not the campaign's {e2e_s} s")
    return runs


def main() -> int:
    camp = tomllib.loads(CAMPAIGN.read_text())
    e2e, m = float(camp["slo"]["e2e_s"]), int(camp["matched_random_draws"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = pilot_runs(e2e)
        for gain in GAINS:
            out = Path(tmp) / f"power-{gain}.json"
            cmd = [sys.executable, "-m", "evalkit.cli.main", "plan", "power", "--pilot",
                   str(runs), "--policy", "ewma", "--gain", str(gain), "--draws", str(m),
                   "--max-seeds", "40", "--reps", "200", "--resamples", "200",
                   "--json", str(out)]
            print("$ evalkit " + " ".join(cmd[3:]), file=sys.stderr, flush=True)
            printed = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            printed = printed.replace(tmp, "TMP").replace(str(ROOT) + "/", "")
            print(printed, flush=True)
            plan = json.loads(out.read_text())
            row = next(r for r in plan["rows"] if r["m"] == m)
            power_at = dict(zip(row["seeds"], row["fixed_power"]))
            rows.append({"gain": gain, "seeds_needed": row["fixed_seeds_needed"],
                         "power_at_budget": power_at.get(MAX_SEEDS),
                         "within_seed_sd": plan["sd_within"], "printed": printed})
    fits = [r for r in rows if r["seeds_needed"] is not None and r["seeds_needed"] <= MAX_SEEDS]
    if fits:
        best = fits[0]
        seeds = max(best["seeds_needed"], MIN_SEEDS)
        chosen = (f"{seeds} seeds: the smallest gain of {', '.join(f'{g:g}' for g in GAINS)} "
                  f"(V units) whose fixed design with {m} draws per seed reaches 80% power "
                  f"within the budget of {MAX_SEEDS} seeds is {best['gain']:g} "
                  f"({best['seeds_needed']} seeds"
                  + (f", raised to the floor of {MIN_SEEDS}" if seeds > best["seeds_needed"]
                     else "") + "); smaller gains need "
                  + ", ".join(f"{r['gain']:g}: {r['seeds_needed'] or '> 40'} seeds"
                              for r in rows if r["gain"] < best["gain"]))
    else:
        seeds = MAX_SEEDS
        chosen = (f"{seeds} seeds, the run budget: no gain of "
                  f"{', '.join(f'{g:g}' for g in GAINS)} (V units) reaches 80% power within "
                  f"{MAX_SEEDS} seeds with {m} draws per seed (power at {MAX_SEEDS} seeds: "
                  + ", ".join(f"{r['gain']:g}: {r['power_at_budget']:.2f}" for r in rows)
                  + "), so the campaign is underpowered for gains that small")
    pilot = [json.loads(p.read_text()) for p in sorted((HERE / "runs").glob("*/run.json"))]
    summary = f"{len(pilot)} runs, seeds {sorted({p['seed'] for p in pilot})}"
    (HERE / "power.json").write_text(json.dumps(
        {"campaign": str(CAMPAIGN.relative_to(ROOT)), "slo_e2e_s": e2e, "draws_per_seed": m,
         "max_seeds": MAX_SEEDS, "gains": rows, "seeds": seeds, "chosen": chosen,
         "pilot_summary": summary}, indent=2) + "\n")
    print(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
