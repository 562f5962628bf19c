#include "worker/server/generation_service.h"

#include <memory>
#include <mutex>
#include <string>

#include "common/retry_after.h"
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
const StringFields kGenerateStrings = {
    {1, "request_id"}, {2, "text"}, {7, "stop[]"}, {12, {"chat", &kChatStrings}}};
const StringFields kTokenizeStrings = {{1, "text"}, {3, "model"}};

class GenerateReactor;

// The worker's handle on a stream. It outlives the reactor: once the RPC is done, updates are
// dropped.
class ReactorSink : public loop::StreamSink {
 public:
  explicit ReactorSink(GenerateReactor* reactor) : reactor_(reactor) {}
  void OnUpdate(loop::StreamUpdate update) override;
  void OnError(const absl::Status& status) override;
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
  }

 private:
  std::mutex mu_;  // guards reactor_; held while calling into it
  GenerateReactor* reactor_;
};

class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, loop::Worker* worker,
                  RequestCounters* counters, const grpc::ByteBuffer& raw, size_t max_bytes)
      : worker_(worker) {
    sink_ = std::make_shared<ReactorSink>(this);
    // A client that cancelled before its request arrived leaves no message (an invalid buffer):
    // a cancel, not a bad request (it was refused as unreadable and counted INVALID_ARGUMENT).
    if (context->IsCancelled() || !raw.Valid()) {
      if (counters != nullptr) counters->OnCancelledBeforeArrival();
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before it arrived"));
      return;
    }
    llm::v1::GenerateRequest request;
    if (absl::Status st = ParseChecked(raw, max_bytes, kGenerateStrings, request); !st.ok()) {
      if (counters != nullptr) counters->OnRejected(grpc::StatusCode::INVALID_ARGUMENT);
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(ToGrpcStatus(st));
      return;
    }
    auto converted = ToSpec(request);
    if (!converted.ok()) {
      if (counters != nullptr) counters->OnRejected(grpc::StatusCode::INVALID_ARGUMENT);
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(ToGrpcStatus(converted.status()));
      return;
    }
    loop::GenerateSpec spec = *std::move(converted);
    request_id_ = spec.request_id;
    if (worker_ == nullptr) {
      if (counters != nullptr) counters->OnRejected(grpc::StatusCode::UNAVAILABLE);
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(NotReady());
      return;
    }
    // Not under mu_: the sink may be called before Submit returns.
    auto key = worker_->Submit(std::move(spec), sink_);
    if (!key.ok()) {
      const grpc::Status status = ToGrpcStatus(key.status());
      // Overload: tell the client when to retry (gRPC's retry policy honours this trailer).
      if (const auto ms = RetryAfterMs(key.status())) {
        context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(*ms));
      }
      if (counters != nullptr) counters->OnRejected(status.error_code());
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(status);
      return;
    }
    // The output stage may already have delivered (Deliver and Fail wait for started_): the
    // response's request id is settled before anything is written.
    std::lock_guard<std::mutex> lock(mu_);
    key_ = *key;
    submitted_ = true;
    if (request_id_.empty()) request_id_ = "req-" + std::to_string(key_);
    started_ = true;
    if (finishing_ || writing_) return;
    if (has_pending_) {
      WriteNextLocked();
    } else if (has_error_) {
      FinishLocked(error_);
    }
  }

  // From the output stage.
  void Deliver(loop::StreamUpdate update) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_) return;
    if (has_pending_) {
      pending_.Merge(std::move(update));
    } else {
      pending_ = std::move(update);
      has_pending_ = true;
    }
    if (started_ && !writing_) WriteNextLocked();
  }

  void Fail(const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_) return;
    error_ = ToGrpcStatus(status);
    has_error_ = true;
    if (started_ && !writing_) FinishLocked(error_);
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
    if (has_pending_) {
      WriteNextLocked();
    } else if (has_error_) {
      FinishLocked(error_);
    } else if (last_written_) {
      FinishLocked(grpc::Status::OK);
    }
  }

  void OnCancel() override {
    if (submitted_) worker_->Cancel(key_);
    std::lock_guard<std::mutex> lock(mu_);
    if (!finishing_ && !writing_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
  }

  void OnDone() override {
    sink_->Detach();
    delete this;
  }

 private:
  void WriteNextLocked() {
    ToResponse(request_id_, pending_, message_);
    SerializeTo(message_, response_);
    last_written_ = pending_.finished;
    pending_ = loop::StreamUpdate{};
    has_pending_ = false;
    writing_ = true;
    StartWrite(&response_);
  }
  void FinishLocked(const grpc::Status& status) {
    finishing_ = true;
    Finish(status);
  }

  loop::Worker* worker_;
  std::string request_id_;
  std::shared_ptr<ReactorSink> sink_;
  uint64_t key_ = 0;
  bool submitted_ = false;

  std::mutex mu_;
  bool started_ = false;  // submitted and request_id_ settled: writing may begin
  loop::StreamUpdate pending_;
  bool has_pending_ = false;
  bool writing_ = false;
  bool last_written_ = false;
  bool finishing_ = false;
  bool has_error_ = false;
  grpc::Status error_;
  llm::v1::GenerateResponse message_;
  grpc::ByteBuffer response_;  // the serialized message being written
};

void ReactorSink::OnUpdate(loop::StreamUpdate update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reactor_ != nullptr) reactor_->Deliver(std::move(update));
}

void ReactorSink::OnError(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reactor_ != nullptr) reactor_->Fail(status);
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
  auto ids = worker->Tokenize(
      request.text(), request.has_add_special_tokens() ? request.add_special_tokens() : true);
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
