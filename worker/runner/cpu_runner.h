// The CPU backend of the engine: runs step plans on a CpuModel as batched, variable-length
// forward passes over the paged KV cache, then samples and checks stop conditions per slot.
#ifndef LLM_WORKER_RUNNER_CPU_RUNNER_H_
#define LLM_WORKER_RUNNER_CPU_RUNNER_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/engine/engine_sizes.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/model_runner.h"
#include "worker/sampling/sampler.h"

namespace llm::runner {

// Prompt tokens per step when engine.max_prefill_tokens is 0 (RunnerInfo::default_prefill_tokens):
// `llm-bench prefill --backend cpu` (docs/engine.md).
inline constexpr int32_t kCpuDefaultPrefillTokens = 128;

struct CpuRunnerOptions {
  engine::EngineSizes sizes{
      .max_slots = 64, .kv_blocks = 1024, .block_tokens = 16};  // kv_blocks > 0
  // Tokens with ids >= this are never sampled (a model vocabulary padded beyond the
  // tokenizer's); 0 = the model's vocabulary size.
  int32_t valid_vocab_size = 0;
  int32_t max_context = 0;  // positions per sequence; 0: the model's
  // Run plans on a runner thread so Launch returns at once (the engine overlaps its host work
  // with the forward pass). False: Launch runs the step before returning.
  bool async = true;
  // Added to every step, to model a slow worker in tests and benchmarks.
  double extra_step_seconds = 0.0;
};

class CpuRunner : public ModelRunner {
 public:
  CpuRunner(std::unique_ptr<CpuModel> model, const CpuRunnerOptions& options);
  ~CpuRunner() override;

  const RunnerInfo& info() const override { return info_; }
  absl::Status Launch(engine::StepPlan plan) override;
  absl::StatusOr<engine::StepResult> Collect() override;
  int in_flight() const override { return in_flight_; }

 private:
  struct SlotState {
    engine::RequestPtr request;  // null when free
    std::vector<int32_t> blocks;
    int32_t generated = 0;
    int32_t last_token = -1;
    bool finished = false;
    sampling::PenaltyState penalties;
  };

  struct Pending {
    engine::StepPlan plan;
    bool after_idle;  // launched with nothing else in flight
  };

  // Runs one plan into `result`.
  absl::Status Execute(const Pending& pending, engine::StepResult& result);
  void ThreadLoop();

  std::unique_ptr<CpuModel> model_;
  CpuRunnerOptions options_;
  RunnerInfo info_;
  CpuKvCache kv_;
  std::vector<SlotState> slots_;
  // Scratch reused across steps.
  std::vector<int32_t> tokens_;
  std::vector<SeqChunk> chunks_;
  std::vector<int32_t> sampling_slots_;
  std::vector<float> logits_;
  std::vector<sampling::SampledToken> samples_;
  int in_flight_ = 0;  // engine thread only
  // When the last step ended (the thread running steps only).
  std::chrono::steady_clock::time_point last_end_{};
  bool has_last_end_ = false;

  // Async mode: plans to run and results to collect, in order.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  struct Done {
    absl::Status status;
    engine::StepResult result;
  };
  std::deque<Done> done_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_RUNNER_H_
