// The engine thread: the only thread that touches the scheduler and the runner. Other threads
// hand it new requests and aborts through an intake queue; it hands sampled tokens to an
// EngineEvents consumer (the output stage), which must never block it.
//
// One iteration: drain the intake, Schedule() step N+1, Launch it, then Collect step N and
// Update() the scheduler with it. With an asynchronous runner the backend therefore always has
// the next step queued while the host does the bookkeeping of the previous one.
#ifndef LLM_WORKER_LOOP_ENGINE_LOOP_H_
#define LLM_WORKER_LOOP_ENGINE_LOOP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/scheduler.h"
#include "worker/runner/model_runner.h"

namespace llm::loop {

using Clock = std::chrono::steady_clock;

// Consumer of the engine's output, called on the engine thread. Implementations queue and
// return; they must not block or call back into the EngineLoop synchronously.
class EngineEvents {
 public:
  virtual ~EngineEvents() = default;
  virtual void OnAdmitted(const std::vector<uint64_t>& keys, Clock::time_point when) = 0;
  virtual void OnTokens(std::vector<engine::TokenEvent>& events, Clock::time_point when) = 0;
  // The backend failed; every running and queued request has been ended.
  virtual void OnFailed(const std::vector<uint64_t>& keys, const absl::Status& status) = 0;
};

// Per-step timings for metrics, called on the engine thread.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // `step_seconds`: backend time of the step; `gap_seconds`: backend idle time between the end
  // of the previous step and the start of this one (negative when unknown); `num_tokens`: the
  // tokens it sampled, `num_decodes` of them for sequences that go on; `prompt_tokens`: the
  // prompt tokens it computed.
  virtual void OnStep(double step_seconds, double gap_seconds, int32_t num_tokens,
                      int32_t num_decodes, int32_t prompt_tokens) = 0;
  // One decode that verified `draft_tokens` proposals, `accepted_tokens` of which stood
  // (speculative decoding); called after OnStep for each such decode of the step.
  virtual void OnVerified(int32_t draft_tokens, int32_t accepted_tokens) {
    (void)draft_tokens;
    (void)accepted_tokens;
  }
};

struct EngineStats {
  engine::SchedulerStats scheduler;
  double step_time_ewma_ms = 0.0;
  // What a prompt token costs: an exponentially weighted mean of step time per token over steps
  // with at least 32 prompt tokens; 0 before the first such step. (A prefix
  // cache hit saves about this much per cached token; a router weighs that against load.)
  double prefill_ms_per_token = 0.0;
  double busy_ratio = 0.0;  // backend time / wall time over the last ~second
  uint64_t steps = 0;
  uint64_t aborted = 0;  // requests ended by Abort
  // Speculative decoding since the start: decodes that verified proposals, the proposals, and
  // the accepted ones.
  uint64_t spec_drafts = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  uint64_t version = 0;  // increases whenever anything above changes
};

class EngineLoop {
 public:
  EngineLoop(const engine::SchedulerConfig& config, std::unique_ptr<runner::ModelRunner> runner,
             EngineEvents* events, StepObserver* observer);
  ~EngineLoop();  // stops the thread

  void Start();
  void Stop();

  // Thread-safe. The request must fit the KV pool (RequestLimits::kv_capacity_tokens); its key
  // must be new.
  void Submit(engine::RequestPtr request);
  // Thread-safe; ending an unknown or finished request is a no-op.
  void Abort(uint64_t key);

  const runner::RunnerInfo& runner_info() const { return runner_->info(); }
  // Thread-safe snapshot.
  EngineStats stats() const;
  // Bumps stats().version and wakes WaitForChange callers (a change outside the engine, such
  // as the worker starting to drain). Thread-safe.
  void Touch();
  // Waits until stats().version differs from `version` or `deadline` passes; returns the
  // current version.
  uint64_t WaitForChange(uint64_t version, Clock::time_point deadline) const;
  // How long the engine thread has been in its current iteration (one schedule, launch and at
  // most one collect: about a step), or zero while it waits for work. A hung step makes this
  // grow without bound: the worker's liveness watchdog reads it. Thread-safe.
  Clock::duration IterationAge(Clock::time_point now) const;

 private:
  void Run();
  void DrainIntake();
  void CollectOne();
  // Ends the busy-ratio window when it is a kBusyWindow old (the ratio is its busy time over
  // its length, idle time included).
  void RollBusyWindow(Clock::time_point now);
  void PublishStats();
  void FailAll(const absl::Status& status);

  engine::Scheduler scheduler_;  // engine thread only
  std::unique_ptr<runner::ModelRunner> runner_;
  EngineEvents* events_;
  StepObserver* observer_;

  // Intake.
  std::mutex intake_mu_;
  std::condition_variable intake_cv_;
  std::vector<engine::RequestPtr> new_requests_;
  std::vector<uint64_t> aborts_;
  bool stop_ = false;

  // Engine-thread state.
  std::vector<engine::TokenEvent> events_scratch_;
  std::vector<uint64_t> admitted_scratch_;
  double ewma_ms_ = 0.0;
  double prefill_ms_per_token_ = 0.0;
  // Per launched, not yet collected plan (in launch order): its tokens and prompt tokens.
  struct Launched {
    int32_t tokens;
    int32_t prompt_tokens;
  };
  std::deque<Launched> launched_;
  double window_busy_s_ = 0.0;
  Clock::time_point window_start_;
  double busy_ratio_ = 0.0;  // of the last whole window, idle windows included
  uint64_t steps_ = 0;
  uint64_t aborted_ = 0;
  uint64_t spec_drafts_ = 0;
  uint64_t spec_draft_tokens_ = 0;
  uint64_t spec_accepted_tokens_ = 0;
  // Start of the current iteration (Clock ticks since epoch), 0 while waiting for work.
  std::atomic<int64_t> iteration_start_{0};

  mutable std::mutex stats_mu_;
  mutable std::condition_variable stats_cv_;
  EngineStats stats_;

  std::thread thread_;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_ENGINE_LOOP_H_
