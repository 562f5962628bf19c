#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. GPU tests (label `gpu`) skip with a
# message where no GPU is present. Needs ../shared (models, tokenizers, golden outputs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@"
