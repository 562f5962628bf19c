// Helpers for tests that drive a Worker: the story prompts they share, and waits on the
// worker's load (observable state, never a bare sleep).
#ifndef LLM_TESTS_WORKER_LOOP_WORKER_TEST_UTIL_H_
#define LLM_TESTS_WORKER_LOOP_WORKER_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"

namespace llm::loop {

// Eight prompts of different lengths in the tinystories style.
inline std::vector<std::string> StoryPrompts() {
  return {"Once upon a time",
          "The little dog",
          "Lily and Tom went to the park. They",
          "A",
          "One day, a big bear came to the village. The bear was hungry and sad, and it looked "
          "for food in every house. The children were scared, but Sue was brave. She",
          "Tim had a red ball.",
          "The sun was hot",
          "Mom said, \"Let's go home.\""};
}

// A worker over random:tiny on one CPU thread, whose synthetic vocabulary has every byte (so
// any JSON, call format or grammar can be spelled). `pool` runs the runner: keep it alive
// (declared before the worker) as long as the worker.
struct ByteLevelWorker {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Worker> worker;
};

// The CPU backend of random:tiny on one thread.
inline backend::BackendOptions RandomTinyOnCpu(int32_t slots) {
  backend::BackendOptions bo;
  bo.model = "random:tiny";
  bo.backend = "cpu";
  bo.cpu_threads = 1;
  bo.sizes.max_slots = slots;
  return bo;
}

inline absl::StatusOr<ByteLevelWorker> MakeByteLevelWorker(int32_t slots) {
  auto b = backend::CreateBackend(RandomTinyOnCpu(slots));
  if (!b.ok()) return b.status();
  WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 0;
  auto w =
      Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer), b->config.eos_token_ids);
  if (!w.ok()) return w.status();
  return ByteLevelWorker{std::move(b->pool), *std::move(w)};
}

// Waits until `pred(w.Load())` holds; false after `timeout`.
inline bool WaitForLoad(const Worker& w, const std::function<bool(const WorkerLoad&)>& pred,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = Clock::now() + timeout;
  uint64_t version = w.Load().engine.version;
  while (!pred(w.Load())) {
    if (Clock::now() >= deadline) return false;
    version = w.WaitForLoadChange(version, deadline);
  }
  return true;
}

// Waits until the engine has taken a step after this call (requests submitted before it are
// being computed); false after 10 s.
inline bool WaitForNextStep(const Worker& w) {
  const uint64_t steps = w.Load().engine.steps;
  return WaitForLoad(w, [steps](const WorkerLoad& l) { return l.engine.steps > steps; });
}

}  // namespace llm::loop

#endif  // LLM_TESTS_WORKER_LOOP_WORKER_TEST_UTIL_H_
