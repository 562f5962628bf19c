#!/bin/bash
# Prefix caching on one CPU worker (random:small, one thread): llm-bench serve --workload W
# (default prefix:8:1024; for example chat:8) with engine.prefix_cache true and false, one after
# the other; MAX_TOKENS (default 16) tokens per request, CONCURRENCY (default 4) streams,
# REQUESTS (default 64) requests. Needs build/. python3: any.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bin
workload=${1:-prefix:8:1024}
max_tokens=${MAX_TOKENS:-16}
concurrency=${CONCURRENCY:-4}
requests=${REQUESTS:-64}
for cache in true false; do
  $B/llm-worker --model.path random:small --server.listen 127.0.0.1:0 --server.metrics_listen 127.0.0.1:0 --engine.cpu_threads 1 --engine.prefix_cache $cache > /tmp/w_$cache.log 2>&1 &
  pid=$!
  for i in $(seq 100); do grep -q "serving" /tmp/w_$cache.log && break; sleep 0.1; done
  port=$(sed -n 's/.* on port \([0-9]*\),.*/\1/p' /tmp/w_$cache.log)
  $B/llm-bench serve --target 127.0.0.1:$port --workload "$workload" --concurrency "$concurrency" --requests "$requests" --max-tokens "$max_tokens" --ignore-eos > /tmp/exp1_$cache.json
  kill $pid; wait $pid 2>/dev/null || true
done
python3 - <<'PY'
import json
for c in ['true','false']:
  r=json.load(open(f'/tmp/exp1_{c}.json'))['results'][0]
  print('cache', c, {k: round(r[k],2) for k in ['ttft_ms_p50','ttft_ms_p99','output_tokens_per_s','requests_per_s','e2e_ms_p50']}, 'errors', r['errors'])
PY
