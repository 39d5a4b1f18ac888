"""Regenerate a real campaign's RESULTS.md (``examples/cpu_real``, ``examples/cpu_paced``)
from its committed run logs.

    python examples/make_results.py examples/cpu_real            # audit, fit, harness, render
    python examples/make_results.py examples/cpu_real --render   # only re-render from the JSON
    python examples/make_results.py examples/cpu_real --audits   # re-run the audits, re-render
    python examples/make_results.py examples/cpu_real --check    # regenerate elsewhere, diff

Every number in RESULTS.md comes from the output of an evalkit command on the committed
runs, kept next to them in the example's folder:

* ``audit_real.json``  — ``evalkit audit EXAMPLE/runs`` (with the reviewer's challenge when
  ``results.toml`` names one)
* ``fit.json``, ``twin.toml`` — ``evalkit sim fit EXAMPLE/runs``
* ``twin_runs/``       — ``evalkit sweep EXAMPLE/twin_campaign.toml`` (the twin as harness:
  same seeds and traces on the sim backend)
* ``audit_side_by_side.json`` — ``evalkit audit EXAMPLE`` (real and twin runs)
* per-run V and p95 — ``evalkit summarize``

What is not a number (the title, the host, where the pilot and the challenge are) comes from
the example's ``results.toml``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pandas as pd

from evalkit.document import words as wording

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().relative_to(ROOT)


def rel(base: Path) -> Path:
    """The example's folder as the repository names it (also for a temporary copy)."""
    return Path("examples") / base.name


def example_settings(base: Path) -> dict:
    """The example's ``results.toml``: ``title``, ``host`` (a sentence on the machine),
    ``pilot_power_json`` / ``pilot_power_text`` and ``challenge`` (paths relative to it)."""
    path = base / "results.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def sh(*args: str, cwd: Path = ROOT, ok=(0, 1)) -> str:
    print("$ evalkit " + " ".join(args), file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, "-m", "evalkit.cli.main", *args], cwd=cwd,
                         capture_output=True, text=True)
    if out.returncode not in ok:        # 1: the audit/sweep ran but something failed
        sys.exit(f"evalkit {' '.join(args)} failed ({out.returncode}):\n{out.stderr}"
                 f"{out.stdout}")
    return out.stdout + out.stderr


def audit(target: Path, dest: Path, base: Path | None = None) -> None:
    """``evalkit audit`` of ``target`` into ``dest``; with ``base``, under the reviewer's
    challenge its results.toml names (the real campaign's plan was frozen under it)."""
    challenge = example_settings(base).get("challenge") if base is not None else None
    extra = ["--challenge", str((base / challenge).relative_to(ROOT))] if challenge else []
    with tempfile.TemporaryDirectory() as tmp:
        sh("audit", str(target.relative_to(ROOT)), "--out", tmp, *extra)
        shutil.copyfile(Path(tmp) / "audit.json", dest)


def summarize(runs: Path) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        sh("summarize", str(runs.relative_to(ROOT)), "--out", f"{tmp}/summary.csv")
        return pd.read_csv(f"{tmp}/summary.csv")


def has_harness(base: Path) -> bool:
    return (base / "twin_campaign.toml").exists()


def audits(base: Path) -> None:
    audit(base / "runs", base / "audit_real.json", base)
    if has_harness(base):
        audit(base, base / "audit_side_by_side.json")


def pipeline(base: Path, *, harness: bool = True) -> None:
    runs = base / "runs"
    sh("validate", str(runs.relative_to(ROOT)))
    audit(runs, base / "audit_real.json", base)
    sh("sim", "fit", str(runs.relative_to(ROOT)), "--out", str((base / "twin.toml")
                                                               .relative_to(ROOT)),
       "--report", str((base / "fit.json").relative_to(ROOT)), "--no-progress")
    if harness and has_harness(base):
        # the harness is an output: swept afresh; runs the twin's sweep could not make (a
        # matched-random draw with no feasible schedule) are recorded, not hidden
        shutil.rmtree(base / "twin_runs", ignore_errors=True)
        printed = sh("sweep", str((base / "twin_campaign.toml").relative_to(ROOT)), "--out",
                     str((base / "twin_runs").relative_to(ROOT)), "--no-progress", ok=(0, 1, 2))
        failed = [line.strip()[len("failed: "):] for line in printed.splitlines()
                  if line.strip().startswith("failed: ")]
        (base / "twin_harness_failed.json").write_text(json.dumps(failed, indent=2) + "\n")
        audit(base, base / "audit_side_by_side.json")


# ----------------------------------------------------------------------------- rendering

def f(x, digits: int = 3, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def ci(pair, digits: int = 3) -> str:
    if not pair or pair[0] is None:
        return "[—]"
    return f"[{f(pair[0], digits)}, {f(pair[1], digits)}]"


def wall_minutes(runs: Path) -> tuple[float, str, str]:
    stamps = sorted(json.loads((d / "run.json").read_text())["created_at"]
                    for d in runs.iterdir() if (d / "run.json").exists())
    first, last = (dt.datetime.fromisoformat(s) for s in (stamps[0], stamps[-1]))
    return (last - first).total_seconds() / 60.0, stamps[0], stamps[-1]


def per_seed_table(summary: pd.DataFrame) -> list[str]:
    s = summary[summary["complete"]]
    rows = ["| seed | V no-sync | V ewma | V MR(ewma), mean of draws | V fixed_h | V MR(fixed_h) "
            "| K ewma / fixed_h | p95 no-sync / ewma (s) | requests |",
            "|---|---|---|---|---|---|---|---|---|"]
    for seed, g in s.groupby("seed"):
        def v(mask):
            x = g[mask]["violation_rate"]
            return f(x.mean()) if len(x) else "—"
        pol = g["policy"]
        ewma, fh = g[pol == "ewma"], g[pol == "fixed_h"]
        ns = g[g["role"] == "no_sync"]
        mr_e = (g["role"] == "matched_random") & (g["matched_to"] == "ewma")
        mr_f = (g["role"] == "matched_random") & (g["matched_to"] == "fixed_h")
        k = f"{int(ewma['k_observed'].iloc[0]) if len(ewma) else '—'} / " \
            f"{int(fh['k_observed'].iloc[0]) if len(fh) else '—'}"
        p95 = f"{f(ns['p95_s'].mean())} / {f(ewma['p95_s'].mean())}"
        rows.append(f"| {seed} | {v(g['role'] == 'no_sync')} | {v(pol == 'ewma')} | {v(mr_e)} "
                    f"| {v(pol == 'fixed_h')} | {v(mr_f)} | {k} | {p95} "
                    f"| {int(g['n_requests'].iloc[0])} |")
    return rows


def claim_lines(aud: dict) -> list[str]:
    out = ["| claim | seeds | draws/seed | mean d = V(MR) − V(policy) [95% CI] | wins | test | "
           "p two-sided (Holm) | smallest attainable p | tier reached | stops because |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for c in aud["claims"]:
        out.append(
            f"| {c['regime']}/{c['policy']} | {c.get('n_seeds')} | {c.get('draws_per_seed')} "
            f"| {f(c.get('mean_diff'), 4, True)} {ci(c.get('ci'), 4)} | {c.get('wins')} "
            f"| {c.get('test') or c.get('method')} | {f(c.get('p_two_sided'), 4)} "
            f"({f(c.get('p_adjusted'), 4)}) | {f(c.get('min_p'), 5)} "
            f"| {c.get('tier') or 'none'} | {c.get('stop_reason') or '—'} |")
    return out


# Checks of the comparison's design: when one fails, the policy run and its draws differ in
# more than the schedule (the audit's own list, not a copy)
DESIGN_CHECKS = wording.DESIGN_CHECKS


def design_failures(claim: dict) -> list[str]:
    failed = {k["name"] for k in claim.get("checks", []) if k.get("passed") is False}
    return [n for n in DESIGN_CHECKS if n in failed]


def pp(x, signed: bool = True) -> str:
    """A share of requests (or a difference of shares) in percentage points."""
    return "—" if x is None else f"{100 * x:{'+' if signed else ''}.2f} pp"


def pp_ci(pair) -> str:
    if not pair or pair[0] is None:
        return "[—]"
    return f"[{100 * pair[0]:+.2f}, {100 * pair[1]:+.2f}]"


def verdict_line(c: dict, alpha: float) -> str:
    """What a claim's audit says, from its checks and numbers: a comparison whose design
    checks fail is not a valid comparison, whatever its p; otherwise significant, a powered
    null, or underpowered."""
    name = f"{c['regime']}/{c['policy']}"
    numbers = (f"G = V(matched random) − V(policy) = {pp(c.get('mean_diff'))} "
               f"{pp_ci(c.get('ci'))}, policy better in {c.get('wins')}/{c.get('n_seeds')} "
               f"seeds, Holm-adjusted two-sided p = {f(c.get('p_adjusted'), 4)}")
    failed = design_failures(c)
    if failed:
        checks = ", ".join(f"`{n}`" for n in failed)
        checks = f"checks {checks} fail" if len(failed) > 1 else f"check {checks} fails"
        return (f"- **{name}**: **not a valid comparison** — the audit's design {checks}, "
                "so the policy run and its draws "
                "differ in more than the merge schedule. The numbers are shown for the record "
                f"and are no evidence for or against the policy, not a null result: {numbers}.")
    p, min_p, g = c.get("p_adjusted"), c.get("min_p"), c.get("mean_diff")
    if p is not None and p <= alpha and g:
        words = wording.gain_words(wording.BETTER if g > 0 else wording.WORSE)
        return (f"- **{name}**: {words}: {numbers}; tier reached: {c.get('tier') or 'none'}.")
    if min_p is not None and min_p < alpha:
        return (f"- **{name}**: not significant although the design could have reached p = "
                f"{f(min_p, 5)}: a powered null result for this comparison: {numbers}.")
    return (f"- **{name}**: underpowered: the design cannot reach alpha = {alpha:g} "
            f"(smallest attainable p {f(min_p, 5)}): {numbers}.")


def verdict_lines(aud: dict) -> list[str]:
    return [verdict_line(c, aud.get("alpha", 0.05)) for c in aud["claims"]]


def load_tolerance(name: str = "step_rate") -> float:
    proto = tomllib.loads((ROOT / "protocols" / "diloco-slo.toml").read_text())
    return float(proto["checks"]["load_match"]["tolerances"][name])


def drift_sentence(summary: pd.DataFrame, aud: dict) -> str:
    """How far each merging run's trainer step rate is from its seed's no-sync run (the
    quantity behind the audit's load_match check), from `evalkit summarize`."""
    s = summary[summary["complete"]]
    ns = s[s["role"] == "no_sync"].set_index("seed")["step_rate"]
    m = s[s["role"] != "no_sync"]
    rel = ((m["step_rate"] - m["seed"].map(ns)).abs() / m["seed"].map(ns)).dropna()
    tol = load_tolerance()
    over = int((rel > tol).sum())
    failing = [f"{c['regime']}/{c['policy']}" for c in aud["claims"]
               if "load_match" in design_failures(c)]
    if not over:
        return (f"In the runs below every merging run's trainer step rate is within "
                f"{tol:.0%} of its seed's no-sync run.")
    worst = m.loc[rel.idxmax()]
    return (f"In the runs below {over} of {len(rel)} merging runs have a trainer step rate more than "
            f"{tol:.0%} away from their seed's no-sync run (median {rel.median():.0%}, up to "
            f"{rel.max():.0%}: {worst['run_id']}, {worst['step_rate']:.2f} against "
            f"{ns[worst['seed']]:.2f} steps/s), so the audit's `load_match` check fails for "
            + (", ".join(failing) if failing else "no claim") + ".")


def failed_checks(aud: dict) -> list[str]:
    out = []
    for c in aud["claims"]:
        bad = [k for k in c.get("checks", []) if k.get("evaluable") and k.get("passed") is False]
        for k in bad:
            out.append(f"- {c['regime']}/{c['policy']} — `{k['name']}` ({k['tier']}): "
                       f"{k['found']}")
    return out or ["- none"]


def transfer_lines(aud: dict) -> list[str]:
    t = (aud.get("transfer") or {}).get("sync")
    if not isinstance(t, dict):
        return [f"- sync transfer: {t}"]
    lines = [f"- method: {t.get('method', '—')}; CIs: {t.get('ci_method', '—')}",
             f"- ρ_s harness (twin) {f(t.get('rho_harness'))} {ci(t.get('rho_harness_ci'))}, "
             f"ρ_s real {f(t.get('rho_real'))} {ci(t.get('rho_real_ci'))}",
             f"- transfer fraction (ρ_real − 1)/(ρ_harness − 1) = "
             f"{f(t.get('transfer_fraction'), 2)} {ci(t.get('transfer_fraction_ci'), 2)}"]
    if "transfer_fraction_gm" in t:
        lines.append(f"- geometric-mean-ratio version: harness {f(t.get('gm_ratio_harness'))} "
                     f"{ci(t.get('gm_ratio_harness_ci'))}, real {f(t.get('gm_ratio_real'))} "
                     f"{ci(t.get('gm_ratio_real_ci'))}, fraction "
                     f"{f(t.get('transfer_fraction_gm'), 2)} "
                     f"{ci(t.get('transfer_fraction_gm_ci'), 2)}")
    lines.append(f"- verdict: **{t.get('verdict', '—')}**")
    return lines


def fit_lines(fit: dict) -> list[str]:
    p = fit["parameters"]
    names = [("iter_base_s", "engine iteration, fixed part (s, idle engine)"),
             ("decode_per_seq_s", "per running request (s)"),
             ("prefill_base_s", "per admission / prefill pass (s)"),
             ("prefill_per_token_s", "per admitted prompt token (s)"),
             ("train_slowdown", "slowdown while inner training runs (vs idle probe)"),
             ("merge_slowdown", "slowdown during a merge window (vs idle probe)"),
             ("merge_ratio", "merge / training slowdown"),
             ("merge_duration_mean_s", "merge duration, mean (s)"),
             ("response_overhead_s", "transport overhead per request (s)"),
             ("step_s", "inner-step time (s), the reference host load"),
             ("load_exponent", "host-load exponent β")]
    out = ["| parameter | meaning | fitted | 95% CI (bootstrap over seeds) |", "|---|---|---|---|"]
    for key, meaning in names:
        if key in p:
            out.append(f"| `{key}` | {meaning} | {p[key]['value']:.4g} | "
                       f"{ci(p[key]['ci'], 4) if p[key]['ci'] else '—'} |")
    return out


def campaign_settings(base: Path) -> dict:
    return tomllib.loads((base / "campaign.toml").read_text())


def run_metas(runs: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(runs.glob("*/run.json"))]


def _range(xs, fmt: str = "{:.2f}") -> str:
    return (f"median {fmt.format(statistics.median(xs))} (range {fmt.format(min(xs))}–"
            f"{fmt.format(max(xs))})")


def order_sentence(metas: list[dict]) -> str:
    """How the sweep ordered the runs, from each run.json's run_order."""
    orders = [m.get("run_order") for m in metas]
    if not all(isinstance(o, dict) for o in orders):
        return "Some runs carry no `run_order`: the execution order is not recorded."
    pos = {m["run_id"]: m["run_order"]["position"] for m in metas}
    by_ref = {(m["seed"], m["policy"]): pos[m["run_id"]] for m in metas
              if m.get("role") == "policy"}
    before = [by_ref.get((m["seed"], m.get("matched_to"))) for m in metas
              if m.get("role") == "matched_random"]
    draws = [pos[m["run_id"]] for m in metas if m.get("role") == "matched_random"]
    known = [(b, d) for b, d in zip(before, draws) if b is not None]
    first = sum(b < d for b, d in known)
    gaps = [abs(d - b) for b, d in known]
    o = orders[0]
    blocks: dict = {}
    for m in metas:
        blocks.setdefault(m["seed"], set()).add(m["run_order"]["block"])
    layout = ("one block per seed" if all(len(b) == 1 for b in blocks.values())
              and len({next(iter(b)) for b in blocks.values()}) == len(blocks)
              else "blocks that mix seeds")
    return (f"`evalkit sweep --jobs 1` ran the {o['runs']} planned runs as {o['blocks']} blocks "
            f"({layout}), the order of the blocks "
            f"and of the runs inside each drawn from the campaign (order seed "
            f"{o['order_seed']}), recorded in every run.json's `run_order`. A draw ran after "
            f"its policy run in {first} of {len(known)} cases (a draw needs its policy run's "
            f"K) and at most {max(gaps) if gaps else 0} runs away from it.")


def load_sentence(metas: list[dict], summary: pd.DataFrame) -> str:
    """The host load measured in every run: the start probe and the trainer's step rate."""
    hl = [m["run_order"]["host_load"] for m in metas
          if isinstance((m.get("run_order") or {}).get("host_load"), dict)]
    s = summary[summary["complete"]]
    rates = s["step_rate"].dropna().tolist()
    parts = []
    if hl:
        parts.append("1-minute load average at the start of each run "
                     + _range([h["load_1m"] for h in hl]))
        parts.append("a CPU probe (a fixed loop) at the start of each run took "
                     + _range([1000 * h["probe_s"] for h in hl], "{:.1f}") + " ms")
    if rates:
        parts.append("the trainer's inner step rate over each run " + _range(rates)
                     + " steps/s")
    if not parts:
        return "No host load was recorded in these runs."
    return "Host load, measured in every run: " + "; ".join(parts) + "."


def pilot_lines(base: Path) -> list[str]:
    """What `evalkit plan power` chose from the pilot: its JSON, or the text it printed,
    committed beside the pilot (results.toml names which)."""
    settings = example_settings(base)
    if "pilot_power_json" in settings:
        path = (base / settings["pilot_power_json"]).resolve()
        if not path.exists():
            return []
        pw = json.loads(path.read_text())
        return [f"The number of seeds: `evalkit plan power` on the pilot "
                f"(`{path.parent.relative_to(ROOT)}/`, {pw.get('pilot_summary', 'its runs')}) "
                "— " + pw.get("chosen", "see power.json") + "."]
    if "pilot_power_text" in settings:
        path = base / settings["pilot_power_text"]
        lines = path.read_text().splitlines() if path.exists() else []
        chosen = [x for x in lines if x.startswith("fixed:")]
        head = lines[0].split(":", 1)[1].split(";")[0].strip() if lines else ""
        if chosen:
            return [f"The number of seeds: `evalkit plan power` on the pilot "
                    f"(`{rel(base)}/{settings['pilot_power_text']}`: {head}) — "
                    f"{chosen[0]}."]
    return []


def registration_sentence(real: dict, base: Path) -> str:
    """How the audit judged the registration, and a plan whose protocol rules changed since it
    was frozen (``plan_rules``), from the audit's words; who issued the challenge, from
    results.toml."""
    reg = (real.get("pre_registration") or {}).get("registration") or {}
    text = ""
    note = example_settings(base).get("challenge_note")
    if reg.get("kind") != "self-registered" and note:
        text += f" Registration: {reg.get('text', reg.get('kind'))}; {note}."
    if reg.get("kind") == "self-registered":
        text += (f" Registration: {reg['text']}: no reviewer's challenge fixed the seeds, so "
                 f"under protocol {real['protocol']['name']} v{real['protocol']['version']} "
                 "no claim can pass above matched_budget (`registration`).")
    rules = [c for claim in real["claims"] for c in claim["checks"]
             if c["name"] == "plan_rules" and c["passed"] is False]
    if rules:
        which = ("no claim can" if len(rules) == len(real["claims"])
                 else f"{len(rules)} of {len(real['claims'])} claims cannot")
        text += (f" The audit's protocol is not the one the plan froze (`plan_rules`: "
                 f"{rules[0]['found']}), so {which} reach matched_budget; the "
                 "campaign is not frozen again, since a plan frozen after its runs would not "
                 "pre-register them.")
    return text


def merge_words(camp: dict) -> str:
    """What a merge does on this rig, from the campaign's backend config."""
    cfg = camp["backend"].get("config", {})
    D = camp["merge_duration_s"]
    real = ("real outer merges: pseudo-gradient all-reduce over gloo, outer Nesterov SGD, "
            "each merge padded ")
    if cfg.get("merge_load") == "memory":
        return (real + f"with outer-SGD passes over {cfg['merge_bytes'] / 2**20:g} MiB per "
                f"learner on {cfg['merge_threads']} threads each until "
                f"{cfg['merge_min_s']:g} s (`merge_load = \"memory\"`: memory traffic on the "
                f"cores the sidecar serves on), within D = {D:g} s")
    return real + f"with real all-reduce traffic to D = {D:g} s"


def trainer_words(camp: dict) -> str:
    cfg = camp["backend"].get("config", {})
    if cfg.get("step_period_s"):
        return (f"real AdamW inner steps started on a fixed {1000 * cfg['step_period_s']:g} ms "
                f"clock (`step_period_s`; a tick later than {1000 * cfg['clock_slack_s']:g} ms "
                f"is missed, a run missing more than {cfg['max_missed_share']:.0%} of its ticks "
                "fails)")
    return "real AdamW inner steps, free-running"


def pacing_sentence(metas: list[dict]) -> str:
    """How the paced trainer kept its clock, from every run.json's pacing record."""
    pacing = [m["settings"]["effective"]["pacing"] for m in metas
              if isinstance(m.get("settings", {}).get("effective", {}).get("pacing"), dict)]
    if not pacing:
        return ""
    missed = [p["missed_share"] for p in pacing]
    late = [1000 * p["worst_late_s"] for p in pacing]
    clean = sum(p["missed_ticks"] == 0 for p in pacing)
    return (f"The paced trainer's clock in the {len(pacing)} runs: {clean} missed no tick; "
            f"missed share {_range(missed, '{:.2%}')}; worst lateness "
            f"{_range(late, '{:.1f}')} ms.")


def gate_sentence(camp: dict, metas: list[dict]) -> str:
    cfg = camp["backend"].get("config", {})
    if cfg.get("max_load_1m") is None:
        return ""
    return (f"A run started only when the host's 1-minute load was at most "
            f"{cfg['max_load_1m']:g} (waiting up to {cfg['load_wait_s']:g} s, else it failed "
            "\"host busy\" and was re-run).")


def rerun_sentence(metas: list[dict]) -> str:
    """The runs re-done in their slot after failed attempts, from run_order.attempts."""
    reruns = [(m["run_id"], m["run_order"]["attempts"]) for m in metas
              if (m.get("run_order") or {}).get("attempts")]
    if not reruns:
        return "No run was re-run."
    listed = "; ".join(f"`{rid}` after {len(a)} failed attempt(s): {a[0].get('error')}"
                       for rid, a in reruns)
    return (f"{len(reruns)} run(s) failed at their slot and were re-run there by the next sweep "
            f"(the failed run.json kept under `runs/.attempts/`, the re-run recording the "
            f"attempt in `run_order.attempts`; the draws that take its K ran after it): "
            f"{listed}.")


def design_lines(base: Path, summary: pd.DataFrame, real: dict) -> list[str]:
    camp = campaign_settings(base)
    tr, n_seeds = camp["trace"], summary["seed"].nunique()
    draws = {p["name"]: p.get("draws", camp["matched_random_draws"]) for p in camp["policies"]}
    s = summary[summary["complete"]]
    metas = run_metas(base / "runs")
    minutes, t0, t1 = wall_minutes(base / "runs")
    reg = real.get("pre_registration") or {}
    host = example_settings(base).get("host", "a machine")
    per_seed = ", ".join(f"{n} + {d} matched-random draw{'s' if d != 1 else ''} of {n}"
                         for n, d in draws.items())
    return [
        f"`{rel(base)}/campaign.toml`: torch backend on CPU — "
        f"{camp['backend']['config'].get('n_learners', 2)} DiLoCo learner processes (tiny "
        f"Qwen2-shaped model, {trainer_words(camp)}, {merge_words(camp)}) next to the torch "
        "serving sidecar (continuous batching, max_batch "
        f"{camp['backend']['config']['max_batch']}) and the open-loop client. {n_seeds} seeds "
        f"× (no-sync, {per_seed}) = {len(summary)} runs of a "
        f"{camp['horizon_s']:g} s horizon, square-wave bursts ({tr['burst_s']:g} s at "
        f"{tr['busy_rate']:g} req/s every {tr['period_s']:g} s, {tr['quiet_rate']:g} req/s "
        f"between; a new realisation per seed), end-to-end SLO {camp['slo']['e2e_s']:g} s. "
        f"Requests per run: " + _range(s["n_requests"].tolist(), "{:.0f}") + ".",
        "",
        *pilot_lines(base),
        "",
        f"Pre-registration: {reg.get('text', 'none recorded')} — the plan (`runs/plan.json`) "
        "was frozen before the first run; the sweep followed it and stamped its hash into "
        "every run." + registration_sentence(real, base),
        "",
        " ".join(x for x in [
            f"Execution: runs were written from {t0} to {t1} ({minutes:.1f} min) on {host}.",
            order_sentence(metas), gate_sentence(camp, metas), rerun_sentence(metas),
            load_sentence(metas, summary), pacing_sentence(metas),
            drift_sentence(summary, real)] if x),
    ]


def harness_failures(base: Path) -> str:
    """The twin-harness runs `evalkit sweep` could not make, as it printed them."""
    path = base / "twin_harness_failed.json"
    failed = json.loads(path.read_text()) if path.exists() else []
    if not failed:
        return ""
    return (f" The twin's sweep could not make {len(failed)} run(s), so the harness audit "
            "below misses them: " + "; ".join(f"`{x}`" for x in failed) + ".")


def harness_lines(base: Path, side: dict | None) -> list[str]:
    if side is None:
        return []
    REL = rel(base)
    return [f"## The twin as harness (`evalkit audit {REL}`: real and twin runs)",
            "",
            f"`{REL}/twin_campaign.toml` replays the same seeds, traces, corridor, SLO and "
            "policies on the sim backend with `sim_params = \"twin.toml\"` into `twin_runs/`."
            + harness_failures(base),
            "",
            *claim_lines(side),
            "",
            "Effect-size transfer of the sync mechanism (harness = twin, real = torch):",
            "",
            *transfer_lines(side),
            ""]


def reproduce_lines(base: Path, minutes: float) -> list[str]:
    REL = rel(base)
    challenge = example_settings(base).get("challenge")
    if challenge:
        return [f"evalkit plan challenge {REL}/campaign.toml --out {REL}/{challenge}   "
                "# the reviewer",
                f"evalkit plan freeze {REL}/campaign.toml --challenge {REL}/{challenge} "
                f"--out {REL}/runs/plan.json",
                f"evalkit sweep {REL}/campaign.toml --out {REL}/runs --jobs 1   "
                f"# ~{minutes:.0f} min; again until `sweep --check` reports every run complete",
                f"python {SCRIPT} {REL}    # audit, twin fit, RESULTS.md"]
    return [f"evalkit plan freeze {REL}/campaign.toml --out {REL}/runs/plan.json",
            f"evalkit sweep {REL}/campaign.toml --out {REL}/runs --jobs 1   "
            f"# ~{minutes:.0f} min",
            f"python {SCRIPT} {REL}    # audit, twin fit, twin harness, RESULTS.md"]


def render(base: Path) -> str:
    real = json.loads((base / "audit_real.json").read_text())
    side = (json.loads((base / "audit_side_by_side.json").read_text()) if has_harness(base)
            else None)
    fit = json.loads((base / "fit.json").read_text())
    summary = summarize(base / "runs")
    minutes, t0, t1 = wall_minutes(base / "runs")
    n_seeds = summary["seed"].nunique()
    held, ins, flat = fit["heldout"], fit["in_sample"], fit["heldout_constant_load"]
    sx = held.get("sync_excess", {})
    ns = summary[summary["role"] == "no_sync"]["violation_rate"]
    regime = campaign_settings(base)["regime"]
    reg = real["regimes"].get(regime, {})
    REL = rel(base)
    audits_named = ("`audit_real.json`, `audit_side_by_side.json`" if side is not None
                    else "`audit_real.json`")
    L = [
        f"# {example_settings(base).get('title', regime + ' campaign')}: results",
        "",
        f"Generated by `python {SCRIPT} {REL}` from the run logs in `{REL}/runs/` "
        "(do not edit by hand). Every number below is printed by an evalkit command on those "
        f"runs: `evalkit audit` ({audits_named}), "
        "`evalkit sim fit` (`fit.json`, `twin.toml`), `evalkit summarize` (per-run V, p95).",
        "",
        "## Design",
        "",
        *design_lines(base, summary, real),
        "",
        "## Per seed (evalkit summarize)",
        "",
        *per_seed_table(summary),
        "",
        f"V(no-sync) across seeds: mean {f(ns.mean())}, min {f(ns.min())}, max {f(ns.max())}.",
        "",
        f"## The claims (`evalkit audit {REL}/runs`)",
        "",
        "V, d and G are shares of requests in the tables (0.01 = 1 percentage point) and "
        "percentage points (pp) in the sentences.",
        "",
        *claim_lines(real),
        "",
        *verdict_lines(real),
        "",
        "Checks that failed:",
        "",
        *failed_checks(real),
        "",
        f"Exposure regression of V on request exposure (regime {regime}): R² "
        f"{f((reg.get('exposure_regression') or {}).get('r2'))}; ψ calibration ε_cal "
        f"{f((reg.get('psi') or {}).get('eps_cal'))} (leave-one-seed-out "
        f"{f((reg.get('psi') or {}).get('eps_cal_loso'))}).",
        "",
        f"## The twin (`evalkit sim fit {REL}/runs`)",
        "",
        f"Fitted to {fit['source']['n_runs']} runs of {len(fit['source']['seeds'])} seeds "
        f"({fit['source']['n_no_sync']} no-sync, {fit['source']['n_merging']} merging); "
        f"bootstrap {fit['bootstrap']['n_boot']} resamples of the seeds.",
        "",
        *fit_lines(fit),
        "",
        "Leave-one-seed-out (each seed's runs predicted by a twin fitted to the other seeds, "
        "serving the run's own requests with merges in the run's real windows):",
        "",
        "| | V MAE | V bias | p95 rel. error (in + out of windows) | in windows | outside | "
        "all requests |",
        "|---|---|---|---|---|---|---|",
        f"| held out | {f(held['v_mae'], 4)} | {f(held['v_bias'], 4, True)} "
        f"| {f(held['p95_rel_err'])} | {f(held['p95_in_rel_err'])} "
        f"| {f(held['p95_out_rel_err'])} | {f(held['p95_all_rel_err'])} |",
        f"| in sample | {f(ins['v_mae'], 4)} | {f(ins['v_bias'], 4, True)} "
        f"| {f(ins['p95_rel_err'])} | {f(ins['p95_in_rel_err'])} "
        f"| {f(ins['p95_out_rel_err'])} | {f(ins['p95_all_rel_err'])} |",
        f"| held out, constant host load | {f(flat['v_mae'], 4)} | "
        f"{f(flat['v_bias'], 4, True)} | {f(flat['p95_rel_err'])} "
        f"| {f(flat['p95_in_rel_err'])} | {f(flat['p95_out_rel_err'])} "
        f"| {f(flat['p95_all_rel_err'])} |",
        "",
        f"Host load: iteration costs scale as (run's median inner-step time / "
        f"{f(fit['host_load']['ref_step_s'], 4)} s)^β with β = "
        f"{f(fit['parameters']['load_exponent']['value'], 2)} "
        f"{ci(fit['parameters']['load_exponent']['ci'], 2)}; the twin runs at the reference "
        "load, the held-out predictions use each run's step time (the constant-load row does "
        "not).",
        "",
        f"Targets (V MAE ≤ {fit['targets']['v_mae']}, p95 relative error ≤ "
        f"{fit['targets']['p95_rel_err']}): **{'met' if fit['targets']['met'] else 'not met'}**"
        f" — p95 {'within' if held['p95_rel_err'] <= fit['targets']['p95_rel_err'] else 'outside'}"
        f" its target, V MAE {f(held['v_mae'], 4)}. How well can a run's V be predicted at "
        f"all? A run has {int(summary['n_requests'].min())}–{int(summary['n_requests'].max())} "
        f"requests: with independent requests its V alone deviates from its expectation by "
        f"{f(held['v_noise_floor'], 4)} on average (binomial), and by "
        f"{f(held['v_noise_floor_robust'], 4)} by the run's own cluster-robust interval "
        "(bursts, `evalkit summarize`'s `v_ci`). The held-out error is of the size of the "
        "sampling error of a run's own V, so no better model of a run's conditions can "
        "bring it far below that. Halving the floor takes four times the requests per run "
        "(longer horizons or higher rates); a machine without other jobs removes the "
        "host-load drift the twin has to model.",
        "",
        f"Sync excess, mean over {sx.get('n_seeds', 0)} seeds of V(merging runs) − V(no-sync): "
        f"real {f(sx.get('vex_real_mean'), 4, True)}, twin {f(sx.get('vex_pred_mean'), 4, True)};"
        f" p95 excess real {f(sx.get('p95_excess_real_mean_s'), 3, True)} s, twin "
        f"{f(sx.get('p95_excess_pred_mean_s'), 3, True)} s (sign agrees: "
        f"{sx.get('p95_excess_sign_agrees')}).",
        "",
        *[f"- {n}" for n in fit.get("notes", [])],
        "",
        *twin_judgement_lines(base, fit, real),
        "",
        *harness_lines(base, side),
        "## Reproduce",
        "",
        "```",
        *reproduce_lines(base, minutes),
        "```",
        "",
    ]
    return "\n".join(L)


# ----------------------------------------------------------------------------- the twin judged
# as a stochastic model (fit.json's "predictive" section, written and printed by
# `evalkit sim fit`)

VARIANT_WORDS = {"request": "the twin's own randomness, per-request send lags",
                 "request+run": "plus the run-level speed residual that the host-load rule "
                                "leaves, resampled from the training seeds' no-sync runs"}


def outside_shape(n_below: int, n_above: int) -> str:
    """Where the held-out runs outside their intervals lie, from the two counts."""
    if n_below and n_above:
        if n_above >= 2 * n_below:
            return "on both sides, mostly above the interval (V under-predicted)"
        if n_below >= 2 * n_above:
            return "on both sides, mostly below the interval (V over-predicted)"
        return "on both sides (intervals too narrow)"
    return ("above the interval (V under-predicted)" if n_above else
            "below the interval (V over-predicted)")


def coverage_sentence(name: str, c: dict) -> str:
    lo, hi = c["band"]
    cov = c["coverage"]
    if c["calibrated"]:
        verdict = f"inside [{lo:.0%}, {hi:.0%}]: **calibrated**"
    elif c["below_band"]:
        verdict = (f"below [{lo:.0%}, {hi:.0%}]: **not calibrated**; the runs outside lie "
                   f"{outside_shape(c['n_below'], c['n_above'])}")
    else:
        verdict = f"above [{lo:.0%}, {hi:.0%}]: **not calibrated** (intervals too wide)"
    clo, chi = c["coverage_ci95"]
    return (f"- `{name}` ({VARIANT_WORDS.get(name, name)}): observed V inside the central "
            f"{c['level']:.0%} predictive interval in {c['n_inside']} of {c['n_runs']} held-out "
            f"runs = {cov:.1%} [{clo:.1%}, {chi:.1%}] (exact binomial 95% CI, runs treated as "
            f"independent), {verdict}; below the interval {c['n_below']}, above "
            f"{c['n_above']}; mean interval width {f(c['interval_width_mean'], 4)}.")


def vex_sentence(v: dict) -> str:
    rows = v["sync_excess"]
    resolved = [g for g in rows if g["real_sign_resolved"]]
    right = [g["group"] for g in resolved if g["sign_agrees"]]
    wrong = [g["group"] for g in resolved if not g["sign_agrees"]]
    inside_ci = sum(g["pred_inside_real_ci"] for g in rows)
    parts = [f"The twin's mean Vex lies inside the real CI for {inside_ci} of {len(rows)} "
             "groups"]
    if resolved:
        parts.append(f"the real CI excludes 0 for {len(resolved)} "
                     f"({', '.join(g['group'] for g in resolved)}), where the twin's sign "
                     + (f"agrees for {', '.join(right)}" if right else "agrees for none")
                     + (f" and is wrong for {', '.join(wrong)}" if wrong else ""))
    else:
        parts.append("no group's real CI excludes 0, so no sign is resolved by the real runs")
    return "; ".join(parts) + "."


def pit_table(pred: dict) -> list[str]:
    names = list(pred["variants"])
    out = ["| PIT bin | " + " | ".join(f"`{n}`" for n in names) + " |",
           "|---|" + "---|" * len(names)]
    hists = [pred["variants"][n]["coverage"]["pit_histogram"] for n in names]
    k = len(hists[0])
    for i in range(k):
        out.append(f"| [{i / k:.1f}, {(i + 1) / k:.1f}{']' if i == k - 1 else ')'} | "
                   + " | ".join(str(h[i]) for h in hists) + " |")
    return out


def vex_table(v: dict) -> list[str]:
    out = ["| group | seeds | Vex real, mean [95% CI, seed bootstrap] | Vex twin | sign | "
           "twin inside the real CI |", "|---|---|---|---|---|---|"]
    for g in v["sync_excess"]:
        if g["sign_real"] == 0:
            sign = "real mean 0"
        elif g["sign_pred"] == 0:
            sign = "twin predicts 0" + ("" if g["real_sign_resolved"] else
                                        " (real CI spans 0: sign not resolved)")
        elif g["real_sign_resolved"]:
            sign = "agrees" if g["sign_agrees"] else "**wrong**"
        else:
            sign = ("same" if g["sign_agrees"] else "opposite") + \
                " (real CI spans 0: sign not resolved)"
        out.append(f"| {g['group']} | {g['n_seeds']} | {f(g['vex_real_mean'], 4, True)} "
                   f"{ci(g['vex_real_ci95'], 4)} | {f(g['vex_pred_mean'], 4, True)} | {sign} "
                   f"| {'yes' if g['pred_inside_real_ci'] else '**no**'} |")
    return out


def pit_figure(fit: dict, path: Path) -> None:
    """Histogram of the held-out runs' randomised PIT, one panel per variant."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pred = fit["predictive"]
    names = list(pred["variants"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.2), sharey=True)
    for ax, name in zip(axes, names):
        c = pred["variants"][name]["coverage"]
        h = c["pit_histogram"]
        k = len(h)
        ax.bar([(i + 0.5) / k for i in range(k)], h, width=1 / k, edgecolor="black",
               color="#8fb3d9")
        ax.axhline(c["n_runs"] / k, color="black", linestyle="--", linewidth=1,
                   label="uniform (calibrated)")
        ax.axvspan(0, (1 - c["level"]) / 2, color="grey", alpha=0.2)
        ax.axvspan(1 - (1 - c["level"]) / 2, 1, color="grey", alpha=0.2)
        ax.set_xlim(0, 1)
        ax.set_xlabel("PIT of observed V among twin replays")
        ax.set_title(f"{name}: coverage {c['n_inside']}/{c['n_runs']}", fontsize=10)
    axes[0].set_ylabel("held-out runs")
    axes[0].legend(fontsize=8, loc="upper center")
    fig.suptitle(f"Twin predictive check, leave one seed out ({pred['n_sims']} replays per run)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def twin_judgement_lines(base: Path, fit: dict, real: dict) -> list[str]:
    pred = fit.get("predictive")
    if not pred:
        return ["## The twin as a stochastic model", "",
                "fit.json has no predictive section (`evalkit sim fit --predictive-sims 0`)."]
    pit_figure(fit, base / "twin_pit.png")
    invalid = sorted({n for c in real["claims"] for n in design_failures(c)})
    floor = pred["sampling_floor"]
    L = ["## The twin as a stochastic model (`evalkit sim fit`, predictive check)", ""]
    if invalid:
        L += [f"**Provisional.** This campaign is **not a valid comparison**: the audit's "
              f"design checks {', '.join(f'`{n}`' for n in invalid)} fail on it (above), so "
              "its runs differ in more than the merge schedule. The twin is judged here "
              "against those runs as they are; the judgement is provisional until the "
              "campaign is re-run on a design that passes the checks.", ""]
    L += [f"For each held-out run (leave one seed out) the twin fitted to the other seeds "
          f"served the run's own requests with merges in the run's real windows at the run's "
          f"host-load factor, {pred['n_sims']} times with different seeds (seed "
          f"{pred['seed']}). The observed V's randomised PIT (its rank among the replays, ties "
          f"split at random) is uniform when the run is one more draw of the twin; the run is "
          f"inside the central {pred['level']:.0%} interval when its PIT lies in "
          f"[{(1 - pred['level']) / 2:.2f}, {1 - (1 - pred['level']) / 2:.2f}], and the twin "
          f"is calibrated when that holds in {pred['band'][0]:.0%}–{pred['band'][1]:.0%} of "
          "the held-out runs.", ""]
    L += [coverage_sentence(n, v["coverage"]) for n, v in pred["variants"].items()]
    L += ["", f"PIT histogram (`{rel(base)}/twin_pit.png`; counts of held-out runs per bin, "
          "uniform when calibrated):", "", *pit_table(pred), "",
          f"![PIT histogram](twin_pit.png)", ""]
    for n, v in pred["variants"].items():
        L += [f"Sync excess per group, `{n}` replays: per seed Vex = mean V(group's runs) − "
              "V(no-sync), real against the twin's predictive mean:", "", *vex_table(v), "",
              vex_sentence(v), ""]
    mae = floor["v_mae"]
    position = ("below" if mae < floor["v_noise_floor"] else "between" if mae <=
                floor["v_noise_floor_robust"] else "above")
    where = {"below": "below both floors", "between": "between the binomial and the "
             "cluster-robust floor", "above": "above both floors"}[position]
    L += [f"Per-run V MAE (descriptive, not a target): {f(mae, 4)}, {where} — the sampling "
          f"scatter of one run's V from its own requests is {f(floor['v_noise_floor'], 4)} "
          f"(binomial) and {f(floor['v_noise_floor_robust'], 4)} (cluster-robust)."]
    L += ["", *miss_lines(fit)]
    return L


# a normal deviation's mean absolute value is sd * sqrt(2 / pi); a central 90% interval of a
# normal is 2 * 1.645 sd wide
MAE_TO_SD = math.sqrt(math.pi / 2)
WIDTH90_TO_SD = 1 / (2 * 1.6449)


def miss_lines(fit: dict) -> list[str]:
    """Which part of the twin misses, each sentence read off fit.json: host load (what the
    run-level speed residual adds to the coverage), merge shape (the p95 error inside the
    merge windows against outside), batch dynamics (the spread of the twin's replays of one
    run against the spread of the real runs around the twin's mean)."""
    pred = fit.get("predictive") or {}
    variants = pred.get("variants") or {}
    if not variants or all(v["coverage"]["calibrated"] for v in variants.values()):
        return []
    held = fit["heldout"]
    out = ["Which part of the model misses (from the numbers above):", ""]
    base, extra = variants.get("request"), variants.get("request+run")
    if base and extra:
        a, b = base["coverage"]["coverage"], extra["coverage"]["coverage"]
        out.append(f"- host load: adding the run-level speed residual moves the coverage from "
                   f"{a:.1%} to {b:.1%}" + (" — part of the miss, not all of it" if b > a
                                             else " — host load is not what misses"))
    inside, outside = held.get("p95_in_rel_err"), held.get("p95_out_rel_err")
    if inside is not None and outside:
        ratio = inside / outside
        out.append(f"- merge shape: held out, the p95 relative error is {f(inside)} for "
                   f"requests in merge windows against {f(outside)} outside "
                   f"({ratio:.1f}×)" + (" — a constant slowdown per window does not reproduce "
                                        "how a merge loads the engine" if ratio > 1.5
                                        else " — the merge windows are predicted as well as "
                                             "the rest"))
    widest = max(variants.items(), key=lambda kv: kv[1]["coverage"]["interval_width_mean"])
    sd_twin = widest[1]["coverage"]["interval_width_mean"] * WIDTH90_TO_SD
    sd_real = held["v_mae"] * MAE_TO_SD
    out.append(f"- batch dynamics: the twin's replays of one run (`{widest[0]}`, its requests "
               f"and merge windows fixed) spread by sd ≈ {f(sd_twin, 4)} (mean 90% interval "
               f"width / 3.29), while the real runs lie around the twin's mean with sd ≈ "
               f"{f(sd_real, 4)} (held-out V MAE × 1.25, normal errors): "
               + (f"the real engine varies {sd_real / sd_twin:.1f}× as much as the twin under "
                  "the same requests and windows (batching and scheduling order)"
                  if sd_real > 1.2 * sd_twin else "the twin's own spread matches"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("example", help="the example's folder (examples/cpu_real, examples/cpu_paced)")
    ap.add_argument("--render", action="store_true", help="only re-render RESULTS.md")
    ap.add_argument("--audits", action="store_true",
                    help="re-run the audits (not the fit or the twin sweep), re-render")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in a temporary copy and compare with RESULTS.md")
    args = ap.parse_args()
    base = Path(args.example).resolve()
    if not (base / "campaign.toml").is_file() or not (base / "runs").is_dir():
        ap.error(f"{args.example}: not an example with campaign.toml and runs/ "
                 "(give e.g. examples/cpu_real)")
    if args.check:
        with tempfile.TemporaryDirectory(dir=base.parent) as tmp:
            copy = Path(tmp) / base.name
            outputs = {"twin_runs", "twin.toml", "fit.json", "audit_real.json",
                       "twin_harness_failed.json",
                       "audit_side_by_side.json", "RESULTS.md", "twin_pit.png"}
            shutil.copytree(base, copy, ignore=lambda d, names: [
                n for n in names if Path(d) == base and n in outputs])
            pipeline(copy)
            text = render(copy)
        old = (base / "RESULTS.md").read_text()
        if text != old:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True),
                                                       text.splitlines(True),
                                                       "RESULTS.md", "regenerated"))
            return 1
        print("RESULTS.md is reproduced by the committed runs")
        return 0
    if args.audits:
        audits(base)
    elif not args.render:
        pipeline(base)
    (base / "RESULTS.md").write_text(render(base))
    print(f"wrote {rel(base)}/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
