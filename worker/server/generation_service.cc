#include "worker/server/generation_service.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/retry_after.h"
#include "common/status_macros.h"
#include "worker/loop/request_spec.h"
#include "worker/server/convert.h"
#include "worker/server/wire_check.h"

namespace llm::server {
namespace {

grpc::Status NotReady() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is still loading");
}

// User-supplied string fields of GenerateRequest (with its Chat and ChatMessages) and
// TokenizeRequest.
const StringFields kChatMessageStrings = {
    {1, "role"}, {2, "content"}, {3, "name"}, {4, "tool_call_id"}, {5, "tool_calls_json"}};
const StringFields kToolChoiceStrings = {{2, "function_name"}};
const StringFields kChatStrings = {{1, {"messages[]", &kChatMessageStrings}},
                                   {3, "tools_json"},
                                   {4, "template_kwargs_json"},
                                   {5, {"tool_choice", &kToolChoiceStrings}}};
const StringFields kBatchPromptStrings = {{1, "text"}};
const StringFields kGenerateStrings = {{1, "request_id"},
                                       {2, "text"},
                                       {7, "stop[]"},
                                       {12, {"chat", &kChatStrings}},
                                       {18, {"more_prompts[]", &kBatchPromptStrings}}};
const StringFields kTokenizeStrings = {{1, "text"}, {3, "model"}, {4, {"chat", &kChatStrings}}};

class GenerateReactor;

// A refusal of one of more_prompts' choices: its prompt's field named by where the prompt is
// ("text: empty" of the third prompt -> "more_prompts[1].text: empty"); other fields, and the
// request's own prompt (`field` empty), as they are.
absl::Status InPrompt(const absl::Status& status, const std::string& field) {
  const std::string message(status.message());
  const bool prompt_field = message.starts_with("text") || message.starts_with("token_ids");
  if (field.empty() || status.code() != absl::StatusCode::kInvalidArgument || !prompt_field) {
    return status;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ".", message));
}

// The tokens of a TokenizeRequest's text or chat.
absl::StatusOr<std::vector<int32_t>> TokenizeIds(const loop::Worker& worker,
                                                 const llm::v1::TokenizeRequest& request) {
  const bool chat = request.has_chat();
  const bool add = request.has_add_special_tokens() ? request.add_special_tokens() : !chat;
  if (!chat) return worker.Tokenize(request.text(), add);
  if (!request.text().empty()) {
    return absl::InvalidArgumentError("text: give text or chat, not both");
  }
  auto prompt = ToChat(request.chat());
  if (!prompt.ok()) return prompt.status();
  return worker.TokenizeChat(*prompt, add);
}

// Where prompt p of a call is: "" (the request's own), "more_prompts[p - 1]".
std::string PromptField(size_t p) {
  return p == 0 ? std::string() : absl::StrCat("more_prompts[", p - 1, "]");
}

// Choices a request may ask for (GenerateRequest.n), and in all, over its prompts.
constexpr uint32_t kMaxChoices = 16;
constexpr size_t kMaxBatchChoices = 128;

// The worker's handle on one choice of a stream. It outlives the reactor: once the RPC is done,
// updates are dropped.
class ReactorSink : public loop::StreamSink {
 public:
  // `field`: where the choice's prompt is ("more_prompts[2]"), put before a refusal's field;
  // empty for the request's own prompt.
  ReactorSink(GenerateReactor* reactor, int index, std::string field = "")
      : reactor_(reactor), index_(index), field_(std::move(field)) {}
  void OnUpdate(loop::StreamUpdate update) override;
  void OnError(const absl::Status& status) override;
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
  }

 private:
  std::mutex mu_;  // guards reactor_; held while calling into it
  GenerateReactor* reactor_;
  const int index_;
  const std::string field_;
};

// The choices after the first of a request with n > 1 or more prompts: submitted from the
// worker's pool once the first has its first token (its prompt's blocks are in the prefix cache
// by then), and cancelled with the call. Shared with that task, which may outlive the reactor.
struct LaterChoices {
  std::mutex mu;
  bool cancelled = false;
  std::vector<loop::GenerateSpec> specs;            // choices 1..n-1
  std::vector<std::shared_ptr<ReactorSink>> sinks;  // in the same order
  std::vector<uint64_t> keys;                       // those submitted
  RequestCounters* counters = nullptr;              // may be null

  // Submits each (a failure ends the call through its sink, counted as a refusal); stops once
  // cancelled.
  void SubmitAll(loop::Worker* worker) {
    for (size_t i = 0; i < specs.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (cancelled) return;
      }
      auto key = worker->Submit(specs[i], sinks[i]);
      if (!key.ok()) {
        if (counters != nullptr) counters->OnRejected(ToGrpcStatus(key.status()).error_code());
        sinks[i]->OnError(key.status());
        return;
      }
      bool cancel = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        keys.push_back(*key);
        cancel = cancelled;  // cancelled while it was being submitted
      }
      if (cancel) worker->Cancel(*key);
    }
  }
  void CancelAll(loop::Worker* worker) {
    std::vector<uint64_t> submitted;
    {
      std::lock_guard<std::mutex> lock(mu);
      cancelled = true;
      submitted = keys;
    }
    for (uint64_t k : submitted) worker->Cancel(k);
  }
};

class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, loop::Worker* worker,
                  RequestCounters* counters, const grpc::ByteBuffer& raw, size_t max_bytes)
      : worker_(worker), counters_(counters) {
    // A client that cancelled before its request arrived leaves no message (an invalid buffer):
    // a cancel, not a bad request (it was refused as unreadable and counted INVALID_ARGUMENT).
    if (context->IsCancelled() || !raw.Valid()) {
      if (counters != nullptr) counters->OnCancelledBeforeArrival();
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before it arrived"));
      return;
    }
    auto spec = Read(raw, max_bytes);
    if (!spec.ok()) {
      Refuse(context, spec.status());
      return;
    }
    request_id_ = spec->request_id;
    // Not under mu_: the sink may be called before Submit returns.
    auto key = worker_->Submit(*std::move(spec), sinks_[0]);
    if (!key.ok()) {
      Refuse(context, key.status());
      return;
    }
    // The output stage may already have delivered (Deliver and Fail wait for started_): the
    // response's request id is settled before anything is written.
    std::unique_lock<std::mutex> lock(mu_);
    key_ = *key;
    submitted_ = true;
    if (request_id_.empty()) request_id_ = "req-" + std::to_string(key_);
    started_ = true;
    // A later choice that failed before now could not cancel this one: the call has ended.
    const bool cancel = has_error_;
    if (!finishing_ && !writing_) {
      if (AnyPendingLocked()) {
        WriteNextLocked();
      } else if (has_error_) {
        FinishLocked(error_);
      }
    }
    lock.unlock();
    if (cancel) worker_->Cancel(key_);
  }

  // From the output stage: an update of choice `index`.
  void Deliver(int index, loop::StreamUpdate update) {
    bool start_later = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finishing_) return;
      Choice& c = choices_[static_cast<size_t>(index)];
      if (c.has_pending) {
        c.pending.Merge(std::move(update));
      } else {
        c.pending = std::move(update);
        c.has_pending = true;
      }
      if (index == 0 && later_ && !later_started_) start_later = later_started_ = true;
      if (started_ && !writing_) WriteNextLocked();
    }
    // Off the output stage: Submit may tokenize, refuse or queue.
    if (start_later)
      worker_->Post([later = later_, worker = worker_] { later->SubmitAll(worker); });
  }

  void Fail(const absl::Status& status) {
    bool cancel_first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finishing_) return;
      error_ = ToGrpcStatus(status);
      has_error_ = true;
      if (started_ && !writing_) FinishLocked(error_);
      cancel_first = submitted_;
    }
    // The call ends with the error: the other choices go too.
    if (later_) {
      if (cancel_first) worker_->Cancel(key_);
      later_->CancelAll(worker_);
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (finishing_) return;
    if (!ok) {
      // The stream is broken (client gone); OnCancel follows and cancels the request.
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    if (AnyPendingLocked()) {
      WriteNextLocked();
    } else if (has_error_) {
      FinishLocked(error_);
    } else if (unfinished_ == 0) {
      FinishLocked(grpc::Status::OK);
    }
  }

  void OnCancel() override {
    if (submitted_) worker_->Cancel(key_);
    if (later_) later_->CancelAll(worker_);
    std::lock_guard<std::mutex> lock(mu_);
    if (!finishing_ && !writing_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
  }

  void OnDone() override {
    for (auto& sink : sinks_) sink->Detach();
    delete this;
  }

 private:
  struct Choice {
    loop::StreamUpdate pending;
    bool has_pending = false;
  };

  // The request's first choice's spec, with the sinks (and the later choices, for n > 1) set up.
  absl::StatusOr<loop::GenerateSpec> Read(const grpc::ByteBuffer& raw, size_t max_bytes) {
    llm::v1::GenerateRequest request;
    LLM_RETURN_IF_ERROR(ParseChecked(raw, max_bytes, kGenerateStrings, request));
    LLM_ASSIGN_OR_RETURN(loop::GenerateSpec spec, ToSpec(request));
    const uint32_t n = std::max<uint32_t>(1, request.n());
    if (n > kMaxChoices) {
      return absl::InvalidArgumentError(
          absl::StrCat("n: at most ", kMaxChoices, " choices a request, not ", n));
    }
    LLM_RETURN_IF_ERROR(CheckBatch(request, n));
    if (worker_ == nullptr) return absl::UnavailableError("the model is still loading");
    const size_t total = n * (1 + static_cast<size_t>(request.more_prompts_size()));
    choices_.resize(total);
    unfinished_ = static_cast<int>(total);
    for (size_t i = 0; i < total; ++i) {
      sinks_.push_back(
          std::make_shared<ReactorSink>(this, static_cast<int>(i), PromptField(i / n)));
    }
    if (total > 1) {
      later_ = std::make_shared<LaterChoices>();
      later_->counters = counters_;
      for (size_t i = 1; i < total; ++i) {
        loop::GenerateSpec s = spec;
        if (i >= n) SetPrompt(request.more_prompts(static_cast<int>(i / n - 1)), s);
        if (i % n == 0) {  // a later prompt: what can be checked now is a refusal of the call
          LLM_RETURN_IF_ERROR(
              InPrompt(loop::ValidateSpec(s, worker_->limits()), PromptField(i / n)));
        }
        s.sampling.seed += i % n;  // its own random stream; each prompt's as if alone
        later_->specs.push_back(std::move(s));
        later_->sinks.push_back(sinks_[i]);
      }
    }
    return spec;
  }

  // More prompts: only of a text or token ids request, within the choices a request may have.
  static absl::Status CheckBatch(const llm::v1::GenerateRequest& request, uint32_t n) {
    const size_t prompts = 1 + static_cast<size_t>(request.more_prompts_size());
    if (prompts > 1 && request.prompt_case() == llm::v1::GenerateRequest::kChat) {
      return absl::InvalidArgumentError(
          "more_prompts: only with a text or token_ids prompt, not a chat");
    }
    if (prompts * n > kMaxBatchChoices) {
      return absl::InvalidArgumentError(
          absl::StrCat("more_prompts: ", prompts, " prompts of ", n, " choices are ", prompts * n,
                       " choices; at most ", kMaxBatchChoices, " a request"));
    }
    return absl::OkStatus();
  }

  void Refuse(grpc::CallbackServerContext* context, const absl::Status& st) {
    const grpc::Status status = ToGrpcStatus(st);
    // Overload: tell the client when to retry (gRPC's retry policy honours this trailer).
    if (const auto ms = RetryAfterMs(st)) {
      context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(*ms));
    }
    if (counters_ != nullptr) counters_->OnRejected(status.error_code());
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(status);
  }

  bool AnyPendingLocked() const {
    for (const Choice& c : choices_) {
      if (c.has_pending) return true;
    }
    return false;
  }

  // Writes the next choice's pending update, the choices taken in turn.
  void WriteNextLocked() {
    const int n = static_cast<int>(choices_.size());
    int j = next_write_;
    while (!choices_[static_cast<size_t>(j)].has_pending) j = (j + 1) % n;
    next_write_ = (j + 1) % n;
    Choice& c = choices_[static_cast<size_t>(j)];
    ToResponse(request_id_, c.pending, message_);
    message_.set_index(static_cast<uint32_t>(j));
    if (c.pending.finished) --unfinished_;
    c.pending = loop::StreamUpdate{};
    c.has_pending = false;
    SerializeTo(message_, response_);
    writing_ = true;
    StartWrite(&response_);
  }
  void FinishLocked(const grpc::Status& status) {
    finishing_ = true;
    Finish(status);
  }

  loop::Worker* worker_;
  RequestCounters* counters_;
  std::string request_id_;
  std::vector<std::shared_ptr<ReactorSink>> sinks_;  // one per choice
  std::shared_ptr<LaterChoices> later_;              // n > 1 or more prompts
  uint64_t key_ = 0;                                 // the first choice's
  bool submitted_ = false;

  std::mutex mu_;
  bool started_ = false;  // submitted and request_id_ settled: writing may begin
  bool later_started_ = false;
  std::vector<Choice> choices_;
  int next_write_ = 0;
  int unfinished_ = 1;  // choices whose last update is not yet written
  bool writing_ = false;
  bool finishing_ = false;
  bool has_error_ = false;
  grpc::Status error_;
  llm::v1::GenerateResponse message_;
  grpc::ByteBuffer response_;  // the serialized message being written
};

void ReactorSink::OnUpdate(loop::StreamUpdate update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reactor_ != nullptr) reactor_->Deliver(index_, std::move(update));
}

void ReactorSink::OnError(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reactor_ != nullptr) reactor_->Fail(InPrompt(status, field_));
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GenerateReactor(context, worker_.load(), counters_, *request, max_message_bytes_);
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw,
                                                      grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  loop::Worker* worker = worker_.load();
  if (worker == nullptr) {
    reactor->Finish(NotReady());
    return reactor;
  }
  llm::v1::TokenizeRequest request;
  if (absl::Status st = ParseChecked(*raw, max_message_bytes_, kTokenizeStrings, request);
      !st.ok()) {
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  if (absl::Status st = worker->CheckModel(request.model()); !st.ok()) {
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  auto ids = TokenizeIds(*worker, request);
  if (ids.ok()) {
    llm::v1::TokenizeResponse response;
    response.mutable_token_ids()->Add(ids->begin(), ids->end());
    response.set_max_context_tokens(worker->limits().accepted_context());
    SerializeTo(response, *raw_response);
  }
  reactor->Finish(ToGrpcStatus(ids.status()));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const llm::v1::DetokenizeRequest* request,
                                                        llm::v1::DetokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  loop::Worker* worker = worker_.load();
  if (worker == nullptr) {
    reactor->Finish(NotReady());
    return reactor;
  }
  if (absl::Status st = worker->CheckModel(request->model()); !st.ok()) {
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  auto text = worker->Detokenize(
      ids, request->has_skip_special_tokens() ? request->skip_special_tokens() : true);
  if (text.ok()) response->set_text(*text);
  reactor->Finish(ToGrpcStatus(text.status()));
  return reactor;
}

}  // namespace llm::server
