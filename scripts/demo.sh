#!/usr/bin/env bash
# The main job: sets up, builds, and generates a story with the test model from ../shared (or,
# when ../shared is absent, with a random model made by llm-cli make-model).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build
scripts/build.sh
model=../shared/models/tinystories-656k
prompt="Once upon a time"
if [[ ! -d $model ]]; then
  model=build/models/tiny
  echo "demo: ../shared not found; using a random model in $model"
  [[ -f $model/config.json ]] || build/bin/llm-cli make-model --shape tiny --out "$model"
fi
echo "demo: llm-cli generate --model $model --prompt \"$prompt\""
build/bin/llm-cli generate --model "$model" --prompt "$prompt" --max-tokens 120 \
  --temperature 0.6 --top-k 40 --top-p 0.9 --seed 1
