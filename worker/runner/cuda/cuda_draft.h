// The draft model of speculative decoding on the CUDA backend (engine.speculative.method:
// draft): a second, smaller model sharing the target's tokenizer, loaded by the same runner on
// the same device, with its own weights, scratch and KV cache, and its K/V on the target's block
// ids (the cache has the target's block geometry and as many blocks), so the blocks the
// scheduler reserved for a request hold the draft's K/V too. Its step buffers share the
// target's slot table, block tables, decode list and upload: it reads the slots' state and
// writes only their proposals.
//
// Enqueue puts the draft's passes of a target step on the stream before the target's forward
// pass (kernels/speculative/draft_step.h: a prompt pass in a step with prompt rows, then for a
// speculative step group - 1 rounds of argmax proposals), so a speculative decode-only step's
// graph, captured around both, holds them. Nothing here is allocated after Create.
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_DRAFT_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_DRAFT_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda/cuda_model.h"
#include "worker/runner/cuda/runner_factory.h"
#include "worker/runner/cuda/step_buffers.h"

namespace llm::runner::cuda {

class CudaDraft {
 public:
  // Loads the draft's weights (16-bit), plans and allocates its buffers for the target's steps
  // (`target_config`; `target`: its sizes; `shared`: its buffers, whose slot table, block
  // tables, decode list and upload the draft reads) and its products' plans for the `buckets`
  // of decode slots. `options`: the target's (its switches, vocabulary), with no proposer.
  static absl::StatusOr<std::unique_ptr<CudaDraft>> Create(
      const CudaDraftSource& source, const CudaModelOptions& options,
      const model::ModelConfig& target_config, const StepSizes& target, const StepBuffers& shared,
      const std::vector<int32_t>& buckets, cudaStream_t stream);

  // The cache: `blocks` blocks of `block_tokens` positions, bf16, zeroed (AllocateKvCache).
  absl::Status AllocateCache(int32_t block_tokens, int32_t blocks);
  uint64_t weight_bytes() const { return model_->weights().bytes(); }
  uint64_t kv_cache_bytes() const { return kv_.bytes; }
  // The draft's config (its cache is bf16: KvBytesPerPosition(config(), false) a position).
  const model::ModelConfig& config() const { return model_->config(); }

  // The draft's passes of the target step `target` (its ForwardShape), enqueued on `stream`:
  // the prompt pass when the step has prompt rows, the rounds when it verifies (group > 1), the
  // catch-up pass when it decodes without verifying (unless target.draft_catch_up is false).
  absl::Status Enqueue(const ForwardShape& target, cudaStream_t stream);

 private:
  CudaDraft() = default;
  // The passes' shapes, from the target step's.
  static ForwardShape PromptShape(const ForwardShape& target);
  static ForwardShape RoundShape(const ForwardShape& target, int32_t round);
  static ForwardShape CatchUpShape(const ForwardShape& target);

  std::unique_ptr<CudaModel> model_;
  StepSizes sizes_;
  StepBuffers buffers_;
  KvCache kv_;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_DRAFT_H_
