// The in-process worker: validation, the tokenizer pool, the engine thread and the output stage
// behind one thread-safe API. The gRPC server (worker/server) and llm-cli generate use it.
//
// A request's path: Submit() validates what it can at once and returns a key; text prompts are
// tokenized on the tokenizer pool; the engine request is built (prompt length, max_tokens, EOS)
// and registered with the output stage, then queued for the engine thread; its tokens come back
// through the output stage as StreamUpdates to the caller's sink.
#ifndef LLM_WORKER_LOOP_WORKER_H_
#define LLM_WORKER_LOOP_WORKER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/constraint_compiler.h"
#include "worker/loop/end_interval.h"
#include "worker/loop/engine_loop.h"
#include "worker/loop/output_stage.h"
#include "worker/loop/request_spec.h"
#include "worker/loop/stream.h"
#include "worker/loop/task_pool.h"
#include "worker/runner/model_runner.h"
#include "worker/tools/reasoning_parser.h"
#include "worker/tools/tool_format.h"

namespace llm::loop {

// limits.default_max_tokens 0 means the rest of the context when KV blocks are taken on
// demand; when they are reserved (engine.kv_on_demand off), this.
inline constexpr int32_t kReservedDefaultMaxTokens = 256;

struct WorkerOptions {
  // scheduler.sizes is replaced by the runner's (RunnerInfo::sizes).
  engine::SchedulerConfig scheduler;
  // vocab_size, max_context, kv_capacity_tokens and eos_token_ids are filled in by Create.
  RequestLimits limits;
  int tokenizer_threads = 2;
  int output_threads = 1;
  // Requests beyond the slots that may wait; more get RESOURCE_EXHAUSTED.
  int32_t max_queued_requests = 1024;
  std::string model_name;
  std::vector<std::string> served_names;  // aliases a request may name instead
};

struct WorkerLoad {
  EngineStats engine;
  int64_t in_flight = 0;  // accepted and not yet finished (tokenizing, queued or running)
  bool draining = false;
};

class Worker {
 public:
  // `eos_token_ids` are the model's (generation_config.json). The observers may be null.
  static absl::StatusOr<std::unique_ptr<Worker>> Create(
      WorkerOptions options, std::unique_ptr<runner::ModelRunner> runner,
      std::unique_ptr<frontend::Tokenizer> tokenizer, std::vector<int32_t> eos_token_ids,
      RequestObserver* request_observer = nullptr, StepObserver* step_observer = nullptr);
  // Ends the streams still open with UNAVAILABLE, then stops every thread.
  ~Worker();

  // Renders a chat prompt with the model's chat template (on the tokenizer pool's threads).
  using ChatRenderer = std::function<absl::StatusOr<std::string>(const ChatPrompt&)>;
  // Chat requests are rendered with `render`; without one (the default) they are refused with
  // INVALID_ARGUMENT saying `why_none`. Call before the first Submit.
  void SetChatRenderer(ChatRenderer render, std::string why_none = "");
  // The format chat requests' tool calls are written and read in (tool_calls.h); kNone (the
  // default) refuses tool_choice other than "none". Call before the first Submit.
  void SetToolFormat(tools::ToolFormat format) { tool_format_ = format; }
  // The format a reasoning model's thinking is read out of chat answers in (reasoning_sink.h);
  // kNone (the default) leaves it in the text. Call before the first Submit.
  void SetReasoningFormat(tools::ReasoningFormat format) { reasoning_format_ = format; }

  // Starts a request. INVALID_ARGUMENT naming the field for what can be checked before
  // tokenization; RESOURCE_EXHAUSTED when the queue is full; UNAVAILABLE while draining.
  // Errors found later (the prompt's token count) go to sink->OnError.
  absl::StatusOr<uint64_t> Submit(GenerateSpec spec, std::shared_ptr<StreamSink> sink);
  // The caller went away: the request's slot and blocks are freed at the next step and no
  // further call reaches its sink once the output stage has processed the cancel.
  void Cancel(uint64_t key);

  // Runs `task` on the worker's tokenizer pool: for what a sink must not do on the output stage
  // (submitting further requests: GenerateRequest.n).
  void Post(std::function<void()> task);
  // OK when `model` is empty, model.name or one of served_names; else NOT_FOUND naming it.
  absl::Status CheckModel(std::string_view model) const;
  absl::StatusOr<std::vector<int32_t>> Tokenize(std::string_view text, bool add_special) const;
  // The tokens of the prompt a chat request of `chat` would have (rendered by the chat
  // renderer; `add_special`: special tokens added again, as vLLM's /tokenize may).
  // INVALID_ARGUMENT naming chat when there is no renderer or the template fails.
  absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ChatPrompt& chat, bool add_special) const;
  absl::StatusOr<std::string> Detokenize(std::span<const int32_t> ids, bool skip_special) const;
  const frontend::Tokenizer& tokenizer() const { return *tokenizer_; }

  // Stops taking requests (Submit gives UNAVAILABLE); running ones carry on.
  void BeginDrain();
  bool draining() const { return draining_.load(); }
  // Waits until no request is in flight or `deadline` passes; true when idle.
  bool WaitIdle(Clock::time_point deadline);

  WorkerLoad Load() const;
  // Wakes WaitForLoadChange callers (shutdown).
  void NotifyLoadWatchers() { engine_->Touch(); }
  // Waits for a change of Load() (or `deadline`); returns the version to pass next time.
  uint64_t WaitForLoadChange(uint64_t version, Clock::time_point deadline) const;

  // The engine thread's time in its current iteration (EngineLoop::IterationAge).
  Clock::duration EngineIterationAge(Clock::time_point now) const {
    return engine_->IterationAge(now);
  }
  const runner::RunnerInfo& runner_info() const { return engine_->runner_info(); }
  const RequestLimits& limits() const { return options_.limits; }
  // As settled by Create: the prompt budgets resolved from the runner's defaults and limits.
  const engine::SchedulerConfig& scheduler_config() const { return options_.scheduler; }

 private:
  class TrackedSink;
  Worker(WorkerOptions options, std::unique_ptr<frontend::Tokenizer> tokenizer,
         RequestObserver* request_observer);
  // Submit's checks of `spec` that need no queue place: the fields, the model, the backend's
  // support; tools wrap `sink` in their parser and may set the constraint, which is compiled.
  absl::Status Prepare(GenerateSpec& spec, std::shared_ptr<StreamSink>& sink);
  // Takes a place in flight for `key` (and marks it tokenizing), or RESOURCE_EXHAUSTED with a
  // retry-after when the slots and the queue are full.
  absl::Status Reserve(uint64_t key, bool tokenizing);
  // On the tokenizer pool: encodes the prompt (rendering the chat first), then admits it; a
  // prompt that does not encode is refused naming "text" or "chat".
  void EncodeAndAdmit(uint64_t key, const GenerateSpec& spec, std::shared_ptr<StreamSink> sink);
  void Admit(uint64_t key, const GenerateSpec& spec, std::vector<int32_t> prompt_ids,
             std::shared_ptr<StreamSink> sink, bool from_tokenizer);
  void StreamEnded(uint64_t key);
  // Ends a request refused after Submit returned: counted (RequestObserver), then `sink` told.
  void Refuse(StreamSink& sink, const absl::Status& status);

  WorkerOptions options_;
  ChatRenderer chat_renderer_;
  std::string no_chat_reason_ = "the model has no chat template";
  tools::ToolFormat tool_format_ = tools::ToolFormat::kNone;
  tools::ReasoningFormat reasoning_format_ = tools::ReasoningFormat::kNone;
  std::unique_ptr<frontend::Tokenizer> tokenizer_;
  std::unique_ptr<ConstraintCompiler> constraints_;
  RequestObserver* request_observer_;
  std::unique_ptr<OutputStage> output_;
  std::unique_ptr<EngineLoop> engine_;
  std::unique_ptr<TaskPool> tokenizer_pool_;

  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_key_{1};

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::unordered_set<uint64_t> tokenizing_;  // text prompts on the tokenizer pool
  std::unordered_set<uint64_t> live_;        // registered with the output stage
  int64_t in_flight_ = 0;
  bool stopping_ = false;
  EndInterval end_interval_;  // for the retry hint of a refusal
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_WORKER_H_
