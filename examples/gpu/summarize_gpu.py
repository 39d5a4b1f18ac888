"""RESULTS-style markdown for a GPU (or CPU dry-run) campaign.

    python examples/gpu/summarize_gpu.py RUNS_DIR AUDIT_DIR [--wall WALL_JSON] [--fit FIT_JSON]

Per run: K, requests, failures, V, p95; campaign-wide: merge durations, p95 latency of
requests overlapping a merge window vs not (rho_s), send lag, rig start-up/reset times,
and the audit's verdicts and effect-size transfer (from AUDIT_DIR/audit.json).
Markdown tables are rendered here (no `tabulate` dependency).
"""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def md_table(rows: list[dict]) -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])

    def cell(v):
        if isinstance(v, float):
            return "nan" if v != v else f"{v:.3g}"
        return str(v).replace("|", "/").replace("\n", " ")
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def q(x, p) -> float:
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return float(np.quantile(x, p)) if x.size else float("nan")


def summarize_runs(runs_dir: Path):
    rows, in_lat, out_lat, durs, lags, rigs = [], [], [], [], [], []
    for run in sorted(p for p in runs_dir.iterdir() if (p / "run.json").exists()):
        meta = json.loads((run / "run.json").read_text())
        real = meta.get("backend") != "sim"
        req = pd.read_parquet(run / "requests.parquet")
        mer = pd.read_parquet(run / "merges.parquet")
        eff = (meta.get("settings") or {}).get("effective") or {}
        ok = req["ok"].to_numpy(bool)
        lat = np.where(ok, (req["end_s"] - req["arrival_s"]).to_numpy(float), np.inf)
        a = req["arrival_s"].to_numpy(float)
        e = req["end_s"].fillna(np.inf).to_numpy(float)
        hit = np.zeros(len(req), bool)
        for s, t in zip(mer["start_s"], mer["end_s"]):
            hit |= (a < t) & (e > s)
        if real and meta["role"] != "no_sync" and len(mer):
            in_lat += list(lat[hit])
            out_lat += list(lat[~hit])
        if real:
            durs += list(mer["end_s"] - mer["start_s"])
            lags += list(req["sent_s"] - req["arrival_s"])
        if eff.get("rig"):
            rigs.append(eff["rig"])
        slo = float(meta["slo"]["e2e_s"])
        rows.append({"run": run.name, "backend": meta.get("backend"),
                     "complete": meta["complete"], "K": len(mer),
                     "requests": len(req), "failed": int((~ok).sum()),
                     "V": float(np.mean(~(ok & (lat <= slo)))), "p95_s": q(lat, 0.95),
                     "inner_step_s": float(meta.get("inner_step_s") or float("nan")),
                     "send_lag_p99_ms": q(req["sent_s"] - req["arrival_s"], 0.99) * 1e3})
    return rows, in_lat, out_lat, durs, lags, rigs


def fit_summary(fit: dict) -> str:
    """Fitted slowdowns with CIs and the leave-one-seed-out errors of fit.json."""
    p, h = fit["parameters"], fit["heldout"]
    lines = []
    for key in ("train_slowdown", "merge_slowdown", "merge_ratio", "merge_duration_mean_s",
                "iter_base_s", "decode_per_seq_s", "load_exponent"):
        if key in p:
            ci = p[key]["ci"] or [float("nan")] * 2
            lines.append(f"- {key}: {p[key]['value']:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]")
    sx = h.get("sync_excess", {})
    lines.append(f"- held out (leave one seed out): V MAE {h['v_mae']:.4f} (binomial floor "
                 f"{h.get('v_noise_floor', float('nan')):.4f}), p95 relative error "
                 f"{h['p95_rel_err']:.3f}")
    lines.append(f"- sync excess V(merging) - V(no-sync): real {sx.get('vex_real_mean', 0):+.4f},"
                 f" twin {sx.get('vex_pred_mean', 0):+.4f}")
    return "\n".join(lines)


def main(argv) -> int:
    runs_dir, audit_dir = Path(argv[0]), Path(argv[1])
    opts = dict(zip(argv[2::2], argv[3::2]))
    wall = json.loads(Path(opts["--wall"]).read_text()) if "--wall" in opts else {}
    fit_path = Path(opts["--fit"]) if "--fit" in opts else None
    print("# Campaign results\n")
    if not runs_dir.is_dir():
        print(f"no runs directory {runs_dir}")
        return 1
    rows, in_lat, out_lat, durs, lags, rigs = summarize_runs(runs_dir)
    if wall:
        print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in wall.items()) + "\n")
    print(md_table(rows) + "\n")
    p_in, p_out = q(in_lat, 0.95), q(out_lat, 0.95)
    print("## What was measured (real backend runs only; sim rows above are the harness)\n")
    print(f"- merge duration: n={len(durs)}, mean {np.mean(durs) if durs else float('nan'):.2f} s,"
          f" p50 {q(durs, .5):.2f} s, max {max(durs) if durs else float('nan'):.2f} s")
    print(f"- p95 latency, requests overlapping a merge window: {p_in:.3f} s (n={len(in_lat)}); "
          f"not overlapping: {p_out:.3f} s (n={len(out_lat)}); ratio {p_in / p_out:.3f} "
          "(merging runs only; failed requests count as infinite latency)")
    print(f"- send lag: p50 {q(lags, .5) * 1e3:.1f} ms, p99 {q(lags, .99) * 1e3:.1f} ms, "
          f"max {max(lags) * 1e3 if lags else float('nan'):.1f} ms")
    if rigs:
        fresh = [r["startup_s"] for r in rigs if not r["warm"]]
        resets = [r["reset_s"] for r in rigs if r["warm"]]
        print(f"- rig: {len(fresh)} start-up(s) of {', '.join(f'{x:.1f}' for x in fresh)} s; "
              f"{len(resets)} warm runs, reset median {q(resets, .5):.2f} s")
    if fit_path is not None:
        print("\n## Twin (evalkit sim fit)\n")
        if fit_path.exists():
            fit = json.loads(fit_path.read_text())
            print(fit_summary(fit))
            if fit.get("predictive"):
                from evalkit.cli.sim import predictive_lines
                print("\n### The twin as a stochastic model (held-out predictive check)\n")
                print("```\n" + "\n".join(predictive_lines(fit["predictive"])) + "\n```")
        else:
            print(f"no {fit_path} (the fit did not run or failed; see fit.log)")
    print("\n## Audit\n")
    path = audit_dir / "audit.json"
    if not path.exists():
        print(f"no {path} (the audit did not run or failed; see audit.log)")
        return 0
    audit = json.loads(path.read_text())
    claims = [{"regime": c.get("regime"), "policy": c.get("policy"),
               "tier": c.get("tier") or "no tier", "verdict": c.get("verdict")}
              for c in audit.get("claims", [])]
    print(md_table(claims) + "\n")
    for mech, t in (audit.get("transfer") or {}).items():
        if isinstance(t, dict):
            ci = t.get("rho_real_ci") or [None] * 2
            hci = t.get("rho_harness_ci") or [None] * 2
            print(f"- transfer ({mech}): rho_harness {_num(t.get('rho_harness'))} "
                  f"[{_num(hci[0])}, {_num(hci[1])}], rho_real {_num(t.get('rho_real'))} "
                  f"[{_num(ci[0])}, {_num(ci[1])}], fraction "
                  f"{_num(t.get('transfer_fraction'), '.2f')}; {t.get('verdict')}")
        else:
            print(f"- transfer ({mech}): {t}")
    excl = (audit.get("input") or {}).get("excluded") or []
    for x in excl:
        print(f"- excluded {x.get('run_id')}: {x.get('reason')}")
    return 0


def _num(x, fmt: str = ".3f") -> str:
    """A number of the audit, or "n/a" where the audit has none (too few seeds, no CI)."""
    return "n/a" if x is None else format(float(x), fmt)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
