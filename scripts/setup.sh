#!/usr/bin/env bash
# Installs what the build and the tests need on a Debian 12 machine. Idempotent: installs only
# what is missing. Uses apt-get (as root, or through sudo) and creates a Python virtual
# environment in .venv/ (from the first python3 on PATH) holding the Hugging Face `tokenizers`
# package, which the tokenizer agreement tests and the tokenizer benchmark compare against.
#
#   scripts/setup.sh            everything (build + tests)
#   scripts/setup.sh --build    only what building needs (used by the container images)
set -euo pipefail

cd "$(dirname "$0")/.."

build_packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libyaml-cpp-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libnghttp2-dev libssl-dev
  libhttp-parser-dev
)
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv python3-pip
  prometheus nginx openssl
  yamllint python3-yaml
)
# tests/deploy renders deploy/k8s with `kubectl kustomize`. Debian's kubernetes-client has an old
# kubectl (1.20, whose kustomize the overlays are written for too); add it only when neither
# kubectl nor kustomize is present, so that a newer kubectl is never shadowed.
if ! command -v kubectl >/dev/null && ! command -v kustomize >/dev/null; then
  test_packages+=(kubernetes-client)
fi

only_build=0
[[ "${1:-}" == "--build" ]] && only_build=1

wanted=("${build_packages[@]}")
((only_build)) || wanted+=("${test_packages[@]}")

missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
    as_root=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

if ((only_build)); then
  exit 0
fi

# Python environment for the tests' references (scripts/requirements.txt: Hugging Face
# `tokenizers`, the `openai` SDK, Jinja2, jsonschema for structured outputs, and numpy, ml_dtypes
# and safetensors for the independent FP8 checkpoint writer; every package pinned).
venv=.venv
if [[ ! -x $venv/bin/python ]]; then
  echo "setup: creating $venv with $(command -v python3)"
  python3 -m venv "$venv"
fi
if ! cmp -s scripts/requirements.txt "$venv/.requirements.txt"; then
  echo "setup: installing scripts/requirements.txt into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
  cp scripts/requirements.txt "$venv/.requirements.txt"
fi
echo "setup: done"
