#!/usr/bin/env bash
# One repetition of one configuration: start the server from CONFIG, benchmark it with
# GuideLLM, write the report to OUT, stop the server.
# Usage: serve_and_bench.sh CONFIG OUT
# Replace the `evalkit serve` line with however your project starts its server.
set -euo pipefail
config="$1"
out="$2"
port="${PORT:-8000}"
evalkit serve --config "$config" --device cpu --port "$port" --served-model-name model &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 1
done
guidellm run \
  --backend "kind=openai_http,target=http://127.0.0.1:$port,model=model" \
  --tokenizer "kind=huggingface_auto,model=${TOKENIZER:-gpt2}" \
  --data kind=synthetic_text,prompt_tokens=64,output_tokens=32 \
  --profile kind=constant,rate=4 \
  --constraint kind=max_duration,seconds=60 \
  --output "kind=json,path=$out" \
  --disable-console-interactive
