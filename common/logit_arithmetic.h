// The arithmetic both samplers (CPU and GPU) apply to a logit before the softmax: the repetition
// penalty and 1/T. Header-only and usable from CUDA device code, so the two cannot disagree.
//
// Validation lets through subnormal values (temperature in [0, 100], repetition_penalty in
// (0, 10]), whose inverses overflow a float. An inf logit, or an inf 1/T times the top logit's
// gap of 0, would make every probability and logprob of the row NaN. Both results are therefore
// held at FLT_MAX, which gives the limit the user asked for: only the top logits keep any mass.
#ifndef LLM_COMMON_LOGIT_ARITHMETIC_H_
#define LLM_COMMON_LOGIT_ARITHMETIC_H_

#include <cfloat>

#if defined(__CUDACC__)
#define LLM_LOGIT_ARITHMETIC_HD __host__ __device__ inline
#else
#define LLM_LOGIT_ARITHMETIC_HD inline
#endif

namespace llm::sampling {

// A seen token's logit under the repetition penalty (> 0): positive logits divided, negative
// ones multiplied; at most FLT_MAX (NaN stays NaN: it never wins the argmax).
LLM_LOGIT_ARITHMETIC_HD float RepetitionPenalised(float logit, float penalty) {
  if (logit <= 0.0f) return logit * penalty;
  const float l = logit / penalty;
  return l > FLT_MAX ? FLT_MAX : l;  // NaN stays NaN
}

// 1/T, the scale of the logits before the softmax: 1 for greedy (T = 0; its logprobs are of the
// plain logits); at most FLT_MAX.
LLM_LOGIT_ARITHMETIC_HD float InverseTemperature(float temperature) {
  if (temperature == 0.0f) return 1.0f;
  const float inv = 1.0f / temperature;
  return inv > FLT_MAX ? FLT_MAX : inv;
}

}  // namespace llm::sampling

#undef LLM_LOGIT_ARITHMETIC_HD

#endif  // LLM_COMMON_LOGIT_ARITHMETIC_H_
