#!/usr/bin/env bash
# One command, inside TOTAL_S (default 540 s: one device command of <= 600 s, about 12
# minutes of device time with the machine's start):
#   0. `evalkit plan freeze` of the campaign -> $OUT/runs/plan.json (pre-registration: every
#      planned run and draw seed fixed before any run; the sweep follows it)
#   1. the bursty GPU campaign (torch trainer + torch sidecar on CUDA, one warm rig, seed by
#      seed: 4 seeds x no-sync, ewma, one matched-random draw) -> $OUT/runs
#   2. `evalkit sim fit` of the twin to those real runs -> $OUT/twin.toml, $OUT/fit.json
#      (with the held-out predictive check: coverage, PIT, Vex signs)
#   3. the same campaign on the sim backend with the fitted twin (the harness) -> $OUT/twin_runs
#   4. `evalkit audit` of the real runs ($OUT/audit_real) and of both side by side
#      ($OUT/audit: effect-size transfer twin -> real), then $OUT/RESULTS.md
#   5. with COMMIT_TO=DIR (e.g. examples/gpu, run from a checkout): copy runs/, twin_runs/,
#      twin.toml, fit.json, RESULTS.md and the two campaign files there and git-commit
#      exactly those paths (the Parquet run logs of 18 runs are well under 5 MB)
#   OUT=/some/dir examples/gpu/run_gpu_campaign.sh            (default OUT: ./gpu-out)
# Knobs (env): SEEDS (4), HORIZON_S (20), TOTAL_S (540: wall-clock budget of the whole
#   script), RESERVE_S (170: kept for fit + harness + audits + summary), PREDICTIVE_SIMS
#   (40 twin replays per held-out run), ALLOW_NO_PLAN=1 (go on without a frozen plan when
#   this evalkit has no `plan freeze`; the audit then says the campaign was not
#   pre-registered), SERVER_MODEL
#   (qwen2.5-1.5b), TRAINER_MODEL (qwen2.5-0.5b), OVERRIDES (extra "key=value;key=value"
#   replacements of top-level or [backend.config] lines, e.g. "device='cpu';batch=2"),
#   SMOKE=1 (one run), COMMIT_TO (see 5), CAMPAIGN_TOML (bursty_gpu.toml; paced_gpu.toml is
#   the paced design of examples/cpu_paced: run it with SEEDS=3).
# Sizing: a warm run costs about horizon + 4 s, so 12 runs x ~24 s + ~35 s start-up ~ 325 s
#   of the 370 s the sweep gets;
#   the capped sweep starts a run only if it fits before TOTAL_S - RESERVE_S, and runs seed by
#   seed, so a slow machine yields fewer complete seeds rather than policies without draws.
# CPU dry run of every step (tiny models, short horizon, 3 seeds):
#   DRY_RUN_CPU=1 OUT=/tmp/gpu-dry examples/gpu/run_gpu_campaign.sh
set -u
export PYTHONUNBUFFERED=1
T_START=$(date +%s)
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$PWD/gpu-out}"
SEEDS="${SEEDS:-4}"; HORIZON_S="${HORIZON_S:-20}"
TOTAL_S="${TOTAL_S:-540}"; RESERVE_S="${RESERVE_S:-170}"
PREDICTIVE_SIMS="${PREDICTIVE_SIMS:-40}"
EK="python -m evalkit.cli.main"        # the evalkit this python imports (PYTHONPATH first)
SERVER_MODEL="${SERVER_MODEL:-qwen2.5-1.5b}"; TRAINER_MODEL="${TRAINER_MODEL:-qwen2.5-0.5b}"
OVERRIDES="${OVERRIDES:-}"
if [ "${DRY_RUN_CPU:-0}" = "1" ]; then
  SERVER_MODEL=tiny; TRAINER_MODEL=tiny; HORIZON_S="${HORIZON_S_DRY:-12}"
  SEEDS="${SEEDS_DRY:-3}"
  OVERRIDES="device='cpu';batch=2;seq_len=32;max_batch=8;max_prompt_tokens=64;merge_min_s=0.8;merge_duration_s=1.0;min_gap_s=2.0;max_gap_s=6.0;inner_step_s=0.05;e2e_s=1.0;${OVERRIDES}"
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CAMPAIGN="$OUT/campaign.toml"
SEEDS="$SEEDS" HORIZON_S="$HORIZON_S" SERVER_MODEL="$SERVER_MODEL" \
TRAINER_MODEL="$TRAINER_MODEL" OVERRIDES="$OVERRIDES" \
python - "$HERE/${CAMPAIGN_TOML:-bursty_gpu.toml}" "$CAMPAIGN" <<'PY'
import os, re, sys
text = open(sys.argv[1]).read()
sets = {"seeds": os.environ["SEEDS"], "horizon_s": os.environ["HORIZON_S"] + ".0",
        "server_model": repr(os.environ["SERVER_MODEL"]).replace("'", '"'),
        "trainer_model": repr(os.environ["TRAINER_MODEL"]).replace("'", '"')}
for item in filter(None, os.environ["OVERRIDES"].split(";")):
    key, _, value = item.partition("=")
    sets[key.strip()] = value.strip().replace("'", '"')
for key, value in sets.items():
    text, n = re.subn(rf"(?m)^{re.escape(key)} = .*$", f"{key} = {value}", text)
    if n == 0:
        sys.exit(f"override {key!r}: no such line in {sys.argv[1]}")
open(sys.argv[2], "w").write(text)
# the twin harness: same trace, corridor, SLO and policies on the sim backend with the twin
# that `evalkit sim fit` writes next to it; its own regime, so the audit compares harness and
# real side by side
regime = re.search(r'(?m)^regime = "(.*)"', text).group(1)
sim = re.sub(r'(?m)^regime = .*$', f'regime = "{regime}_twin"', text)
sim = re.sub(r'(?ms)^\[backend\]\nname = .*?(?=^\[\[policies\]\])',
             '[backend]\nname = "sim"\nsim_params = "twin.toml"\n\n', sim)
open(sys.argv[2].replace(".toml", "_twin.toml"), "w").write(sim)
PY
[ $? -eq 0 ] || { echo "could not write $CAMPAIGN"; exit 2; }
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
fi
if [ "${SMOKE:-0}" = "1" ]; then
  timeout -k 20 "$((TOTAL_S - 10))" python "$HERE/smoke_gpu.py" "$CAMPAIGN" "$OUT" 2>&1 \
    | tee "$OUT/smoke.log"
  exit "${PIPESTATUS[0]}"
fi
left() { echo $((T_START + TOTAL_S - $(date +%s))); }
mkdir -p "$OUT/runs"
if $EK plan freeze --help >/dev/null 2>&1; then
  if [ -f "$OUT/runs/plan.json" ]; then
    echo "== plan: $OUT/runs/plan.json exists (frozen before; the sweep follows it)"
  else
    echo "== plan freeze -> $OUT/runs/plan.json"
    $EK plan freeze "$CAMPAIGN" --out "$OUT/runs/plan.json" 2>&1 | tee "$OUT/plan.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "plan freeze failed (see $OUT/plan.log)"; exit 2; }
  fi
elif [ "${ALLOW_NO_PLAN:-0}" = "1" ]; then
  echo "== no 'evalkit plan freeze' in this evalkit: going on WITHOUT a frozen plan" \
    "(ALLOW_NO_PLAN=1); the campaign is not pre-registered" | tee "$OUT/plan.log"
else
  echo "this evalkit has no 'evalkit plan freeze': a campaign is frozen before its runs." \
    "Use a checkout that has it, or set ALLOW_NO_PLAN=1 to run unregistered." >&2
  exit 2
fi
DEADLINE=$((T_START + TOTAL_S - RESERVE_S))
echo "== real campaign -> $OUT/runs (no run starts after $(date -d @"$DEADLINE" +%T) unless it fits)"
# capped_sweep.py starts a run only if it fits before the deadline; `timeout` is a backstop
timeout -k 15 --signal=INT "$((DEADLINE - $(date +%s) + 30))" \
  python "$HERE/capped_sweep.py" "$CAMPAIGN" "$OUT/runs" "$DEADLINE" 2>&1 | tee "$OUT/sweep.log"
echo "sweep exit: ${PIPESTATUS[0]}"
T_SWEEP=$(date +%s)
echo "== twin fit ($(left) s left)"
timeout -k 5 "$(( $(left) > 100 ? 100 : $(left) ))" $EK sim fit "$OUT/runs" \
  --out "$OUT/twin.toml" --report "$OUT/fit.json" --bootstrap 100 \
  --predictive-sims "$PREDICTIVE_SIMS" --no-progress 2>&1 | tee "$OUT/fit.log"
T_FIT=$(date +%s)
if [ -s "$OUT/twin.toml" ]; then
  echo "== twin harness -> $OUT/twin_runs ($(left) s left)"
  timeout -k 5 "$(( $(left) > 40 ? 40 : $(left) ))" $EK sweep "$OUT/campaign_twin.toml" \
    --out "$OUT/twin_runs" --jobs 4 --no-progress 2>&1 | tee "$OUT/sweep_twin.log"
fi
T_TWIN=$(date +%s)
echo "== audits ($(left) s left)"
timeout -k 5 "$(( $(left) > 60 ? 60 : $(left) ))" $EK audit "$OUT/runs" \
  --out "$OUT/audit_real" 2>&1 | tee "$OUT/audit_real.log"
timeout -k 5 "$(( $(left) > 60 ? 60 : $(left) ))" $EK audit "$OUT" \
  --out "$OUT/audit" 2>&1 | tee "$OUT/audit.log"
T_AUDIT=$(date +%s)
printf '{"sweep": %d, "fit": %d, "twin_harness": %d, "audits": %d, "total_before_summary": %d}\n' \
  "$((T_SWEEP - T_START))" "$((T_FIT - T_SWEEP))" "$((T_TWIN - T_FIT))" \
  "$((T_AUDIT - T_TWIN))" "$((T_AUDIT - T_START))" > "$OUT/wall.json"
python "$HERE/summarize_gpu.py" "$OUT/runs" "$OUT/audit" --wall "$OUT/wall.json" \
  --fit "$OUT/fit.json" > "$OUT/RESULTS.md" 2> "$OUT/summarize.err"
cat "$OUT/RESULTS.md"
[ -s "$OUT/summarize.err" ] && { echo "summarize_gpu.py stderr:"; cat "$OUT/summarize.err"; }
echo "total wall time: $(( $(date +%s) - T_START )) s (budget ${TOTAL_S} s)"
if [ -n "${COMMIT_TO:-}" ]; then
  # commit the run logs (Parquet, small) so anyone can re-audit them
  mkdir -p "$COMMIT_TO"
  for item in runs twin_runs; do
    [ -d "$OUT/$item" ] || continue
    rm -rf "${COMMIT_TO:?}/$item"
    mkdir -p "$COMMIT_TO/$item"
    for run in "$OUT/$item"/*/; do cp -r "$run" "$COMMIT_TO/$item/"; done
    [ -f "$OUT/$item/plan.json" ] && cp "$OUT/$item/plan.json" "$COMMIT_TO/$item/"
  done
  FILES=()
  for f in twin.toml fit.json RESULTS.md campaign.toml campaign_twin.toml plan.log; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$COMMIT_TO/$f" && FILES+=("$COMMIT_TO/$f")
  done
  du -sh "$COMMIT_TO/runs" "$COMMIT_TO/twin_runs" 2>/dev/null
  git add "$COMMIT_TO/runs" "$COMMIT_TO/twin_runs" "${FILES[@]}" \
    && git commit -m "GPU campaign run logs, fitted twin and results" -- "$COMMIT_TO/runs" \
         "$COMMIT_TO/twin_runs" "${FILES[@]}" \
    || echo "nothing committed (not a git checkout, or nothing changed)"
fi
