#!/bin/bash
# cache_aware against p2c behind llm-router, and the single-worker ceiling: CPU workers
# (random:small, one thread each) and llm-bench serve --workload W (default prefix:12:1024; for
# example chat:8), CONCURRENCY (default 6) streams, REQUESTS (default 96) requests of MAX_TOKENS
# (default 16) tokens. Runs, one after the other: one worker (the hit rate a single cache
# reaches), three workers with p2c, three with cache_aware. Prints per run the cluster's prefix
# hit rate (hit tokens / looked-up tokens, summed over the workers' /metrics), the requests each
# worker served, TTFT and throughput. Needs build/. python3: any.
set -uo pipefail
cd "$(dirname "$0")/.."
B=build/bin
workload=${1:-prefix:12:1024}
concurrency=${CONCURRENCY:-6}
requests=${REQUESTS:-96}
max_tokens=${MAX_TOKENS:-16}
out=$(mktemp -d)
metric() { exec 3<>/dev/tcp/127.0.0.1/$1; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3; exec 3<&-; }
value() { sed -n "s/^$1 \([0-9.e+]*\).*/\1/p"; }
for run in single:1:p2c p2c:3:p2c cache_aware:3:cache_aware; do
  IFS=: read -r name n policy <<<"$run"
  pids=(); workers=(); mports=()
  for i in $(seq "$n"); do
    $B/llm-worker --model.path random:small --server.listen 127.0.0.1:0 \
      --server.metrics_listen 127.0.0.1:0 --engine.cpu_threads 1 >"$out/w$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq "$n"); do
    for _ in $(seq 100); do grep -q serving "$out/w$i.log" && break; sleep 0.1; done
    workers+=("127.0.0.1:$(sed -n 's/.* on port \([0-9]*\),.*/\1/p' "$out/w$i.log")")
    mports+=("$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$out/w$i.log")")
  done
  list=$(IFS=,; echo "${workers[*]}")
  $B/llm-router --router.listen 127.0.0.1:0 --router.metrics_listen 127.0.0.1:0 \
    --router.http_listen "" --policy.name "$policy" --discovery.workers "$list" >"$out/r.log" 2>&1 &
  rpid=$!
  for _ in $(seq 100); do grep -q "routing on port" "$out/r.log" && break; sleep 0.1; done
  port=$(sed -n 's/.*routing on port \([0-9]*\),.*/\1/p' "$out/r.log")
  sleep 1.5  # the router's first load reports
  $B/llm-bench serve --target "127.0.0.1:$port" --workload "$workload" \
    --concurrency "$concurrency" --requests "$requests" --max-tokens "$max_tokens" --ignore-eos \
    >"$out/$name.json"
  q=0; h=0; served=()
  for m in "${mports[@]}"; do
    page=$(metric "$m")
    q=$(python3 -c "print($q + $(value llm_prefix_cache_queries_total <<<"$page"))")
    h=$(python3 -c "print($h + $(value llm_prefix_cache_hits_total <<<"$page"))")
    served+=("$(sed -n 's/^llm_requests_finished_total{reason="length"} \([0-9]*\).*/\1/p' <<<"$page")")
  done
  echo "$name hit_rate=$(python3 -c "print(round($h / $q, 3) if $q else 0)") served=${served[*]}" \
    >"$out/$name.txt"
  kill "$rpid" "${pids[@]}"; wait 2>/dev/null
done
python3 - "$out" "$workload" <<'PY'
import json, sys
out, workload = sys.argv[1], sys.argv[2]
print('workload', workload)
for name in ['single', 'p2c', 'cache_aware']:
  r = json.load(open(f'{out}/{name}.json'))['results'][0]
  line = open(f'{out}/{name}.txt').read().strip()
  print(line, {k: round(r[k], 1) for k in ['ttft_ms_p50', 'ttft_ms_p99', 'output_tokens_per_s']},
        'errors', r['errors'])
PY
rm -rf "$out"
