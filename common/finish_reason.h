// Why a sequence stopped generating: one vocabulary from the device sampler to the API. The
// samplers (CPU and GPU) decide kStopToken and kLength as they append a token; the output stage
// adds kStopString; the worker's metrics count a failed request as kError. (A cancelled request
// has no reason: nothing is sent to a caller that went away.) Header-only with fixed values: the
// GPU sampler (kernels/sampling/sampling.h) writes them into its output rows.
#ifndef LLM_COMMON_FINISH_REASON_H_
#define LLM_COMMON_FINISH_REASON_H_

#include <cstdint>

namespace llm::sampling {

enum class FinishReason : int32_t {
  kNone = 0,        // still generating
  kStopToken = 1,   // sampled one of the request's stop_token_ids (EOS included)
  kLength = 2,      // reached max_tokens
  kStopString = 3,  // the text reached one of the request's stop strings
  kError = 4,       // the request failed after it started
};

}  // namespace llm::sampling

#endif  // LLM_COMMON_FINISH_REASON_H_
