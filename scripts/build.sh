#!/usr/bin/env bash
# Configures and builds everything into build/ (binaries in build/bin/). Extra arguments go to
# CMake, e.g. scripts/build.sh -DLLM_ENABLE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLM_WERROR=ON "$@" >/dev/null
cmake --build build -j "$(nproc)"
