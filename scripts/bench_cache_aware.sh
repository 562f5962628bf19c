#!/bin/bash
# cache_aware against p2c: three CPU workers (random:small, one thread each) behind llm-router,
# llm-bench serve --workload prefix:12:1024; prints each worker's prefix-cache counters, the
# router's picks per worker, and TTFT/throughput per policy. Needs build/.
cd "$(dirname "$0")/.."
B=build/bin
metric() { exec 3<>/dev/tcp/127.0.0.1/$1; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3; exec 3<&-; }
for policy in p2c cache_aware; do
  pids=(); workers=(); mports=()
  for i in 1 2 3; do
    $B/llm-worker --model.path random:small --server.listen 127.0.0.1:0 --server.metrics_listen 127.0.0.1:0 --engine.cpu_threads 1 > /tmp/w$i.log 2>&1 &
    pids+=($!)
  done
  for i in 1 2 3; do
    for k in $(seq 100); do grep -q serving /tmp/w$i.log && break; sleep 0.1; done
    workers+=("127.0.0.1:$(sed -n 's/.* on port \([0-9]*\),.*/\1/p' /tmp/w$i.log)")
    mports+=("$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' /tmp/w$i.log)")
  done
  list=$(IFS=,; echo "${workers[*]}")
  $B/llm-router --router.listen 127.0.0.1:0 --router.metrics_listen 127.0.0.1:0 --router.http_listen "" --policy.name $policy --discovery.workers $list > /tmp/r.log 2>&1 &
  rpid=$!
  for k in $(seq 100); do grep -q "routing on port" /tmp/r.log && break; sleep 0.1; done
  port=$(sed -n 's/.*routing on port \([0-9]*\),.*/\1/p' /tmp/r.log)
  rm=$(sed -n 's/.*metrics on port \([0-9]*\),.*/\1/p' /tmp/r.log)
  sleep 1.5
  $B/llm-bench serve --target 127.0.0.1:$port --workload prefix:12:1024 --concurrency 6 --requests 96 --max-tokens 16 --ignore-eos > /tmp/exp2_$policy.json
  q=0; h=0
  for m in "${mports[@]}"; do
    qq=$(metric $m | sed -n 's/^llm_prefix_cache_queries_total \([0-9.e+]*\).*/\1/p'); hh=$(metric $m | sed -n 's/^llm_prefix_cache_hits_total \([0-9.e+]*\).*/\1/p')
    echo "$policy worker :$m queries=$qq hits=$hh"
  done
  metric $rm | grep '^llm_router_picks_total'
  kill $rpid "${pids[@]}"; wait 2>/dev/null
done
python3 - <<'PY'
import json
for c in ['p2c','cache_aware']:
  r=json.load(open(f'/tmp/exp2_{c}.json'))['results'][0]
  print(c, {k: round(r[k],2) for k in ['ttft_ms_p50','ttft_ms_p99','output_tokens_per_s','e2e_ms_p50']}, 'errors', r['errors'])
PY
