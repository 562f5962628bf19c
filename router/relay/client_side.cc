// The client-facing half of the relay: ClientConnection (nghttp2 server session) and
// ClientCall (one relayed call).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/retry_after.h"
#include "llm/v1/generation.pb.h"
#include "router/policy/prefix_index.h"
#include "router/relay/grpc_wire.h"
#include "router/relay/h2_util.h"
#include "router/relay/relay_internal.h"
#include "router/relay/security.h"

namespace llm::router::relay {

namespace {

constexpr char kGenerationPrefix[] = "/llm.v1.Generation/";
constexpr int64_t kInFlightRetryMs = 100;

bool HopByHop(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "host";
}

}  // namespace

void MessageCounter::Feed(const uint8_t* data, size_t len) {
  size_t i = 0;
  while (i < len) {
    if (header_left_ > 0) {
      if (header_left_ <= 4) length_ = (length_ << 8) | data[i];
      if (--header_left_ == 0) {
        ++messages_;
        body_left_ = length_;
        length_ = 0;
      }
      ++i;
      continue;
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(body_left_, len - i));
    body_left_ -= take;
    i += take;
    if (body_left_ == 0) header_left_ = 5;
  }
  if (header_left_ == 0 && body_left_ == 0) header_left_ = 5;  // an empty message
}

// ---- ClientCall ----

ClientCall::ClientCall(LoopContext* ctx, CallClient* client)
    : ctx_(ctx), client_(client), arrival_(Clock::now()) {}

ClientCall::~ClientCall() {
  if (deadline_timer_ != 0) ctx_->loop.CancelTimer(deadline_timer_);
  LeaveInFlight();
}

void ClientCall::LeaveInFlight() {
  if (!entered_) return;
  entered_ = false;
  ctx_->in_flight->fetch_sub(1);
}

void ClientCall::AddHeader(std::string_view name, std::string_view value) {
  if (name == ":path") {
    path_ = std::string(value);
  } else if (!name.empty() && name[0] == ':') {
    // :method, :scheme, :authority: made afresh upstream.
  } else if (name == "grpc-timeout") {
    if (auto t = ParseGrpcTimeout(value)) {
      deadline_ = arrival_ + std::chrono::duration_cast<Clock::duration>(*t);
    }
  } else if (name == "authorization") {
    authorization_ = std::string(value);
  } else if (name != "te" && !HopByHop(name)) {
    metadata_.emplace_back(std::string(name), std::string(value));
  }
}

Headers ClientCall::WorkerHeaders() const {
  Headers h;
  h.reserve(metadata_.size() + 2);
  h.emplace_back("te", "trailers");
  if (deadline_) {
    h.emplace_back("grpc-timeout",
                   FormatGrpcTimeout(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       *deadline_ - Clock::now())));
  }
  for (const auto& kv : metadata_) h.push_back(kv);
  return h;
}

void ClientCall::OnRequestHeaders() {
  to_workers_ = path_.rfind(kGenerationPrefix, 0) == 0;
  const RelaySecurity* security = ctx_->options->security;
  if (to_workers_ && security != nullptr && security->token_required() &&
      !security->TokenMatches(authorization_)) {
    Finish(kGrpcUnauthenticated,
           authorization_.empty() ? "missing bearer token (authorization: Bearer ...)"
                                  : "invalid bearer token",
           {});
    return;
  }
  if (deadline_) {
    deadline_timer_ = ctx_->loop.AddTimer(*deadline_, [this] {
      deadline_timer_ = 0;
      OnDeadline();
    });
  }
  if (!to_workers_) {
    StartAttempt();  // pass-through: the request streams as it comes
    return;
  }
  const int64_t max = ctx_->options->proxy.max_in_flight;
  if (ctx_->in_flight->fetch_add(1) >= max) {
    ctx_->in_flight->fetch_sub(1);
    // Calls end all the time at that many in flight: come back soon.
    Finish(kGrpcResourceExhausted,
           absl::StrCat("router: ", max, " calls in flight (proxy.max_in_flight)"),
           {{"grpc-retry-pushback-ms", std::to_string(kInFlightRetryMs)}});
    return;
  }
  entered_ = true;
}

void ClientCall::OnRequestData(const uint8_t* data, size_t len) {
  if (finished()) return;
  const int64_t max = ctx_->options->proxy.max_message_bytes;
  if (!to_workers_ && attempt_ != nullptr && attempt_->request_offset >= 64 * 1024) {
    // A pass-through stream (reflection) may go on for long: drop what went upstream.
    request_.erase(0, attempt_->request_offset);
    attempt_->request_offset = 0;
  }
  request_.append(reinterpret_cast<const char*>(data), len);
  const size_t sent = !to_workers_ && attempt_ != nullptr ? attempt_->request_offset : 0;
  // A Generation request is one message (its 5-byte prefix on top of the limit); a
  // pass-through stream may hold that much not yet sent upstream.
  if (static_cast<int64_t>(request_.size() - sent) > max + 5) {
    Finish(to_workers_ ? kGrpcInvalidArgument : kGrpcResourceExhausted,
           absl::StrCat("request: more than ", max, " bytes (proxy.max_message_bytes)"), {});
    if (attempt_ != nullptr) attempt_->Cancel();
    request_.clear();
    return;
  }
  if (!to_workers_ && attempt_ != nullptr) attempt_->ResumeRequest();
}

void ClientCall::OnRequestEnd() {
  request_done_ = true;
  if (finished()) return;
  if (to_workers_) {
    StartAttempt();
  } else if (attempt_ != nullptr) {
    attempt_->ResumeRequest();
  }
}

void ClientCall::ComputePrefix() {
  prefix_done_ = true;
  // Only Generate carries a prompt, and it and (De)Tokenize a model; the request is one gRPC
  // message (5-byte prefix).
  if (request_.size() < 5 || request_[0] != 0) return;
  const auto* message = request_.data() + 5;
  const int size = static_cast<int>(request_.size() - 5);
  if (path_ == "/llm.v1.Generation/Tokenize") {
    llm::v1::TokenizeRequest t;
    if (t.ParseFromArray(message, size)) model_ = t.model();
    return;
  }
  if (path_ == "/llm.v1.Generation/Detokenize") {
    llm::v1::DetokenizeRequest d;
    if (d.ParseFromArray(message, size)) model_ = d.model();
    return;
  }
  if (path_ != "/llm.v1.Generation/Generate") return;
  llm::v1::GenerateRequest req;
  if (!req.ParseFromArray(message, size)) return;
  model_ = req.model();
  std::string bytes;
  switch (req.prompt_case()) {
    case llm::v1::GenerateRequest::kText:
      bytes = req.text();
      break;
    case llm::v1::GenerateRequest::kTokenIds:
      bytes.assign(reinterpret_cast<const char*>(req.token_ids().ids().data()),
                   static_cast<size_t>(req.token_ids().ids_size()) * sizeof(int32_t));
      break;
    case llm::v1::GenerateRequest::kChat:
      // The conversation as the template will see it, in order: tools, then each turn.
      bytes = req.chat().tools_json();
      for (const auto& m : req.chat().messages()) {
        bytes += '\0' + m.role() + '\0' + m.content() + '\0' + m.tool_calls_json();
      }
      break;
    default:
      return;
  }
  // A prompt_cache_key leads the chain, padded to whole chunks: requests that share it share a
  // prefix whatever their prompts, so they go where the first of them went (while that
  // worker's load allows).
  if (!req.prompt_cache_key().empty()) {
    std::string key = req.prompt_cache_key() + '\0';
    key.resize((key.size() + PrefixIndex::kChunkBytes - 1) / PrefixIndex::kChunkBytes *
                   PrefixIndex::kChunkBytes,
               '\0');
    bytes = key + bytes;
  }
  prefix_ = PrefixIndex::Chain(bytes);
}

void ClientCall::StartAttempt() {
  std::string address;
  if (to_workers_) {
    if (!prefix_done_) ComputePrefix();
    auto picked = ctx_->pool->Pick(tried_, prefix_, model_);
    if (!picked.ok()) {
      const int code = static_cast<int>(picked.status().code());
      if (refusal_) {
        // Sent on by a full worker, and no other could take it: that worker's answer.
        Finish(refusal_->code, refusal_->message, refusal_->trailers);
      } else if (attempts_ == 0) {
        Headers hint;  // every worker saturated: when the least loaded one should have room
        if (const auto ms = RetryAfterMs(picked.status())) {
          hint.emplace_back("grpc-retry-pushback-ms", std::to_string(*ms));
        }
        Finish(code, std::string(picked.status().message()), hint);
      } else {
        Finish(kGrpcUnavailable,
               absl::StrCat(
                   "worker ", worker_->address(), " failed (", last_failure_,
                   ") and no other worker could take the request: ", picked.status().message()),
               {});
      }
      return;
    }
    // A retry is counted when it has somewhere to go (llm_router_retries_total: calls moved to
    // another worker).
    if (attempts_ > 0 && ctx_->observer != nullptr) ctx_->observer->OnRetry();
    worker_ = *std::move(picked);
    if (ctx_->observer != nullptr) served_model_ = worker_->model();
    tried_.push_back(worker_.get());
    tried_handles_.push_back(worker_);
    address = worker_->address();
  } else {
    address = ctx_->options->internal_target;
  }
  ++attempts_;
  got_data_ = false;
  worker_headers_.clear();
  // Calls to the workers use the client connection's lane; pass-through calls lane 0.
  const uint32_t lane = to_workers_ && client_ != nullptr ? client_->lane() : 0;
  WorkerConnection* c = ctx_->Worker(address, lane);
  WorkerAttempt* u = c != nullptr ? c->Submit(this) : nullptr;
  if (u == nullptr) {
    AttemptEnded(kGrpcUnavailable, absl::StrCat("cannot open a stream to ", address), {},
                 /*worker_fault=*/false);
    return;
  }
  attempt_ = u;
}

void ClientCall::OnWorkerHeaders(const Headers& headers) {
  worker_headers_ = headers;
  if (!to_workers_ && phase_ == Phase::kOpen) Commit(&worker_headers_);
}

void ClientCall::OnWorkerData(const uint8_t* data, size_t len) {
  if (client_closed_ || finished()) {
    attempt_->Consume(len);  // nobody to give it to
    return;
  }
  if (!got_data_) {
    got_data_ = true;
    if (to_workers_ && worker_ != nullptr) worker_->OnFirstToken();
  }
  if (phase_ == Phase::kOpen) Commit(&worker_headers_);
  if (to_workers_) counter_.Feed(data, len);
  // Drop what already left before growing (a client reading steadily but slowly never empties
  // the buffer, and its sent prefix must not pile up).
  if (pending_offset_ >= 64 * 1024) {
    pending_.erase(0, pending_offset_);
    pending_offset_ = 0;
  }
  pending_.append(reinterpret_cast<const char*>(data), len);
  ResumeResponse();
}

void ClientCall::OnWorkerClosed(int code, const std::string& message, const Headers& trailers,
                                bool worker_fault) {
  attempt_ = nullptr;
  AttemptEnded(code, message, trailers, worker_fault);
  MaybeDelete();
}

void ClientCall::AttemptEnded(int code, const std::string& message, const Headers& trailers,
                              bool worker_fault) {
  const bool client_caused = end_cause_ != EndCause::kNone || code == kGrpcDeadlineExceeded;
  if (to_workers_ && worker_ != nullptr) {
    worker_->OnStreamEnded(got_data_);
    const bool worker_failed = !client_caused && IsWorkerFailure(code);
    if (code == kGrpcOk) {
      worker_->OnSuccess();
    } else if (!client_caused && worker_fault) {
      if (worker_failed) worker_->OnFailure();
      if (ctx_->observer != nullptr) ctx_->observer->OnUpstreamError(worker_->address(), code);
    }
    // A worker that is full refuses before doing anything (RESOURCE_EXHAUSTED with a retry
    // hint, no message sent): another worker may have room, though the pool's view, made from
    // load reports a moment old, had this one as the best. Not a failure of the worker.
    const bool full = !client_caused && code == kGrpcResourceExhausted && !got_data_ &&
                      std::any_of(trailers.begin(), trailers.end(), [](const auto& h) {
                        return h.first == "grpc-retry-pushback-ms";
                      });
    if ((worker_failed || full) && phase_ == Phase::kOpen && !client_closed_ &&
        attempts_ < ctx_->options->proxy.max_attempts) {
      last_failure_ = message;
      if (full) {
        refusal_ = Refusal{code, message, trailers};
      } else {
        refusal_.reset();
      }
      // On the next turn of the loop, outside the worker session's callbacks.
      retry_pending_ = true;
      ctx_->loop.AddTimer(Clock::now(), [this] {
        retry_pending_ = false;
        if (client_closed_ || finished()) {
          MaybeDelete();
          return;
        }
        StartAttempt();
        MaybeDelete();
      });
      return;
    }
  }
  if (end_cause_ == EndCause::kClientCancelled) {
    Finish(kGrpcCancelled, "cancelled by the client", {});
  } else if (end_cause_ == EndCause::kDeadline) {
    Finish(kGrpcDeadlineExceeded, "deadline exceeded", {});
  } else if (committed() && to_workers_ && IsWorkerFailure(code)) {
    // Part of the answer reached the client: it cannot be retried. (A worker's own error
    // status after some messages, such as RESOURCE_EXHAUSTED, goes to the client unchanged.)
    Finish(kGrpcUnavailable,
           absl::StrCat("worker ", worker_ != nullptr ? worker_->address() : "?",
                        " failed after the stream started (code ", code, "): ", message),
           {});
  } else {
    Finish(code, message, trailers);
  }
}

void ClientCall::Commit(const Headers* headers) {
  phase_ = Phase::kCommitted;
  if (ctx_->observer != nullptr && to_workers_) {
    ctx_->observer->OnFirstMessage(std::chrono::duration<double>(Clock::now() - arrival_).count(),
                                   served_model_);
  }
  if (client_ != nullptr) client_->StartResponse(headers);
}

void ClientCall::Finish(int code, const std::string& message, const Headers& trailers) {
  if (finished()) return;
  const bool was_committed = committed();
  phase_ = Phase::kFinished;
  final_code_ = code;
  if (deadline_timer_ != 0) {
    ctx_->loop.CancelTimer(deadline_timer_);
    deadline_timer_ = 0;
  }
  CallDone(code);
  if (client_closed_) return;
  bool has_status = false;
  for (const auto& [n, v] : trailers) has_status |= n == "grpc-status";
  final_trailers_ = trailers;
  if (!has_status) {
    final_trailers_.emplace_back("grpc-status", std::to_string(code));
    if (!message.empty()) final_trailers_.emplace_back("grpc-message", PercentEncode(message));
  }
  if (was_committed) {
    ResumeResponse();  // the client side sends the trailers once the bytes are out
    return;
  }
  client_->TrailersOnly(final_trailers_);
}

void ClientCall::ResumeResponse() {
  if (client_closed_ || client_ == nullptr) return;
  client_->ResponseReady();
}

size_t ClientCall::TakeResponse(uint8_t* buf, size_t length, bool* ended) {
  *ended = false;
  const size_t avail = pending_.size() - pending_offset_;
  if (avail > 0) {
    const size_t n = std::min(avail, length);
    std::memcpy(buf, pending_.data() + pending_offset_, n);
    pending_offset_ += n;
    if (pending_offset_ == pending_.size()) {
      pending_.clear();
      pending_offset_ = 0;
    }
    if (attempt_ != nullptr) attempt_->Consume(n);
    return n;
  }
  *ended = finished();
  return 0;
}

void ClientCall::OnDeadline() {
  if (finished()) return;
  end_cause_ = EndCause::kDeadline;
  if (attempt_ != nullptr) attempt_->Cancel();
  Finish(kGrpcDeadlineExceeded, "deadline exceeded", {});
}

void ClientCall::OnClientClosed(uint32_t) {
  client_closed_ = true;
  if (!finished()) {
    // A client whose deadline passes resets the stream itself, at about the moment our timer
    // for the same deadline (its grpc-timeout, less the transit) fires: whichever came first,
    // that call ended by its deadline, not by a cancel (the metrics counted most as CANCELLED).
    constexpr auto kDeadlineSlack = std::chrono::milliseconds(50);
    const bool deadline = deadline_ && Clock::now() + kDeadlineSlack >= *deadline_;
    end_cause_ = deadline ? EndCause::kDeadline : EndCause::kClientCancelled;
    if (attempt_ != nullptr) attempt_->Cancel();
    if (deadline) {
      Finish(kGrpcDeadlineExceeded, "deadline exceeded", {});
    } else {
      Finish(kGrpcCancelled, "cancelled by the client", {});
    }
  }
  CallClient* client = client_;
  client_ = nullptr;
  if (client != nullptr) client->Detach(this);
  MaybeDelete();
}

void ClientCall::MaybeDelete() {
  if (client_closed_ && attempt_ == nullptr && !retry_pending_) delete this;
}

void ClientCall::CallDone(int code) {
  if (!to_workers_ || ctx_->observer == nullptr) return;
  ctx_->observer->OnCallDone(code, attempts_, served_model_);
  if (counter_.messages() > 0) ctx_->observer->OnRelayed(counter_.messages());
}

// ---- ClientConnection ----

// An HTTP/2 stream as a call's client side: the response goes out through nghttp2's data
// provider, which pulls from the call.
class ClientConnection::Stream final : public CallClient {
 public:
  Stream(ClientConnection* conn, int32_t id) : conn_(conn), id_(id) {}
  void set_call(ClientCall* call) { call_ = call; }

  uint32_t lane() const override { return conn_->lane(); }

  void StartResponse(const Headers* headers) override {
    static const std::string kStatus = ":status", k200 = "200", kType = "content-type",
                             kGrpc = "application/grpc";
    std::vector<nghttp2_nv> nva;
    bool has_status = false, has_type = false;
    if (headers != nullptr) {
      for (const auto& [n, v] : *headers) {
        has_status |= n == ":status";
        has_type |= n == "content-type";
      }
    }
    if (!has_status) nva.push_back(Nv(kStatus, k200));
    if (headers != nullptr) {
      for (const auto& [n, v] : *headers) {
        if (n == ":status")
          nva.insert(nva.begin(), Nv(n, v));
        else if (!HopByHop(n))
          nva.push_back(Nv(n, v));
      }
    }
    if (!has_type) nva.push_back(Nv(kType, kGrpc));
    nghttp2_data_provider prd;
    prd.source.ptr = this;
    prd.read_callback = &Stream::Read;
    nghttp2_submit_response(conn_->session(), id_, nva.data(), nva.size(), &prd);
    conn_->Touch();
  }

  void ResponseReady() override {
    if (deferred_) {
      deferred_ = false;
      nghttp2_session_resume_data(conn_->session(), id_);
    }
    conn_->Touch();
  }

  void TrailersOnly(const Headers& trailers) override {
    static const std::string kStatus = ":status", k200 = "200", kType = "content-type",
                             kGrpc = "application/grpc";
    std::vector<nghttp2_nv> nva = {Nv(kStatus, k200), Nv(kType, kGrpc)};
    for (const auto& [n, v] : trailers) nva.push_back(Nv(n, v));
    nghttp2_submit_response(conn_->session(), id_, nva.data(), nva.size(), nullptr);
    conn_->Touch();
  }

  void Detach(ClientCall* call) override { conn_->streams_.erase(call); }  // deletes this

 private:
  static ssize_t Read(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* data_flags,
                      nghttp2_data_source* source, void*) {
    auto* self = static_cast<Stream*>(source->ptr);
    bool ended = false;
    const size_t n = self->call_->TakeResponse(buf, length, &ended);
    if (n > 0) return static_cast<ssize_t>(n);
    if (ended) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      std::vector<nghttp2_nv> nva;
      for (const auto& [n, v] : self->call_->final_trailers()) nva.push_back(Nv(n, v));
      nghttp2_submit_trailer(self->conn_->session(), self->id_, nva.data(), nva.size());
      return 0;
    }
    self->deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }

  ClientConnection* conn_;
  int32_t id_;
  ClientCall* call_ = nullptr;
  bool deferred_ = false;  // the data provider waits for bytes
};

ClientConnection::ClientConnection(LoopContext* ctx, int fd, SSL* ssl)
    : H2Connection(&ctx->loop, fd, ssl),
      ctx_(ctx),
      lane_(ctx->next_lane++ %
            static_cast<uint32_t>(std::max(1, ctx->options->proxy.upstream_connections))) {
  static const nghttp2_session_callbacks* const callbacks =
      MakeCallbacks({.begin_headers = &OnBeginHeaders,
                     .header = &OnHeader,
                     .frame_recv = &OnFrameRecv,
                     .data_chunk = &OnDataChunk,
                     .stream_close = &OnStreamClose,
                     .frame_send = &OnFrameSend});
  nghttp2_session* session;
  nghttp2_session_server_new(&session, callbacks, this);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100000},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
  };
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 2);
  TolerateIdleStreamFrames();
  Start(session, /*connecting=*/false);
}

ClientConnection::~ClientConnection() = default;

void ClientConnection::StartDrain() {
  if (closed()) return;
  // Streams up to the last one seen go on; the session ends once they are done (Flush closes
  // a session that wants neither to read nor to write).
  nghttp2_submit_goaway(session(), NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session()), NGHTTP2_NO_ERROR,
                        reinterpret_cast<const uint8_t*>("router draining"), 15);
  Touch();
}

void ClientConnection::OnClose(const std::string&) {
  std::vector<ClientCall*> streams;
  for (const auto& [call, stream] : streams_) streams.push_back(call);
  for (ClientCall* s : streams) s->OnClientClosed(NGHTTP2_CANCEL);
  ctx_->Release(this);
}

int ClientConnection::OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame,
                                     void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto* c = static_cast<ClientConnection*>(user_data);
  auto stream = std::make_unique<Stream>(c, frame->hd.stream_id);
  auto* s = new ClientCall(c->ctx_, stream.get());
  stream->set_call(s);
  c->streams_.emplace(s, std::move(stream));
  nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s);
  return 0;
}

int ClientConnection::OnHeader(nghttp2_session* session, const nghttp2_frame* frame,
                               const uint8_t* name, size_t name_len, const uint8_t* value,
                               size_t value_len, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto* s =
      static_cast<ClientCall*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (s != nullptr) {
    s->AddHeader(std::string_view(reinterpret_cast<const char*>(name), name_len),
                 std::string_view(reinterpret_cast<const char*>(value), value_len));
  }
  return 0;
}

int ClientConnection::OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void*) {
  auto* s =
      static_cast<ClientCall*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (s == nullptr) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    s->OnRequestHeaders();
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) s->OnRequestEnd();
  } else if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
             (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    s->OnRequestEnd();  // the last DATA frame, or trailers after the request
  }
  return 0;
}

int ClientConnection::OnDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id,
                                  const uint8_t* data, size_t len, void*) {
  auto* s = static_cast<ClientCall*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (s != nullptr) s->OnRequestData(data, len);
  return 0;
}

int ClientConnection::OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void*) {
  if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

int ClientConnection::OnStreamClose(nghttp2_session* session, int32_t stream_id,
                                    uint32_t error_code, void*) {
  auto* s = static_cast<ClientCall*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (s != nullptr) {
    nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
    s->OnClientClosed(error_code);
  }
  return 0;
}

}  // namespace llm::router::relay
