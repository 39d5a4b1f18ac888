#!/usr/bin/env bash
# One command: the sim twin (harness, seconds), the bursty GPU campaign (torch trainer +
# torch sidecar on CUDA, one warm rig for every run), `evalkit audit` over both, then
# RESULTS.md -- all inside TOTAL_S (default 420 s).
#   OUT=/some/dir examples/gpu/run_gpu_campaign.sh            (default OUT: ./gpu-out)
# Knobs (env): SEEDS (2), HORIZON_S (20), TOTAL_S (420: wall-clock budget of the whole
#   script), RESERVE_S (60: kept for audit + summary), SERVER_MODEL (qwen2.5-1.5b),
#   TRAINER_MODEL (qwen2.5-0.5b), OVERRIDES (extra "key=value;key=value" replacements of
#   top-level or [backend.config] lines, e.g. "device='cpu';batch=2"), SMOKE=1 (one run).
# CPU dry run of every step (tiny models, short horizon):
#   DRY_RUN_CPU=1 OUT=/tmp/gpu-dry examples/gpu/run_gpu_campaign.sh
set -u
export PYTHONUNBUFFERED=1
T_START=$(date +%s)
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$PWD/gpu-out}"
SEEDS="${SEEDS:-2}"; HORIZON_S="${HORIZON_S:-20}"
TOTAL_S="${TOTAL_S:-420}"; RESERVE_S="${RESERVE_S:-60}"
SERVER_MODEL="${SERVER_MODEL:-qwen2.5-1.5b}"; TRAINER_MODEL="${TRAINER_MODEL:-qwen2.5-0.5b}"
OVERRIDES="${OVERRIDES:-}"
if [ "${DRY_RUN_CPU:-0}" = "1" ]; then
  SERVER_MODEL=tiny; TRAINER_MODEL=tiny; HORIZON_S="${HORIZON_S_DRY:-12}"
  OVERRIDES="device='cpu';batch=2;seq_len=32;max_batch=8;max_prompt_tokens=64;merge_min_s=0.5;merge_duration_s=1.0;min_gap_s=2.0;max_gap_s=6.0;inner_step_s=0.05;e2e_s=1.0;${OVERRIDES}"
fi
mkdir -p "$OUT"
CAMPAIGN="$OUT/campaign.toml"
SEEDS="$SEEDS" HORIZON_S="$HORIZON_S" SERVER_MODEL="$SERVER_MODEL" \
TRAINER_MODEL="$TRAINER_MODEL" OVERRIDES="$OVERRIDES" \
python - "$HERE/bursty_gpu.toml" "$CAMPAIGN" <<'PY'
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
# the sim twin (harness): same trace, corridor, SLO and policies on the simulated backend,
# its own regime, so the audit's effect-size transfer compares harness and real rho_s
regime = re.search(r'(?m)^regime = "(.*)"', text).group(1)
sim = re.sub(r'(?m)^regime = .*$', f'regime = "{regime}_sim"', text)
sim = re.sub(r'(?ms)^\[backend\]\nname = .*?(?=^\[\[policies\]\])',
             '[backend]\nname = "sim"\n\n', sim)
open(sys.argv[2].replace(".toml", "_sim.toml"), "w").write(sim)
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
echo "== sim twin (harness) -> $OUT/runs"
timeout -k 5 90 evalkit sweep "$OUT/campaign_sim.toml" --out "$OUT/runs" --jobs 4 \
  --no-progress 2>&1 | tee "$OUT/sweep_sim.log"
DEADLINE=$((T_START + TOTAL_S - RESERVE_S))
echo "== sweep -> $OUT/runs (no new run starts after $(date -d @"$DEADLINE" +%T) unless it fits)"
# capped_sweep.py starts a run only if it fits before the deadline; `timeout` is a backstop
timeout -k 15 --signal=INT "$((DEADLINE - $(date +%s) + 30))" \
  python "$HERE/capped_sweep.py" "$CAMPAIGN" "$OUT/runs" "$DEADLINE" 2>&1 | tee "$OUT/sweep.log"
echo "sweep exit: ${PIPESTATUS[0]}"
T_SWEEP=$(date +%s)
echo "== audit"
timeout -k 10 "$((RESERVE_S - 15))" evalkit audit "$OUT/runs" --out "$OUT/audit" 2>&1 \
  | tee "$OUT/audit.log"
T_AUDIT=$(date +%s)
printf '{"sweep": %d, "audit": %d, "total_before_summary": %d}\n' \
  "$((T_SWEEP - T_START))" "$((T_AUDIT - T_SWEEP))" "$((T_AUDIT - T_START))" > "$OUT/wall.json"
python "$HERE/summarize_gpu.py" "$OUT/runs" "$OUT/audit" --wall "$OUT/wall.json" \
  > "$OUT/RESULTS.md" 2> "$OUT/summarize.err"
cat "$OUT/RESULTS.md"
[ -s "$OUT/summarize.err" ] && { echo "summarize_gpu.py stderr:"; cat "$OUT/summarize.err"; }
echo "total wall time: $(( $(date +%s) - T_START )) s (budget ${TOTAL_S} s)"
