// One sampled token as the samplers (CPU and GPU) produce it: the id, its log-probability and
// the most likely alternatives when the request asked for them. The engine's step results and
// token events carry it unchanged.
#ifndef LLM_WORKER_SAMPLING_SAMPLED_TOKEN_H_
#define LLM_WORKER_SAMPLING_SAMPLED_TOKEN_H_

#include <cstdint>
#include <vector>

namespace llm::sampling {

struct TokenLogprob {
  int32_t token_id = -1;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token_id = -1;
  float logprob = 0.0f;           // of token_id, when logprobs were asked for
  std::vector<TokenLogprob> top;  // the most likely tokens, most likely first
  // A prompt token's (RawLogprobs): 1 + how many ids are more likely, ties to the lower id;
  // 0: not computed.
  int32_t rank = 0;
};

}  // namespace llm::sampling

#endif  // LLM_WORKER_SAMPLING_SAMPLED_TOKEN_H_
