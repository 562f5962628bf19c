// Shared by the SlotMirror tests (step_layout_test.cc, step_layout_speculative_test.cc): a
// small slot table's limits, a request, and a plan checked and applied.
#ifndef LLM_TESTS_WORKER_RUNNER_CUDA_STEP_LAYOUT_TEST_UTIL_H_
#define LLM_TESTS_WORKER_RUNNER_CUDA_STEP_LAYOUT_TEST_UTIL_H_

#include <memory>

#include "gtest/gtest.h"
#include "worker/runner/cuda/step_layout.h"

namespace llm::runner::cuda {

inline StepLimits Limits() {
  StepLimits l;
  l.sizes = {.max_slots = 8, .kv_blocks = 64, .block_tokens = 16};
  l.max_blocks_per_seq = 8;
  l.max_context = 128;
  l.vocab_size = 1000;
  l.max_prefill_tokens = 100;
  return l;
}

inline engine::RequestPtr Request(uint64_t key, int32_t prompt_len, int32_t max_tokens = 10) {
  auto r = std::make_shared<engine::EngineRequest>();
  r->key = key;
  for (int32_t i = 0; i < prompt_len; ++i) r->prompt_ids.push_back(100 + i);
  r->max_tokens = max_tokens;
  r->stop_token_ids = {2};
  return r;
}

// Checks `plan` (a refused one fails the test) and applies it to `layout`.
inline void CheckAndApply(SlotMirror& mirror, const engine::StepPlan& plan, StepLayout& layout) {
  const absl::Status st = mirror.Check(plan);
  EXPECT_TRUE(st.ok()) << st;
  mirror.Apply(plan, layout);
}

}  // namespace llm::runner::cuda

#endif  // LLM_TESTS_WORKER_RUNNER_CUDA_STEP_LAYOUT_TEST_UTIL_H_
