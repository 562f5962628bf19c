// The CUDA backend's switches: the paths kept side by side so they can be compared and turned
// off (graphs, the GEMV, the tiled prefill, the fused norms, ...). Declared once here, with
// their worker configuration key, llm-bench flag and help, and passed whole from the worker's
// configuration (engine.cuda_*) through the backend and the runner to the model: no layer
// copies them field by field. No CUDA type appears, so every build sees it.
#ifndef LLM_WORKER_RUNNER_CUDA_SWITCHES_H_
#define LLM_WORKER_RUNNER_CUDA_SWITCHES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace llm::runner {

struct CudaSwitches {
  // Decode steps replay captured CUDA graphs.
  bool graphs = true;
  // Fixed matrix-product algorithms (kernels/gemm.h), so a request's tokens do not depend on
  // what else is in the batch; the GEMV is off.
  bool batch_invariant = false;
  // Products of up to kernels::kGemvMaxRows rows (small decode steps) through our GEMV kernel
  // (kernels/gemm/gemv.h) rather than cuBLASLt. Ignored when batch_invariant.
  bool gemv = true;
  // The GEMV's products with fewer weight rows than this per multiprocessor spread each output
  // over 4 warps (GemvSplits; kernels::kGemvRowsPerSm); 0: one warp an output.
  int32_t gemv_split_rows_per_sm = 24;
  // Prompt attention through the tiled tensor-core kernel rather than one block per prompt row.
  bool tiled_prefill = true;
  // The tiled prompt attention through the Hopper kernel (wgmma and TMA,
  // kernels/attention/prefill_attention_sm90.h) where the device (compute capability 9.0), the
  // head size (64, 128), the cache (bf16) and its block (a power of two, 8 or more) allow; the
  // tiled kernel elsewhere. Off until a device run has measured it (docs/cuda.md).
  bool hopper_prefill = false;
  // Speculative decoding (engine.speculative) for constrained requests too: their verify rows
  // are masked along the proposals, which the step copies back to the host after proposing
  // (worker/runner/slot_constraints.h). Off until a device run has checked it (docs/cuda.md);
  // off, a constrained request decodes one token a step.
  bool speculate_constrained = false;
  // Decode attention on tensor cores where the head size allows (64, 128).
  bool tensor_core_decode = true;
  // RMSNorm and the residual add inside the GEMV products at a few rows (the same bits).
  bool fused_norm = true;
  // Where cuBLASLt runs the o and down products (above the GEMV's rows, or every row count in
  // batch-invariant mode), they add into the residual stream (beta = 1), so the next norm reads
  // one fp32 stream instead of two and writes none (kernels::Gemm::CublasLtAccumulates: bf16
  // weights without a bias).
  bool gemm_residual = true;
  // The last layer of a step with prompt rows computes past its K/V write only the rows that
  // are sampled.
  bool last_layer_sampled_rows = true;
  // cuBLASLt's candidate algorithms for the prompt-sized products timed at start, the fastest
  // kept (no faster on an H100 for llama-3-8b's 4k prompt, so off).
  bool gemm_tuning = false;
  // Programmatic dependent launch between the kernels; process-wide. Unset (auto): where it
  // pays for the model (ProgrammaticLaunchPays, cuda/cuda_model.h).
  std::optional<bool> pdl;
};

// How one switch is set from outside: its worker configuration key, its llm-bench flag, its
// help, and the member it sets (exactly one of the three member pointers).
struct CudaSwitchSpec {
  const char* key;  // "engine.cuda_fused_norm"
  // llm-bench gpu's flag. A boolean switch's flag is a bare flag that sets the switch to the
  // opposite of its default ("no-fused-norm", "gemm-tuning"); the others take a value.
  const char* bench_flag;
  const char* help;
  bool CudaSwitches::*flag = nullptr;
  int32_t CudaSwitches::*number = nullptr;
  std::optional<bool> CudaSwitches::*tristate = nullptr;  // auto, true or false
  int32_t min = 0, max = 0;                               // number: the accepted range
};

// Every switch, in the order the configuration lists them.
std::span<const CudaSwitchSpec> CudaSwitchSpecs();

// A tristate switch's setting: "auto" (unset), "true" or "false"; INVALID_ARGUMENT otherwise
// (the caller names the key or flag).
absl::StatusOr<std::optional<bool>> ParseTristate(const std::string& value);
std::string TristateName(const std::optional<bool>& value);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CUDA_SWITCHES_H_
