// Sampling parameters of one request, validated, in the engine's own types (not protobuf).
#ifndef LLM_WORKER_SAMPLING_SAMPLING_PARAMS_H_
#define LLM_WORKER_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace llm::sampling {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int64_t top_k = 0;                // 0 = disabled (int64: the uint32 a client sent)
  float top_p = 1.0f;               // 1 = disabled
  float min_p = 0.0f;               // 0 = disabled
  float repetition_penalty = 1.0f;  // 1 = disabled; over prompt and output tokens
  float presence_penalty = 0.0f;    // over output tokens
  float frequency_penalty = 0.0f;   // over output tokens
  uint64_t seed = 0;
  // Added to these ids' logits before anything else (OpenAI's logit_bias); sorted by id.
  std::vector<std::pair<int32_t, float>> logit_bias;
  static constexpr size_t kMaxLogitBias = 1024;

  bool greedy() const { return temperature == 0.0f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }

  // INVALID_ARGUMENT naming the field (as "sampling.<field>") when a value is out of range:
  // temperature [0, 100], top_k [0, vocab], top_p (0, 1], min_p [0, 1],
  // repetition_penalty (0, 10], presence/frequency_penalty [-2, 2]; NaN anywhere.
  absl::Status Validate(int32_t vocab_size) const;
};

}  // namespace llm::sampling

#endif  // LLM_WORKER_SAMPLING_SAMPLING_PARAMS_H_
