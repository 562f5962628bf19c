#!/usr/bin/env bash
# The main job: sets up, builds, starts llm-worker on the test model from ../shared (or, when
# ../shared is absent, a random model made by llm-cli make-model), streams an answer to a
# request over gRPC with llm-cli call, and drains the worker with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build
scripts/build.sh
model=../shared/models/tinystories-656k
if [[ ! -d $model ]]; then
  model=build/models/tiny
  echo "demo: ../shared not found; using a random model in $model"
  [[ -f $model/config.json ]] || build/bin/llm-cli make-model --shape tiny --out "$model"
fi
log=$(mktemp)
build/bin/llm-worker --model.path "$model" --server.listen 127.0.0.1:0 \
  --server.metrics_listen 127.0.0.1:0 >"$log" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  grep -q "serving" "$log" && break
  kill -0 "$worker" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
port=$(sed -n 's/.* on port \([0-9]*\),.*/\1/p' "$log")
cat "$log"
echo "demo: llm-cli call --target 127.0.0.1:$port --prompt \"Once upon a time\""
build/bin/llm-cli call --target "127.0.0.1:$port" --prompt "Once upon a time" --max-tokens 120 \
  --temperature 0.6 --top-k 40 --top-p 0.9 --seed 1
kill -TERM "$worker"
wait "$worker" || true
tail -n 2 "$log"
