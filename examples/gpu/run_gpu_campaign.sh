#!/usr/bin/env bash
# One command: bursty GPU campaign (torch trainer + torch sidecar on CUDA), then the audit,
# then a summary of what was measured.  Usage:
#   OUT=/some/dir examples/gpu/run_gpu_campaign.sh            (default OUT: ./gpu-out)
# Knobs (env): SEEDS (2), HORIZON_S (30), CAP_S (480, wall-clock cap of the sweep),
#   SERVER_MODEL (qwen2.5-1.5b), TRAINER_MODEL (qwen2.5-0.5b), SMOKE=1 (one short run only).
set -u
export PYTHONUNBUFFERED=1
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$PWD/gpu-out}"
SEEDS="${SEEDS:-2}"; HORIZON_S="${HORIZON_S:-30}"; CAP_S="${CAP_S:-480}"
mkdir -p "$OUT"
CAMPAIGN="$OUT/campaign.toml"
python - "$HERE/bursty_gpu.toml" "$CAMPAIGN" <<PY
import sys, re
text = open(sys.argv[1]).read()
text = re.sub(r"(?m)^seeds = .*", "seeds = ${SEEDS}", text)
text = re.sub(r"(?m)^horizon_s = .*", "horizon_s = ${HORIZON_S}.0", text)
text = text.replace('"qwen2.5-1.5b"', '"${SERVER_MODEL:-qwen2.5-1.5b}"')
text = text.replace('"qwen2.5-0.5b"', '"${TRAINER_MODEL:-qwen2.5-0.5b}"')
open(sys.argv[2], "w").write(text)
PY
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
if [ "${SMOKE:-0}" = "1" ]; then
  timeout "$CAP_S" python "$HERE/smoke_gpu.py" "$CAMPAIGN" "$OUT" 2>&1 | tee "$OUT/smoke.log"
  exit "${PIPESTATUS[0]}"
fi
echo "== sweep (cap ${CAP_S}s) -> $OUT/runs"
timeout --signal=INT "$CAP_S" evalkit sweep "$CAMPAIGN" --out "$OUT/runs" 2>&1 | tee "$OUT/sweep.log"
echo "sweep exit: ${PIPESTATUS[0]}"
echo "== audit"
evalkit audit "$OUT/runs" --out "$OUT/audit" 2>&1 | tee "$OUT/audit.log"
python "$HERE/summarize_gpu.py" "$OUT/runs" "$OUT/audit" > "$OUT/RESULTS.md" 2>&1
cat "$OUT/RESULTS.md"
