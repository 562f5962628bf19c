#!/usr/bin/env bash
# A lent GPU session's runs, in the order they matter, for the device tool's limits (10 minutes
# a call, about 30 a session): `scripts/gpu_bundle.sh` copies this script into the bundle, and
# each phase is one call on the device:
#
#   build-gpu-bundle/session.sh check     # ~6 min: the GPU tests, then memcheck and racecheck
#   build-gpu-bundle/session.sh decode    # ~8 min: llm-bench attention, then llm-bench gpu
#                                         #   for issue 12's targets
#   build-gpu-bundle/session.sh compare   # ~9 min: the same with PDL, without the fused
#                                         #   norms, with CUDA-core decode attention, and
#                                         #   with drawn tokens (the full sampler)
#   build-gpu-bundle/session.sh prefill   # ~8 min: TTFT, the prefill stall, chunk sizes (13)
#
# Every command runs under its own timeout, its standard output in $OUT/<phase>/<name>.out
# (llm-bench's JSON: <name>.json) and its standard error in <name>.err — $OUT is the device
# tool's output folder, ./gpu-out elsewhere; a failure is recorded and the phase goes on. The phase ends with a summary (name, exit status,
# seconds) in $OUT/<phase>/summary.txt, also printed, since the tool shows only the output's
# tail. Uses bash and coreutils only (the device image has none of our packages).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
phase="${1:?usage: session.sh check|decode|compare|prefill}"
out="${OUT:-$PWD/gpu-out}/$phase"
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"

# The phase's own budget (seconds), under the device tool's 10 minutes a call, so the summary is
# always printed: a step gets at most what is left, and none starts with under a minute left.
budget="${BUDGET:-570}"

# step NAME SECONDS COMMAND...: runs COMMAND with a timeout, its output to NAME.out/.err.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - SECONDS))
  if ((left < 60)); then
    printf '%-40s skipped: %ss of the budget left\n' "$name" "$left" | tee -a "$summary"
    return 0
  fi
  ((limit > left - 10)) && limit=$((left - 10))
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.out" 2> "$out/$name.err"
  local rc=$?
  printf '%-40s rc=%-4s %4ss\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$summary"
  return 0
}
run=("$here/run.sh")
bench() {  # bench NAME SECONDS ARGS...: llm-bench gpu, its JSON (standard output) as NAME.json
  local name="$1" limit="$2"
  shift 2
  step "$name" "$limit" "${run[@]}" llm-bench gpu "$@"
  [[ -f "$out/$name.out" ]] && mv "$out/$name.out" "$out/$name.json"
}
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

nvidia-smi -L > "$out/device.txt" 2>&1 || true
cat "$out/device.txt"
case "$phase" in
  check)
    step kernels_test 240 "${run[@]}" kernels_test
    step cuda_runner_test 240 "${run[@]}" cuda_runner_test
    # The kernels whose last block combines or steps a row (decode attention's chunks, the
    # sampler's selects and draw), and the fused GEMV epilogues, under the sanitizers.
    filter='AttentionKernelTest.*:SampleKernelTest.*:RopeKvKernelTest.*:GemmTest.Gated*'
    filter+=':GemvFusionTest.*'
    step memcheck 240 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter="$filter"
    step racecheck 240 "$sanitizer" --tool racecheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter="AttentionKernelTest.*:SampleKernelTest.*"
    ;;
  decode)
    decode=(--ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
    # The decode attention kernels alone, both of them: time and K/V bandwidth per shape.
    step attention 90 "${run[@]}" llm-bench attention
    [[ -f "$out/attention.out" ]] && mv "$out/attention.out" "$out/attention.json"
    bench llama-3-8b 200 --model random:llama-3-8b --kernels "${decode[@]}"
    bench llama-3.2-1b 120 --model random:llama-3.2-1b --kernels "${decode[@]}"
    bench qwen2-0.5b 90 --model random:qwen2-0.5b --kernels "${decode[@]}"
    ;;
  compare)
    # What the defaults were chosen over, each against the decode phase's default runs.
    decode=(--ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
    bench llama-3-8b-pdl 150 --model random:llama-3-8b --pdl "${decode[@]}"
    bench llama-3-8b-unfused-norm 150 --model random:llama-3-8b --no-fused-norm "${decode[@]}"
    bench llama-3-8b-cuda-cores 150 --model random:llama-3-8b --no-tensor-core-decode \
      "${decode[@]}"
    bench qwen2-0.5b-cuda-cores 90 --model random:qwen2-0.5b --no-tensor-core-decode \
      "${decode[@]}"
    # Drawn tokens take the sampler's nine launches; greedy ones (the default) its two.
    bench qwen2-0.5b-drawn 90 --model random:qwen2-0.5b --temperature 0.8 --kernels "${decode[@]}"
    ;;
  prefill)
    bench llama-3-8b-ttft 150 --model random:llama-3-8b --slots 64 --ttft-prompts 1024,4096 \
      --stall-prompt 0
    bench llama-3-8b-ttft-untiled 120 --model random:llama-3-8b --slots 64 \
      --ttft-prompts 1024,4096 --stall-prompt 0 --no-tiled-prefill
    bench llama-3.2-1b-ttft 90 --model random:llama-3.2-1b --slots 64 --ttft-prompts 4096 \
      --stall-prompt 0
    bench llama-3.1-8b-16k 180 --model random:llama-3.1-8b --slots 64 --ttft-prompts 16384 \
      --stall-prompt 16384
    step prefill-chunks 150 "${run[@]}" llm-bench prefill --backend cuda \
      --model random:llama-3.1-8b --chunks 512,1024,2048,4096 --ttft-prompts 4096 \
      --stall-prompt 16384
    ;;
  *)
    echo "unknown phase $phase (check, decode, compare or prefill)" >&2
    exit 2
    ;;
esac
echo "== $phase summary ($out)"
cat "$summary"
