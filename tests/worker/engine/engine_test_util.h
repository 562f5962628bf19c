// Requests and token runs for the scheduler's tests.
#ifndef LLM_TESTS_WORKER_ENGINE_ENGINE_TEST_UTIL_H_
#define LLM_TESTS_WORKER_ENGINE_ENGINE_TEST_UTIL_H_

#include <memory>
#include <numeric>
#include <vector>

#include "worker/engine/request.h"

namespace llm::engine {

// A request of `prompt` that may generate `max_tokens`.
inline RequestPtr Req(uint64_t key, std::vector<int32_t> prompt, int32_t max_tokens) {
  auto r = std::make_shared<EngineRequest>();
  r->key = key;
  r->prompt_ids = std::move(prompt);
  r->max_tokens = max_tokens;
  return r;
}

// `n` ids counting up from `first`.
inline std::vector<int32_t> Tokens(int32_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace llm::engine

#endif  // LLM_TESTS_WORKER_ENGINE_ENGINE_TEST_UTIL_H_
