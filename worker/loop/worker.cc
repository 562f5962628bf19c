#include "worker/loop/worker.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/retry_after.h"
#include "worker/loop/reasoning_sink.h"
#include "worker/loop/tool_calls.h"
#include "worker/tools/tool_grammar.h"

namespace llm::loop {

// Passes updates through and tells the worker when the stream has ended.
class Worker::TrackedSink : public StreamSink {
 public:
  TrackedSink(Worker* worker, uint64_t key, std::shared_ptr<StreamSink> inner)
      : worker_(worker), key_(key), inner_(std::move(inner)) {}
  void OnUpdate(StreamUpdate update) override {
    const bool last = update.finished;
    inner_->OnUpdate(std::move(update));
    if (last) worker_->StreamEnded(key_);
  }
  void OnError(const absl::Status& status) override {
    inner_->OnError(status);
    worker_->StreamEnded(key_);
  }

 private:
  Worker* worker_;
  uint64_t key_;
  std::shared_ptr<StreamSink> inner_;
};

Worker::Worker(WorkerOptions options, std::unique_ptr<frontend::Tokenizer> tokenizer,
               RequestObserver* request_observer)
    : options_(std::move(options)),
      tokenizer_(std::move(tokenizer)),
      constraints_(std::make_unique<ConstraintCompiler>(*tokenizer_)),
      request_observer_(request_observer) {}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(
    WorkerOptions options, std::unique_ptr<runner::ModelRunner> runner,
    std::unique_ptr<frontend::Tokenizer> tokenizer, std::vector<int32_t> eos_token_ids,
    RequestObserver* request_observer, StepObserver* step_observer) {
  const runner::RunnerInfo& info = runner->info();
  options.scheduler.sizes = info.sizes;
  if (options.scheduler.max_prefill_tokens <= 0) {
    // The backend's default (engine.max_prefill_tokens: 0).
    options.scheduler.max_prefill_tokens = info.default_prefill_tokens > 0
                                               ? info.default_prefill_tokens
                                               : engine::SchedulerConfig{}.max_prefill_tokens;
  }
  if (options.scheduler.max_prefill_tokens_alone <= 0) {
    options.scheduler.max_prefill_tokens_alone = info.default_prefill_tokens_alone;
  }
  if (info.max_prefill_tokens > 0) {
    // The runner's buffers bound a step's prompt tokens.
    options.scheduler.max_prefill_tokens =
        std::min(options.scheduler.max_prefill_tokens, info.max_prefill_tokens);
    options.scheduler.max_prefill_tokens_alone =
        std::min(options.scheduler.max_prefill_tokens_alone, info.max_prefill_tokens);
  }
  // KV on demand needs a runner that grows block tables and resumes preempted requests.
  options.scheduler.kv_on_demand = options.scheduler.kv_on_demand && info.kv_on_demand;
  options.scheduler.penalties_from_prefill = info.penalties_from_prefill;
  options.scheduler.speculate_constrained = info.speculates_constrained;
  options.scheduler.draft_lapses = info.draft_lapses;
  if (!options.scheduler.kv_on_demand && options.limits.default_max_tokens == 0) {
    // Reserving, the rest of the context would reserve it all for every request that leaves
    // max_tokens out: the former default instead.
    options.limits.default_max_tokens = kReservedDefaultMaxTokens;
  }
  if (absl::Status st = options.scheduler.Validate(); !st.ok()) return st;
  RequestLimits& l = options.limits;
  l.vocab_size = info.vocab_size;
  l.max_context = info.max_context;
  l.kv_capacity_tokens = static_cast<int32_t>(info.sizes.kv_capacity_tokens());
  l.eos_token_ids = std::move(eos_token_ids);
  if (info.max_stop_ids > 0) {
    // EOS ids are added to each request's stop ids.
    const int32_t room = info.max_stop_ids - static_cast<int32_t>(l.eos_token_ids.size());
    if (room < 0) {
      return absl::InvalidArgumentError(absl::StrCat("the model has ", l.eos_token_ids.size(),
                                                     " EOS ids; the runner takes at most ",
                                                     info.max_stop_ids));
    }
    l.max_stop_token_ids = std::min(l.max_stop_token_ids, room);
  }
  if (tokenizer->vocab_size() > info.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tokenizer's vocabulary (", tokenizer->vocab_size(),
                     " tokens) is larger than the model's (", info.vocab_size, ")"));
  }
  std::unique_ptr<Worker> w(new Worker(std::move(options), std::move(tokenizer), request_observer));
  Worker* self = w.get();
  w->output_ = std::make_unique<OutputStage>(
      *w->tokenizer_, w->options_.output_threads,
      [self](uint64_t key) { self->engine_->Abort(key); }, request_observer);
  w->engine_ = std::make_unique<EngineLoop>(w->options_.scheduler, std::move(runner),
                                            w->output_.get(), step_observer);
  w->tokenizer_pool_ = std::make_unique<TaskPool>(w->options_.tokenizer_threads, "tokenizer");
  w->engine_->Start();
  return w;
}

Worker::~Worker() {
  draining_ = true;
  engine_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (uint64_t key : live_) {
      output_->Fail(key, absl::UnavailableError("the worker is shutting down"));
    }
  }
  tokenizer_pool_.reset();  // queued tokenizations see stopping_ and fail their requests
  output_.reset();          // delivers what is queued, including the failures above
}

void Worker::SetChatRenderer(ChatRenderer render, std::string why_none) {
  chat_renderer_ = std::move(render);
  if (!why_none.empty()) no_chat_reason_ = std::move(why_none);
}

void Worker::Post(std::function<void()> task) { tokenizer_pool_->Post(std::move(task)); }

absl::Status Worker::CheckModel(std::string_view model) const {
  if (model.empty() || model == options_.model_name ||
      std::find(options_.served_names.begin(), options_.served_names.end(), model) !=
          options_.served_names.end()) {
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("model: '", std::string(model), "' is not served here (",
                                          options_.model_name, ")"));
}

absl::Status Worker::Prepare(GenerateSpec& spec, std::shared_ptr<StreamSink>& sink) {
  if (absl::Status st = ValidateSpec(spec, options_.limits); !st.ok()) return st;
  if (absl::Status st = CheckModel(spec.model); !st.ok()) return st;
  const runner::RunnerInfo& info = engine_->runner_info();
  if (spec.chat && !chat_renderer_) {
    return absl::InvalidArgumentError(absl::StrCat("chat: ", no_chat_reason_));
  }
  if (!spec.sampling.logit_bias.empty() && !info.logit_bias) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.logit_bias: the ", info.device,
                     " backend does not apply a logit bias yet (the cpu backend does)"));
  }
  if (spec.prompt_logprobs >= 0 && !info.prompt_logprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_logprobs: the ", info.device,
                     " backend does not compute prompt logprobs yet (the cpu backend does)"));
  }
  if (spec.chat) {
    // Before the constraint's compile: tool_choice may set the constraint.
    if (absl::Status st = PrepareToolCalls(tool_format_, tokenizer_.get(), spec, sink); !st.ok())
      return st;
    if (reasoning_format_ != tools::ReasoningFormat::kNone) {  // before the calls are read
      spec.reasoning_start = std::make_shared<ReasoningStart>();
      sink = std::make_shared<ReasoningSink>(spec.reasoning_start, std::move(sink));
    }
  }
  if (spec.constraint.enabled()) {
    if (!info.constraints) {
      return absl::UnimplementedError(absl::StrCat(
          "constraint: the ", info.device,
          " backend does not apply constraints yet (structured output runs on the cpu backend)"));
    }
    // Before the request takes a slot or a queue place: a bad pattern fails alone, at once.
    auto compiled = constraints_->Compile(spec.constraint);
    if (!compiled.ok()) return compiled.status();
    spec.compiled = *std::move(compiled);
  }
  if (!spec.has_text) {
    // A token-id prompt can be checked completely now.
    auto built = BuildEngineRequest(spec, spec.token_ids, options_.limits);
    if (!built.ok()) return built.status();
  }
  return absl::OkStatus();
}

absl::Status Worker::Reserve(uint64_t key, bool tokenizing) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t capacity =
      static_cast<int64_t>(options_.scheduler.sizes.max_slots) + options_.max_queued_requests;
  if (in_flight_ >= capacity) {
    absl::Status full = absl::ResourceExhaustedError(
        absl::StrCat("the worker is full: ", in_flight_, " requests in flight (",
                     options_.scheduler.sizes.max_slots, " slots + ", options_.max_queued_requests,
                     " queued); retry later"));
    // Retry once room is likely: the requests beyond capacity, each about one mean interval
    // between stream ends while every slot was taken (a second until one has been seen).
    const double interval_s = end_interval_.seconds(1.0);
    SetRetryAfterMs(
        full, static_cast<int64_t>(std::ceil(1000.0 * interval_s * (in_flight_ - capacity + 1))));
    return full;
  }
  if (++in_flight_ >= options_.scheduler.sizes.max_slots) {
    end_interval_.OnSaturated(std::chrono::steady_clock::now());
  }
  if (tokenizing) tokenizing_.insert(key);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Worker::Submit(GenerateSpec spec, std::shared_ptr<StreamSink> sink) {
  if (draining_) return absl::UnavailableError("the worker is draining; try another worker");
  if (absl::Status st = Prepare(spec, sink); !st.ok()) return st;
  const uint64_t key = next_key_++;
  if (absl::Status st = Reserve(key, spec.has_text); !st.ok()) return st;
  engine_->Touch();  // a new request in flight (tokenizing counts as queued in load reports)
  if (spec.request_id.empty()) spec.request_id = absl::StrCat("req-", key);
  auto tracked = std::make_shared<TrackedSink>(this, key, std::move(sink));
  if (!spec.has_text) {
    std::vector<int32_t> ids = spec.token_ids;
    Admit(key, spec, std::move(ids), std::move(tracked), /*from_tokenizer=*/false);
    return key;
  }
  tokenizer_pool_->Post([this, key, spec = std::move(spec), tracked = std::move(tracked)] {
    EncodeAndAdmit(key, spec, tracked);
  });
  return key;
}

void Worker::EncodeAndAdmit(uint64_t key, const GenerateSpec& spec,
                            std::shared_ptr<StreamSink> sink) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!tokenizing_.count(key)) return;  // cancelled while queued
  }
  absl::StatusOr<std::vector<int32_t>> ids;
  const char* field = "text";
  if (spec.chat) {
    // The template writes the special tokens: none are added again.
    field = "chat";
    auto text = chat_renderer_(*spec.chat);
    if (text.ok() && spec.reasoning_start) {
      // A constrained output (a schema, a forced call) is the grammar's from its first token:
      // reasoning only if the grammar writes <think> itself, whatever the prompt opened.
      spec.reasoning_start->in_reasoning =
          !spec.constraint.enabled() && tools::PromptOpensReasoning(*text);
    }
    ids = text.ok() ? tokenizer_->Encode(*text, /*add_special_tokens=*/false)
                    : absl::StatusOr<std::vector<int32_t>>(text.status());
  } else {
    ids = tokenizer_->Encode(spec.text, spec.add_special_tokens);
  }
  if (!ids.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (tokenizing_.erase(key) == 0) return;
    }
    Refuse(*sink, absl::InvalidArgumentError(absl::StrCat(field, ": ", ids.status().message())));
    return;
  }
  Admit(key, spec, *std::move(ids), std::move(sink), /*from_tokenizer=*/true);
}

void Worker::Admit(uint64_t key, const GenerateSpec& spec, std::vector<int32_t> prompt_ids,
                   std::shared_ptr<StreamSink> sink, bool from_tokenizer) {
  auto request = BuildEngineRequest(spec, prompt_ids, options_.limits);
  std::unique_lock<std::mutex> lock(mu_);
  if (from_tokenizer && tokenizing_.erase(key) == 0) return;  // cancelled meanwhile
  if (stopping_) {
    lock.unlock();
    Refuse(*sink, absl::UnavailableError("the worker is shutting down"));
    return;
  }
  if (!request.ok()) {
    lock.unlock();
    Refuse(*sink, request.status());
    return;
  }
  request->key = key;
  OutputContext ctx;
  ctx.sink = std::move(sink);
  ctx.prompt_ids = std::move(prompt_ids);
  ctx.stop = spec.stop;
  ctx.include_stop_str = spec.include_stop_str;
  ctx.skip_special_tokens = spec.skip_special_tokens;
  ctx.include_prompt_ids = spec.include_prompt_ids;
  ctx.continuous_usage = spec.continuous_usage;
  ctx.want_logprobs = spec.logprobs > 0;
  ctx.num_top_logprobs = static_cast<int32_t>(spec.logprobs);
  ctx.prompt_logprobs = spec.prompt_logprobs >= 0;
  ctx.arrival = spec.arrival;
  // Register and submit under the lock, so a concurrent Cancel sees either the tokenizing entry
  // or both the output stage and the engine holding the request.
  live_.insert(key);
  output_->Register(key, std::move(ctx));
  engine_->Submit(std::make_shared<engine::EngineRequest>(*std::move(request)));
}

void Worker::Refuse(StreamSink& sink, const absl::Status& status) {
  if (request_observer_ != nullptr) request_observer_->OnRequestRejected(status.code());
  sink.OnError(status);
}

void Worker::Cancel(uint64_t key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tokenizing_.erase(key) == 0) {
      if (!live_.count(key)) return;
      output_->Cancel(key, [this, key](bool was_live) {
        if (was_live) StreamEnded(key);
      });
      engine_->Abort(key);
      return;
    }
    if (--in_flight_ < options_.scheduler.sizes.max_slots) end_interval_.OnUnsaturated();
    idle_cv_.notify_all();
    if (request_observer_ != nullptr) request_observer_->OnRequestCancelled();
  }
  engine_->Touch();  // the in-flight count that load reports carry changed
}

void Worker::StreamEnded(uint64_t key) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    end_interval_.OnEnd(now);
    live_.erase(key);
    if (--in_flight_ < options_.scheduler.sizes.max_slots) end_interval_.OnUnsaturated();
    idle_cv_.notify_all();
  }
  engine_->Touch();  // the in-flight count that load reports carry changed
}

absl::StatusOr<std::vector<int32_t>> Worker::Tokenize(std::string_view text,
                                                      bool add_special) const {
  if (text.size() > options_.limits.max_prompt_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("text: ", text.size(),
                                                   " bytes is more than the limit of ",
                                                   options_.limits.max_prompt_bytes));
  }
  auto ids = tokenizer_->Encode(text, add_special);
  if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("text: ", ids.status().message()));
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Worker::TokenizeChat(const ChatPrompt& chat,
                                                          bool add_special) const {
  if (!chat_renderer_) return absl::InvalidArgumentError(absl::StrCat("chat: ", no_chat_reason_));
  // The checks a chat request's prompt gets, no more: the count is the one it would have.
  if (absl::Status st = ValidateChat(chat.messages, options_.limits); !st.ok()) return st;
  if (auto tools = tools::ParseTools(chat.tools); !tools.ok()) return tools.status();
  auto text = chat_renderer_(chat);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat: ", text.status().message()));
  }
  auto ids = tokenizer_->Encode(*text, add_special);
  if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("chat: ", ids.status().message()));
  return ids;
}

absl::StatusOr<std::string> Worker::Detokenize(std::span<const int32_t> ids,
                                               bool skip_special) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer_->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token_ids[", i, "]: ", ids[i],
                                                     " is outside the vocabulary [0, ",
                                                     tokenizer_->vocab_size(), ")"));
    }
  }
  return tokenizer_->Decode(ids, skip_special);
}

void Worker::BeginDrain() {
  draining_ = true;
  engine_->Touch();
}

bool Worker::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [&] { return in_flight_ == 0; });
}

WorkerLoad Worker::Load() const {
  WorkerLoad load;
  load.engine = engine_->stats();
  load.draining = draining_;
  std::lock_guard<std::mutex> lock(mu_);
  load.in_flight = in_flight_;
  return load;
}

uint64_t Worker::WaitForLoadChange(uint64_t version, Clock::time_point deadline) const {
  return engine_->WaitForChange(version, deadline);
}

}  // namespace llm::loop
