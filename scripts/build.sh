#!/usr/bin/env bash
# Configures CMake (Ninja, Release, -Werror on our code) into build/ and builds; executables land
# in build/bin/. Prints what it configured: CUDA on or off and why, tests on or off.
#
#   scripts/build.sh              everything, tests included (needs scripts/setup.sh)
#   scripts/build.sh --no-tests   the programs only (scripts/setup.sh --build is enough)
#
# Other arguments go to CMake, e.g. scripts/build.sh -DLLM_ENABLE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=ON
cmake_args=()
for arg in "$@"; do
  case $arg in
    --no-tests) tests=OFF ;;
    *) cmake_args+=("$arg") ;;
  esac
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLM_WERROR=ON \
  -DLLM_BUILD_TESTS="$tests" "${cmake_args[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "build: CMake configuration failed (its output is above)" >&2
  exit 1
fi
sed -n 's/^-- llm: /build: /p' "$log"
cmake --build build -j "$(nproc)"
