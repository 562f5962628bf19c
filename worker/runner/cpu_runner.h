// The CPU backend of the engine: runs step plans on a CpuModel as batched, variable-length
// forward passes over the paged KV cache, then samples and checks stop conditions per slot.
//
// Speculative decoding (CpuRunnerOptions::speculative): a decode chunk with max_draft > 0 gets
// its proposals here, on the runner's thread, from the slot's own history (n-gram lookup, or
// the draft model of CpuDraft; the benchmark-only oracle reads the request's oracle_ids), so
// proposing adds no round trip to the engine thread. The
// slot's last token and its proposals go through the forward pass as one chunk with a logits
// row per token; the rows are verified in order (Sampler::Verify, then Sample after the last
// accepted proposal), each with the penalties and the counter of the tokens before it, and the
// run stops at the first rejection, stop token or max_tokens. The CPU forward gives a row the
// same bits whatever else is in the batch, so a greedy request's ids are the same with
// speculation on or off.
#ifndef LLM_WORKER_RUNNER_CPU_RUNNER_H_
#define LLM_WORKER_RUNNER_CPU_RUNNER_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/constraint/constraint.h"
#include "worker/engine/engine_sizes.h"
#include "worker/engine/speculation.h"
#include "worker/runner/cpu_draft.h"
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
  // The proposer of decode chunks with proposals (method kDraft needs the draft model).
  engine::SpeculativeConfig speculative;
};

class CpuRunner : public ModelRunner {
 public:
  // `draft`: the draft model, required when options.speculative.method is kDraft (its
  // vocabulary the target's).
  CpuRunner(std::unique_ptr<CpuModel> model, const CpuRunnerOptions& options,
            std::unique_ptr<CpuModel> draft = nullptr);
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
    // With speculation: the prompt and the output so far (the proposers read it), and the
    // draft model's cache length (-1 until the first prompt chunk says what was cached).
    std::vector<int32_t> history;
    int32_t draft_written = -1;
    // Structured output: where the output stands in the request's constraint.
    std::unique_ptr<constraint::Matcher> matcher;
    // After a preemption: the prompt and the tokens generated before it (the prefill's
    // tokens); empty otherwise (the prompt).
    std::vector<int32_t> prefix;
    // EngineRequest::prompt_logprobs: the entries of the prompt chunks so far, given out with
    // the prefix's sampled output.
    std::vector<sampling::SampledToken> prompt_logprobs;
  };

  // A prompt chunk whose every row has logits (EngineRequest::prompt_logprobs): rows
  // [row, row + num_tokens) for positions [start, start + num_tokens).
  struct PromptRows {
    int32_t slot;
    int32_t start;
    int32_t num_tokens;
    int32_t row;
  };

  // A slot that samples in this step: its logits rows [row, row + 1 + drafts.size()).
  struct SamplingSlot {
    int32_t slot;
    int32_t max_draft = 0;  // proposals the plan allows (decode chunks only)
    int32_t row = 0;
    std::vector<int32_t> drafts;
    std::vector<float> draft_probs;  // [drafts][vocab] for a draft model's sampled proposals
    std::vector<engine::SlotOutput> outputs;
    int32_t accepted = 0;
  };

  struct Pending {
    engine::StepPlan plan;
    bool after_idle;  // launched with nothing else in flight
  };

  // Runs one plan into `result`.
  absl::Status Execute(const Pending& pending, engine::StepResult& result);
  // Releases, admissions and block grants.
  absl::Status ApplyAdmissions(const engine::StepPlan& plan);
  // Installs the tokens a readmitted request generated before its preemption.
  void Resume(SlotState& slot, const std::vector<int32_t>& resumed);
  // The step's batch (tokens_, chunks_) and its sampling slots (sampling_), proposals included.
  absl::Status BuildBatch(const engine::StepPlan& plan);
  // The prompt chunks of the step into the batch.
  // The plan's prompt chunks; `rows` gets the logits rows they take.
  absl::Status AddPrefills(const engine::StepPlan& plan, int32_t& rows);
  // The prompt logprobs of this step's prompt_rows_, into their slots.
  void AddPromptLogprobs();
  // The proposals of every sampling slot that allows them, into its drafts.
  absl::Status Propose();
  // Verifies and samples `s` from its rows of logits_, into its outputs and its slot's state.
  void SampleSlot(SamplingSlot& s, sampling::Sampler& sampler);
  // Appends `token` to the slot's output; the finish reason it causes.
  sampling::FinishReason Append(SlotState& slot, int32_t token);
  void ThreadLoop();

  std::unique_ptr<CpuModel> model_;
  CpuRunnerOptions options_;
  RunnerInfo info_;
  CpuKvCache kv_;
  std::vector<SlotState> slots_;
  // Scratch reused across steps.
  std::vector<int32_t> tokens_;
  std::vector<SeqChunk> chunks_;
  std::vector<SamplingSlot> sampling_;
  std::vector<PromptRows> prompt_rows_;
  std::vector<float> logits_;
  std::unique_ptr<CpuDraft> draft_;
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
