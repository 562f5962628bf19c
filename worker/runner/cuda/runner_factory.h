// The CUDA backend as the rest of the worker sees it: the runner's options and a factory that
// returns the engine's ModelRunner interface. No CUDA type or header appears here, so
// worker/backend needs nothing else; the implementation is CudaRunner (cuda_runner.h).
#ifndef LLM_WORKER_RUNNER_CUDA_RUNNER_FACTORY_H_
#define LLM_WORKER_RUNNER_CUDA_RUNNER_FACTORY_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "worker/engine/engine_sizes.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/runner/model_runner.h"

namespace llm::runner::cuda {

struct CudaRunnerOptions {
  int device = 0;
  // kv_blocks 0: kv_memory_fraction of the device memory free once weights and buffers are
  // allocated (capped at what max_slots sequences of max_context tokens can use).
  engine::EngineSizes sizes{.max_slots = 256, .kv_blocks = 0, .block_tokens = 16};
  double kv_memory_fraction = 0.9;
  // Prompt tokens one step may hold (the scheduler's max_prefill_tokens is capped here, and
  // takes this when engine.max_prefill_tokens is 0); decode rows come on top, up to max_slots.
  int32_t max_prefill_tokens = 2048;
  // Prompt tokens of a step in which nothing decodes (engine.max_prefill_tokens_alone; the
  // scheduler takes this when it is 0): a lone prompt's time to first token, with no stall to
  // weigh. The buffers hold max(this, max_prefill_tokens) prompt rows plus max_slots decode rows.
  int32_t max_prefill_tokens_alone = 4096;
  int32_t max_context = 0;       // 0: the model's max_position_embeddings
  int32_t valid_vocab_size = 0;  // ids >= this are never sampled; 0: the model's vocabulary
  bool cuda_graphs = true;       // decode steps replay captured graphs
  // Fixed matrix-product algorithms (kernels/gemm.h) so a sequence's tokens do not depend on
  // what else is in the batch.
  bool batch_invariant = false;
  // Products of up to kernels::kGemvMaxRows rows (small decode steps) through the GEMV kernel
  // (kernels/gemv.h) instead of cuBLASLt. Ignored when batch_invariant.
  bool gemv = true;
  // The GEMV's products of fewer weight rows than this per multiprocessor take 4 warps an output
  // (kernels/gemv.h, GemvSplits; its default kGemvRowsPerSm); 0: one warp an output.
  int32_t gemv_split_rows_per_sm = 24;
  // Prompt attention through the tiled tensor-core kernel (kernels/prefill_attention.h) rather
  // than one block per prompt row.
  bool tiled_prefill = true;
  // Decode attention on tensor cores where the head size allows (64, 128; kernels/attention.h)
  // rather than CUDA cores.
  bool tensor_core_decode = true;
  // RMSNorm and the residual add inside the GEMV products at a few rows (kernels/gemv.h).
  bool fused_norm = true;
  // The last layer of a step with prompt rows computes only the rows that are sampled past its
  // K/V write (CudaModel::Forward).
  bool last_layer_sampled_rows = true;
  // Time cuBLASLt's candidate algorithms for the prompt-sized products at start and keep the
  // fastest (kernels/gemm.h, tuning); no faster on an H100 (llama-3-8b, 4k prompt), so off.
  bool gemm_tuning = false;
  // Programmatic dependent launch between the kernels (kernels/launch.cuh); process-wide.
  // Unset: where it pays for the model (ProgrammaticLaunchPays, cuda_model.h).
  std::optional<bool> pdl;
};

// CUDA devices this process can use; 0 when there is no driver or no device.
int CudaDeviceCount();

// A CUDA runner on options.device, with weights from `store`, or synthetic ones from `seed`
// when `store` is null. Errors name the option (engine.device, engine.kv_memory_fraction) or
// the unsupported shape; FAILED_PRECONDITION without a device.
absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCudaRunner(const model::ModelConfig& config,
                                                              const model::TensorStore* store,
                                                              uint64_t seed,
                                                              const CudaRunnerOptions& options);

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_RUNNER_FACTORY_H_
