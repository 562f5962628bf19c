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
#include "worker/engine/speculation.h"
#include "worker/model/config.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda_switches.h"
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
  CudaSwitches switches;         // the paths kept to compare (cuda_switches.h)
  // The KV cache's dtype and an FP8 cache's per-layer scales (engine.kv_cache_dtype, resolved:
  // model/kv_cache_spec.h). An FP8 cache holds twice the blocks in the same memory.
  model::KvCacheSpec kv;
  // Speculative decoding (engine.speculative): `ngram` proposes and verifies on the device
  // (kernels/speculative/); `draft` runs the draft model given to CreateCudaRunner on the
  // device too (cuda_draft.h).
  engine::SpeculativeConfig speculative;
};

// The draft model of engine.speculative.method: draft: its config, and its weights from
// `store`, or synthetic ones from `seed` when `store` is null. The backend checks that it shares
// the model's vocabulary and covers the served context.
struct CudaDraftSource {
  model::ModelConfig config;
  const model::TensorStore* store = nullptr;
  uint64_t seed = 0;
};

// CUDA devices this process can use; 0 when there is no driver or no device.
int CudaDeviceCount();

// A CUDA runner on options.device, with weights from `store`, or synthetic ones from `seed`
// when `store` is null. Errors name the option (engine.device, engine.kv_memory_fraction) or
// the unsupported shape; FAILED_PRECONDITION without a device.
// `quant` says how the linear layers run (model/quant_scheme.h): 16-bit, or FP8 with the
// checkpoint's scales, or quantised at load. `draft`: the draft model, required with
// engine.speculative.method: draft (INVALID_ARGUMENT naming the key without it).
absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCudaRunner(
    const model::ModelConfig& config, const model::TensorStore* store,
    const model::QuantScheme& quant, uint64_t seed, const CudaRunnerOptions& options,
    const CudaDraftSource* draft = nullptr);

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_RUNNER_FACTORY_H_
