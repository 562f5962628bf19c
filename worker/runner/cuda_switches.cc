#include "worker/runner/cuda_switches.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace llm::runner {
namespace {

using S = CudaSwitches;

constexpr std::array<CudaSwitchSpec, 13> kSpecs = {{
    {"engine.cuda_graphs", "no-graphs", "cuda: replay decode steps from captured CUDA graphs",
     &S::graphs},
    {"engine.batch_invariant", "batch-invariant",
     "cuda: fixed matrix-product algorithms, so a request's tokens do not depend on the rest of "
     "the batch (costs some speed)",
     &S::batch_invariant},
    {"engine.cuda_gemv", "no-gemv",
     "cuda: products of decode steps of up to 8 rows through our GEMV kernel rather than "
     "cuBLASLt (ignored with engine.batch_invariant)",
     &S::gemv},
    {"engine.cuda_gemv_split_rows_per_sm", "gemv-split-rows-per-sm",
     "cuda: the GEMV's products with fewer weight rows than this per multiprocessor (at batch 1 "
     "a wave of few warps: qwen2-0.5b's and llama-3.2-1b's q/k/v, o and down) spread each "
     "output over 4 warps, so more loads are in flight; 0: one warp an output (kept to compare)",
     nullptr, &S::gemv_split_rows_per_sm, nullptr, 0, 1 << 20},
    {"engine.cuda_tiled_prefill", "no-tiled-prefill",
     "cuda: prompt attention through the tiled tensor-core kernel; false: one block per prompt "
     "token (expected slower; kept to compare)",
     &S::tiled_prefill},
    {"engine.cuda_hopper_prefill", "hopper-prefill",
     "cuda: the tiled prompt attention through the Hopper kernel (wgmma and TMA) on a device of "
     "compute capability 9.0, for head dims 64 and 128 and a bf16 cache; elsewhere, and when "
     "false, the tiled kernel (off until measured on a device)",
     &S::hopper_prefill},
    {"engine.cuda_speculate_constrained", "speculate-constrained",
     "cuda: with engine.speculative, constrained requests (response_format, tools, regex...) "
     "speculate too, their verify rows masked along the proposals the step copies back to the "
     "host; false: they decode one token a step (off until measured on a device)",
     &S::speculate_constrained},
    {"engine.cuda_tensor_core_decode", "no-tensor-core-decode",
     "cuda: decode attention on tensor cores for head dims 64 and 128; false: the CUDA-core "
     "kernel (kept to compare)",
     &S::tensor_core_decode},
    {"engine.cuda_fused_norm", "no-fused-norm",
     "cuda: the residual add inside the o and down products (up to 8 rows) and each layer "
     "RMSNorm inside the next product (up to 2 rows), the same bits; false: the norm kernels do "
     "both",
     &S::fused_norm},
    {"engine.cuda_gemm_residual", "no-gemm-residual",
     "cuda: where cuBLASLt runs the o and down products (above the GEMV's 8 rows: prompt steps, "
     "larger batches; every row count with engine.batch_invariant), they add their output into "
     "the residual stream themselves (beta = 1; bf16 weights without a bias), so the next norm "
     "reads one fp32 stream rather than two and writes none; false: through a delta buffer the "
     "norm adds (kept to compare)",
     &S::gemm_residual},
    {"engine.cuda_last_layer_sampled_rows", "full-last-layer",
     "cuda: in a step with prompt tokens, the last layer computes past its K/V write only the "
     "rows that are sampled (about 1/layers of a prompt's work); false: every row (kept to "
     "compare)",
     &S::last_layer_sampled_rows},
    {"engine.cuda_gemm_tuning", "gemm-tuning",
     "cuda: at start, time cuBLASLt's first 8 algorithms for each prompt-sized product (512 "
     "rows and more) on the device and keep the fastest; a few seconds more start-up (on an "
     "H100 no faster for llama-3-8b's 4k prompt, so off)",
     &S::gemm_tuning},
    {"engine.cuda_pdl", "pdl",
     "cuda: launch the kernels with programmatic dependent launch (sm_90), so each may start "
     "while the one before it finishes: a small model's batch-1 step about 10% faster "
     "(qwen2-0.5b), larger models' 1-5% slower (docs/cuda-measurements.md); auto: on where a "
     "layer's weights are under 64 MiB, true or false",
     nullptr, nullptr, &S::pdl},
}};

}  // namespace

std::span<const CudaSwitchSpec> CudaSwitchSpecs() { return kSpecs; }

absl::StatusOr<std::optional<bool>> ParseTristate(const std::string& value) {
  if (value == "auto") return std::nullopt;
  if (value == "true" || value == "false") return value == "true";
  return absl::InvalidArgumentError(absl::StrCat("'", value, "' is not one of auto, true, false"));
}

std::string TristateName(const std::optional<bool>& value) {
  if (!value.has_value()) return "auto";
  return *value ? "true" : "false";
}

}  // namespace llm::runner
