// 1/T, the scale both samplers (CPU and GPU) apply to logits before the softmax. Header-only and
// usable from CUDA device code, so the two cannot disagree.
//
// Greedy (T = 0) reports logprobs of the plain logits: 1. A subnormal T, which validation lets
// through, has an inverse that overflows to inf, and inf times the top logit's gap of 0 is NaN:
// every probability and logprob of the row would be NaN. FLT_MAX instead gives the limit the
// user asked for: only the top logits keep any mass (logprob 0 when there is one), the rest -inf.
#ifndef LLM_WORKER_SAMPLING_INVERSE_TEMPERATURE_H_
#define LLM_WORKER_SAMPLING_INVERSE_TEMPERATURE_H_

#include <cfloat>

#if defined(__CUDACC__)
#define LLM_INVERSE_TEMPERATURE_HD __host__ __device__ inline
#else
#define LLM_INVERSE_TEMPERATURE_HD inline
#endif

namespace llm::sampling {

LLM_INVERSE_TEMPERATURE_HD float InverseTemperature(float temperature) {
  if (temperature == 0.0f) return 1.0f;
  const float inv = 1.0f / temperature;
  return inv < FLT_MAX ? inv : FLT_MAX;
}

}  // namespace llm::sampling

#undef LLM_INVERSE_TEMPERATURE_HD

#endif  // LLM_WORKER_SAMPLING_INVERSE_TEMPERATURE_H_
