#!/usr/bin/env bash
# Packs what a lent GPU machine (which has the CUDA toolkit and driver but none of our Debian
# packages) needs to run the GPU tests and `llm-bench gpu`: the binaries built here, the shared
# libraries they load from Debian's packages, the test model and golden outputs, and run.sh,
# which points the loader and the tests at them. Output: build-gpu-bundle/ (git-ignored, about
# 110 MiB; the device tool carries 64 MiB a call, so carry it compressed: `tar cf -
# build-gpu-bundle | xz -9 > build-gpu-carry/bundle.tar.xz` is about 12 MiB, since -9's window
# spans the five binaries' shared kernels), to run on the device:
#
#   scripts/gpu_bundle.sh
#   device run: tar xJf build-gpu-carry/bundle.tar.xz &&
#               build-gpu-bundle/session.sh lease|targets|check|decode|compare|prefill
#                 (scripts/gpu_session.sh: the GPU tests and sanitizers, then the benches)
#   or one binary: build-gpu-bundle/run.sh kernels_test (cuda_runner_test, llm-bench gpu ...)
#
# The CUDA runtime is linked statically; cuBLASLt and NVML come from the device's toolkit and
# driver (loaded at run time).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
out=build-gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/shared/models" "$out/shared/golden"
bins=(build/tests/bin/kernels_test build/tests/bin/cuda_runner_test build/bin/llm-bench
      build/bin/llm-worker build/bin/llm-cli)
for b in "${bins[@]}"; do
  cp "$b" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$b")"
done
# Libraries from Debian's packages; the C and C++ runtimes and the driver are the device's own.
ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
shared="${LLM_SHARED_DIR:-../shared}"
cp -r "$shared/models/tinystories-656k" "$shared/models/tinystories-656k-f32" "$out/shared/models/"
cp -r "$shared/golden/." "$out/shared/golden/"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs one bundled binary with the bundle's libraries and test data.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LLM_SHARED_DIR="$here/shared"
name="$1"
shift
exec "$here/bin/$name" "$@"
RUN
chmod +x "$out/run.sh"
cp scripts/gpu_session.sh "$out/session.sh"
du -sh "$out"
