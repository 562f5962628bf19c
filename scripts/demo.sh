#!/usr/bin/env bash
# The main job: sets up, builds, starts two CPU llm-workers on the test model from ../shared (or,
# when ../shared is absent, a random model made by llm-cli make-model) and one llm-router in front
# of them, streams an answer to a request through the router with llm-cli call, shows where the
# router sent it, and drains everything with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build
scripts/build.sh --no-tests
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
for i in 1 2; do
  build/bin/llm-worker --model.path "$model" --server.listen 127.0.0.1:0 \
    --server.metrics_listen 127.0.0.1:0 --engine.cpu_threads 1 >"$logs/worker$i.log" 2>&1 &
  pids+=($!)
  wait_for "$logs/worker$i.log" "$!" "serving"
  port=$(sed -n 's/.* on port \([0-9]*\),.*/\1/p' "$logs/worker$i.log")
  workers+=("127.0.0.1:$port")
  cat "$logs/worker$i.log"
done

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
  [[ ${ready:-0} -ge 2 ]] && break
  sleep 0.1
done

echo "demo: llm-cli call --target 127.0.0.1:$port --prompt \"Once upon a time\"  (through the router)"
build/bin/llm-cli call --target "127.0.0.1:$port" --prompt "Once upon a time" --max-tokens 120 \
  --temperature 0.6 --top-k 40 --top-p 0.9 --seed 1
served=$(http_request "$http" GET /v1/models | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
body="{\"model\": \"$served\", \"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"stream\": true}"
echo "demo: POST http://127.0.0.1:$http/v1/completions $body  (the OpenAI API, same router)"
http_request "$http" POST /v1/completions "$body"
echo "demo: router picks per worker:"
metrics_page "$metrics" | grep '^llm_router_picks_total' || true

# Drain: the router first, then the workers.
for p in "${pids[@]}"; do
  kill -TERM "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
done
pids=()
tail -n 1 "$logs/router.log" "$logs"/worker*.log
