// Deterministic random weights for synthetic models. Each element is a pure function of
// (seed, tensor name, index), so the files make-model writes and the weights a GPU builds for
// random:<shape> from the same seed are the same numbers. Usable from CUDA device code.
#ifndef LLM_COMMON_RANDOM_WEIGHTS_H_
#define LLM_COMMON_RANDOM_WEIGHTS_H_

#include <cmath>
#include <cstdint>
#include <string_view>

#include "common/philox.h"

namespace llm::model {

// The random stream of one tensor: the seed mixed with an FNV-1a hash of its name.
inline uint64_t TensorStream(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return Mix64(seed ^ h);
}

// Uniform in [-bound, bound): the index-th element of the stream.
LLM_HOST_DEVICE inline float RandomUniform(uint64_t stream, uint64_t index, float bound) {
  const uint64_t bits = Mix64(stream ^ Mix64(index)) >> 40;  // 24 bits
  const float u = static_cast<float>(bits) * (1.0f / 16777216.0f);
  return (2.0f * u - 1.0f) * bound;
}

// Element `index` of a synthetic tensor (see SyntheticFillFor in llama_tensors.h).
LLM_HOST_DEVICE inline float SyntheticValue(uint64_t stream, uint64_t index, float bound,
                                            float constant) {
  return bound > 0.0f ? RandomUniform(stream, index, bound) : constant;
}

// Bound giving a standard deviation of 1/sqrt(fan_in): sqrt(3 / fan_in).
inline float LinearBound(int64_t fan_in) {
  return std::sqrt(3.0f / static_cast<float>(fan_in > 0 ? fan_in : 1));
}

}  // namespace llm::model

#endif  // LLM_COMMON_RANDOM_WEIGHTS_H_
