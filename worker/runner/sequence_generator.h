// Generates one sequence to completion on a CpuModel: prefill the prompt, then decode one token
// per step with the sampler. The unbatched reference path (llm-cli generate, and the baseline
// the batching engine's outputs are compared against).
#ifndef LLM_WORKER_RUNNER_SEQUENCE_GENERATOR_H_
#define LLM_WORKER_RUNNER_SEQUENCE_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/finish_reason.h"
#include "worker/runner/cpu_model.h"
#include "worker/sampling/sampling_params.h"

namespace llm::runner {

struct SequenceOptions {
  int32_t max_tokens = 16;
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // EOS ids and request stop ids; generation ends after one
  int32_t kv_block_tokens = 16;
};

struct SequenceResult {
  std::vector<int32_t> generated_ids;  // including a final stop token
  // kStopToken, kLength, or kStopString when `on_token` ended generation.
  sampling::FinishReason finish = sampling::FinishReason::kLength;
};

// `on_token` is called after each generated token; returning false ends generation (a stop
// string was found). INVALID_ARGUMENT when prompt + max_tokens exceeds the model's context.
absl::StatusOr<SequenceResult> GenerateSequence(
    CpuModel& model, std::span<const int32_t> prompt_ids, const SequenceOptions& options,
    const std::function<bool(int32_t)>& on_token = nullptr);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_SEQUENCE_GENERATOR_H_
