#include "router/relay/http_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/openai/messages_api.h"
#include "router/openai/models_api.h"
#include "router/openai/responses_api.h"
#include "router/openai/tokenize_api.h"
#include "router/relay/grpc_wire.h"
#include "router/relay/http_gate.h"
#include "router/relay/security.h"

namespace llm::router::relay {

namespace {

using openai::ApiError;
using openai::ApiKind;

// Stop taking a call's response beyond this much output not yet written (a slow client).
constexpr size_t kMaxBuffered = 1 << 20;
constexpr size_t kReadChunk = 64 * 1024;
constexpr char kGeneratePath[] = "/llm.v1.Generation/Generate";
constexpr char kTokenizePath[] = "/llm.v1.Generation/Tokenize";
constexpr char kDetokenizePath[] = "/llm.v1.Generation/Detokenize";

// The JSON answer to a unary call's response message (`bytes`).
std::string UnaryResponseBody(const char* path, const std::string& bytes, bool count_tokens) {
  if (std::string_view(path) == kTokenizePath) {
    llm::v1::TokenizeResponse r;
    (void)r.ParseFromString(bytes);
    return count_tokens ? openai::CountTokensBody(r) : openai::TokenizeResponseBody(r);
  }
  llm::v1::DetokenizeResponse r;
  (void)r.ParseFromString(bytes);
  return openai::DetokenizeResponseBody(r);
}

// The process's start, as /v1/models reports it.
const int64_t kStartedAt = static_cast<int64_t>(std::time(nullptr));

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat(prefix, absl::Hex(static_cast<uint64_t>(std::time(nullptr)), absl::kZeroPad8),
                      absl::Hex(next.fetch_add(1), absl::kZeroPad8));
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 499:
      return "Client Closed Request";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Internal Server Error";
  }
}

std::string Find(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "";
}

}  // namespace

HttpConnection::HttpConnection(LoopContext* ctx, int fd, SSL* ssl, std::string client)
    : ctx_(ctx),
      fd_(fd),
      client_(std::move(client)),
      lane_(ctx->next_lane++ %
            static_cast<uint32_t>(std::max(1, ctx->options->proxy.upstream_connections))) {
  if (ssl != nullptr) tls_ = std::make_unique<TlsPipe>(ssl, "http/1.1");
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
  ctx_->http_connections.insert(this);
  ctx_->loop.Add(fd_, EPOLLIN | EPOLLRDHUP, this);
  ArmTimeout(/*idle=*/false);  // its first request, headers and body, within the read timeout
}

HttpConnection::~HttpConnection() {
  if (fd_ >= 0) ::close(fd_);
  if (ctx_->http_gate != nullptr) ctx_->http_gate->Release(client_);
}

void HttpConnection::ArmTimeout(bool idle) {
  DisarmTimeout();
  const HttpLimits& limits = ctx_->http_gate->limits();
  const double seconds = idle ? limits.idle_timeout_seconds : limits.read_timeout_seconds;
  if (seconds <= 0) return;
  timer_idle_ = idle;
  timer_ = ctx_->loop.AddTimer(
      Clock::now() +
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)),
      [this] {
        timer_ = 0;
        if (closed_ || in_request_) return;
        ctx_->http_gate->TimedOut(timer_idle_ ? HttpGate::Timeout::kIdle : HttpGate::Timeout::kRead,
                                  client_);
        Close();
      });
}

void HttpConnection::DisarmTimeout() {
  if (timer_ != 0) ctx_->loop.CancelTimer(timer_);
  timer_ = 0;
}

void HttpConnection::OnEvents(uint32_t events) {
  if (closed_) return;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ReadAll();
  if (!closed_ && (events & EPOLLOUT)) ctx_->loop.MarkDirty(this);
}

void HttpConnection::Close() {
  if (closed_) return;
  closed_ = true;
  DisarmTimeout();
  ctx_->loop.Remove(fd_);
  ::shutdown(fd_, SHUT_RDWR);
  if (call_ != nullptr) call_->OnClientClosed(NGHTTP2_CANCEL);  // cancels at the worker
  call_ = nullptr;
  ctx_->http_connections.erase(this);
  ctx_->loop.DeleteLater(std::unique_ptr<FdHandler>(this));
}

// ---- Output ----

void HttpConnection::Write(std::string_view bytes) {
  if (out_offset_ > 0 && out_offset_ == out_.size()) {
    out_.clear();
    out_offset_ = 0;
  }
  out_.append(bytes.data(), bytes.size());
  ctx_->loop.MarkDirty(this);
}

void HttpConnection::WriteChunk(std::string_view bytes) {
  if (bytes.empty()) return;
  if (!chunked_) return Write(bytes);  // HTTP/1.0: the body ends with the connection
  Write(absl::StrCat(absl::Hex(bytes.size()), "\r\n"));
  Write(bytes);
  Write("\r\n");
}

void HttpConnection::Respond(int status, std::string_view body,
                             const std::vector<std::string>& extra) {
  std::string head =
      absl::StrCat("HTTP/1.1 ", status, " ", Reason(status),
                   "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(), "\r\n");
  for (const auto& h : extra) absl::StrAppend(&head, h, "\r\n");
  if (!reply_id_.empty()) absl::StrAppend(&head, "X-Request-Id: ", reply_id_, "\r\n");
  if (!keep_alive_) {
    head += "Connection: close\r\n";
  } else if (!chunked_) {
    head += "Connection: keep-alive\r\n";  // HTTP/1.0 asked for it
  }
  head += "\r\n";
  Write(head);
  if (!head_request_) Write(body);  // HEAD: the headers a GET would get, no body
}

void HttpConnection::RespondError(const ApiError& e) {
  std::vector<std::string> extra;
  if (e.http_status == 429) {
    extra.push_back(
        absl::StrCat("Retry-After: ", (std::max<int64_t>(e.retry_after_ms, 1) + 999) / 1000));
  }
  if (e.http_status == 401) extra.push_back("WWW-Authenticate: Bearer");
  Respond(e.http_status, anthropic_ ? openai::MessagesErrorBody(e) : openai::OpenAiErrorBody(e),
          extra);
}

void HttpConnection::StartStream() {
  stream_started_ = true;
  if (!chunked_) keep_alive_ = false;
  Write(absl::StrCat(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
      reply_id_.empty() ? "" : absl::StrCat("X-Request-Id: ", reply_id_, "\r\n"),
      chunked_ ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n", "\r\n"));
}

void HttpConnection::Flush() {
  if (closed_) return;
  Pump();
  if (closed_) return;
  if (tls_ != nullptr) {
    if (tls_->handshake_done() && out_offset_ < out_.size()) {
      const absl::Status st = tls_->Encrypt(
          reinterpret_cast<const uint8_t*>(out_.data() + out_offset_), out_.size() - out_offset_);
      if (!st.ok()) return Close();
      out_.clear();
      out_offset_ = 0;
    }
    if (wire_offset_ == wire_.size()) {
      wire_.clear();
      wire_offset_ = 0;
    }
    tls_->Drain(&wire_);
  }
  std::string& bytes = tls_ != nullptr ? wire_ : out_;
  size_t& offset = tls_ != nullptr ? wire_offset_ : out_offset_;
  while (offset < bytes.size()) {
    const ssize_t w = ::send(fd_, bytes.data() + offset, bytes.size() - offset, MSG_NOSIGNAL);
    if (w > 0) {
      offset += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close();
    return;
  }
  if (offset == bytes.size()) {
    bytes.clear();
    offset = 0;
  }
  const bool all_written = out_offset_ == out_.size() && wire_offset_ == wire_.size();
  if (all_written) {
    if (close_when_written_) {
      Close();
      return;
    }
    if (call_ != nullptr) Pump();  // room again: take more (written next iteration)
  }
  const bool want = offset < bytes.size();
  if (want != want_out_) {
    want_out_ = want;
    ctx_->loop.Modify(fd_, EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u), this);
  }
}

// ---- The call ----

void HttpConnection::StartResponse(const Headers*) { ctx_->loop.MarkDirty(this); }

void HttpConnection::ResponseReady() { ctx_->loop.MarkDirty(this); }

void HttpConnection::TrailersOnly(const Headers& trailers) {
  trailers_only_ = trailers;
  ctx_->loop.MarkDirty(this);
}

void HttpConnection::Detach(ClientCall* call) {
  if (call_ == call) call_ = nullptr;
}

void HttpConnection::StartCall(openai::ParsedRequest request) {
  request_ = std::move(request);
  const ApiKind kind = request_->kind;
  std::string id = NewId(kind == ApiKind::kChat        ? "chatcmpl-"
                         : kind == ApiKind::kResponses ? "resp_"
                         : kind == ApiKind::kMessages  ? "msg_"
                                                       : "cmpl-");
  // The worker's request id (in every GenerateResponse) is the client's X-Request-Id, or the
  // response's own id: either way the one the answer's X-Request-Id header carries.
  if (reply_id_.empty()) reply_id_ = id;
  request_->request.set_request_id(reply_id_);
  responder_ =
      openai::MakeResponder(*request_, std::move(id), static_cast<int64_t>(std::time(nullptr)));
  SendToWorkers(kGeneratePath, request_->request.SerializeAsString());
}

void HttpConnection::StartUnary(const char* path, const std::string& message) {
  unary_path_ = path;
  unary_reply_.clear();
  SendToWorkers(path, message);
}

void HttpConnection::SendToWorkers(const char* path, const std::string& message) {
  stream_started_ = false;
  grpc_in_.clear();
  trailers_only_.reset();
  std::string framed(5, '\0');
  const uint32_t n = static_cast<uint32_t>(message.size());
  framed[1] = static_cast<char>(n >> 24);
  framed[2] = static_cast<char>(n >> 16);
  framed[3] = static_cast<char>(n >> 8);
  framed[4] = static_cast<char>(n);
  framed += message;
  call_ = new ClientCall(ctx_, this);  // deletes itself once we let go and it is done
  call_->AddHeader(":path", path);
  if (!authorization_.empty()) call_->AddHeader("authorization", authorization_);
  call_->OnRequestHeaders();
  if (call_ == nullptr) return;
  call_->OnRequestData(reinterpret_cast<const uint8_t*>(framed.data()), framed.size());
  if (call_ == nullptr) return;
  call_->OnRequestEnd();
}

void HttpConnection::Pump() {
  if (call_ == nullptr) return;
  if (trailers_only_) {
    const Headers t = *std::move(trailers_only_);
    trailers_only_.reset();
    return EndCall(t);
  }
  uint8_t buf[kReadChunk];
  for (;;) {
    if (out_.size() - out_offset_ + wire_.size() - wire_offset_ >= kMaxBuffered) {
      return;  // Flush pumps again once it is written
    }
    bool ended = false;
    const size_t n = call_->TakeResponse(buf, sizeof(buf), &ended);
    if (n > 0) {
      grpc_in_.append(reinterpret_cast<const char*>(buf), n);
      // Whole messages: a 5-byte prefix (flag, big-endian length), then the message.
      size_t at = 0;
      while (grpc_in_.size() - at >= 5) {
        const auto* p = reinterpret_cast<const uint8_t*>(grpc_in_.data() + at);
        const size_t len = (size_t{p[1]} << 24) | (size_t{p[2]} << 16) | (size_t{p[3]} << 8) | p[4];
        if (grpc_in_.size() - at - 5 < len) break;
        OnMessage(grpc_in_.substr(at + 5, len));
        at += 5 + len;
      }
      grpc_in_.erase(0, at);
      continue;
    }
    if (ended) EndCall(call_->final_trailers());
    return;
  }
}

void HttpConnection::OnMessage(const std::string& bytes) {
  if (unary_path_ != nullptr) {
    unary_reply_ = bytes;
    return;
  }
  llm::v1::GenerateResponse m;
  if (!m.ParseFromString(bytes)) return;  // a worker bug; the status still ends the call
  if (request_->stream) {
    if (!stream_started_) StartStream();
    WriteChunk(responder_->OnStreamMessage(m));
  } else {
    responder_->Accumulate(m);
  }
}

void HttpConnection::EndCall(const Headers& trailers) {
  int code = kGrpcUnknown;
  (void)absl::SimpleAtoi(Find(trailers, "grpc-status"), &code);
  int64_t pushback = 0;
  (void)absl::SimpleAtoi(Find(trailers, "grpc-retry-pushback-ms"), &pushback);
  std::string message = PercentDecode(Find(trailers, "grpc-message"));
  if (code == kGrpcOk && unary_path_ == nullptr && responder_->UnfinishedChoices() > 0) {
    code = kGrpcInternal;
    message = absl::StrCat("the worker ended the call with ", responder_->UnfinishedChoices(),
                           " choices unanswered (is it older than the router, without n or "
                           "a list of prompts?)");
  } else if (code == kGrpcOk && unary_path_ == nullptr &&
             !responder_->MissingFromWorker().empty()) {
    code = kGrpcInternal;
    message = responder_->MissingFromWorker();
  }
  if (code == kGrpcOk && unary_path_ != nullptr) {
    Respond(200, UnaryResponseBody(unary_path_, unary_reply_, count_tokens_));
  } else if (code == kGrpcOk) {
    if (request_->stream) {
      if (!stream_started_) StartStream();
      WriteChunk(responder_->StreamEnd());
      if (chunked_) Write("0\r\n\r\n");
    } else {
      Respond(200, responder_->Body());
    }
  } else {
    ApiError e = openai::ErrorFromGrpc(code, message, pushback);
    if (request_ && request_->kind == ApiKind::kResponses) {
      e.param = openai::ResponsesParam(e.param);
    }
    if (anthropic_) e.message = openai::MessagesErrorText(e.message);
    // The worker's prompt_logprobs is echo's, unless the client asked for them by that name.
    if (request_ && e.param == "echo" && request_->prompt_logprobs >= 0) {
      e.param = "prompt_logprobs";
    }
    if (stream_started_) {
      WriteChunk(responder_->StreamError(e));
      if (chunked_) Write("0\r\n\r\n");
    } else {
      RespondError(e);
    }
  }
  // The call is answered: let it go (it deletes itself).
  ClientCall* call = call_;
  call_ = nullptr;
  call->OnClientClosed(0);
  RequestDone();
}

void HttpConnection::RequestDone() {
  reply_id_.clear();
  request_.reset();
  responder_.reset();
  unary_path_ = nullptr;
  count_tokens_ = false;
  anthropic_ = false;
  head_request_ = false;  // an error before the next request's first byte has a body
  if (!keep_alive_) {
    close_when_written_ = true;
    ctx_->loop.MarkDirty(this);
    return;
  }
  in_request_ = false;
  ArmTimeout(/*idle=*/true);  // until the next request's first byte
  ParsePending();             // the pipelined requests (a no-op inside ParsePending's own loop)
}

// ---- Input ----

void HttpConnection::ReadAll() {
  char buf[kReadChunk];
  const size_t max_body = static_cast<size_t>(ctx_->options->proxy.max_message_bytes);
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n > 0) {
      if (tls_ == nullptr) {
        Received(buf, static_cast<size_t>(n));
      } else {
        const absl::Status st =
            tls_->Receive(reinterpret_cast<const uint8_t*>(buf), static_cast<size_t>(n),
                          [this](const uint8_t* plain, size_t len) {
                            Received(reinterpret_cast<const char*>(plain), len);
                            return !closed_;
                          });
        if (!st.ok()) return Close();
        ctx_->loop.MarkDirty(this);  // the handshake's next flight
      }
      if (closed_) return;
      if (pending_in_.size() > max_body + kReadChunk) return Close();
      continue;
    }
    if (n == 0) {
      Close();  // the client went away: a call in progress is cancelled
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) Close();
    return;
  }
}

void HttpConnection::Received(const char* data, size_t n) {
  // Once an error answer is on its way, the connection closes when it is written: what the
  // client still sends is dropped (it would be answered again and again otherwise).
  if (close_when_written_) return;
  pending_in_.append(data, n);
  if (!in_request_) ParsePending();  // else: pipelined, parsed once this answer is out
}

const http_parser_settings& HttpConnection::Settings() {
  static const http_parser_settings settings = [] {
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_message_begin = [](http_parser* p) {
      auto* c = static_cast<HttpConnection*>(p->data);
      if (c->timer_idle_ || c->timer_ == 0) c->ArmTimeout(/*idle=*/false);
      c->url_.clear();
      c->body_.clear();
      c->authorization_.clear();
      c->api_key_.clear();
      c->anthropic_version_.clear();
      c->request_id_.clear();
      c->field_.clear();
      c->value_.clear();
      c->too_large_ = false;
      c->expect_continue_ = false;
      c->head_request_ = false;
      return 0;
    };
    s.on_url = [](http_parser* p, const char* at, size_t len) {
      static_cast<HttpConnection*>(p->data)->url_.append(at, len);
      return 0;
    };
    s.on_header_field = [](http_parser* p, const char* at, size_t len) {
      auto* c = static_cast<HttpConnection*>(p->data);
      if (!c->value_.empty()) c->HeaderDone();
      c->field_.append(at, len);
      return 0;
    };
    s.on_header_value = [](http_parser* p, const char* at, size_t len) {
      static_cast<HttpConnection*>(p->data)->value_.append(at, len);
      return 0;
    };
    s.on_headers_complete = [](http_parser* p) {
      auto* c = static_cast<HttpConnection*>(p->data);
      if (!c->field_.empty()) c->HeaderDone();
      // Errors from here on (a 413 too) are in the shape of the API the path is.
      const std::string_view path = std::string_view(c->url_).substr(0, c->url_.find('?'));
      c->anthropic_ = path.starts_with("/v1/messages") ||
                      (path.starts_with("/v1/models") && !c->anthropic_version_.empty());
      const auto max = static_cast<uint64_t>(c->ctx_->options->proxy.max_message_bytes);
      if (p->content_length != ULLONG_MAX && p->content_length > max) c->too_large_ = true;
      // RFC 9110 10.1.1: the client waits for this before sending the body. A body too large
      // gets the 413 instead (ParsePending), with no 100 before it.
      const bool http11 = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);
      if (c->expect_continue_ && http11 && !c->too_large_)
        c->Write("HTTP/1.1 100 Continue\r\n\r\n");
      return 0;
    };
    s.on_body = [](http_parser* p, const char* at, size_t len) {
      auto* c = static_cast<HttpConnection*>(p->data);
      const auto max = static_cast<size_t>(c->ctx_->options->proxy.max_message_bytes);
      if (c->too_large_ || c->body_.size() + len > max) {
        c->too_large_ = true;
        c->body_.clear();
        return 0;
      }
      c->body_.append(at, len);
      return 0;
    };
    s.on_message_complete = [](http_parser* p) {
      auto* c = static_cast<HttpConnection*>(p->data);
      c->keep_alive_ = http_should_keep_alive(p) != 0;
      c->chunked_ = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);
      c->in_request_ = true;
      c->DisarmTimeout();  // answering: the request's deadline governs
      http_parser_pause(p, 1);
      return 0;
    };
    return s;
  }();
  return settings;
}

void HttpConnection::ParsePending() {
  if (parsing_) return;  // called back from Handle: the loop below goes on
  parsing_ = true;
  size_t at = 0;
  // A loop, not a recursion: requests answered at once (health, errors) may be pipelined by the
  // thousand behind one call.
  while (at < pending_in_.size() && !in_request_ && !close_when_written_ && !closed_) {
    at += http_parser_execute(&parser_, &Settings(), pending_in_.data() + at,
                              pending_in_.size() - at);
    const auto err = HTTP_PARSER_ERRNO(&parser_);
    if (err == HPE_PAUSED) http_parser_pause(&parser_, 0);
    // A complete request is answered, unless its body was too large (all of it may have come in
    // one read): the 413 below.
    if (err == HPE_PAUSED && !too_large_) {
      Handle();  // answered at once (in_request_ false again), or a call started
      continue;
    }
    if (err != HPE_OK && err != HPE_PAUSED) {
      keep_alive_ = false;
      ApiError e;
      e.message = absl::StrCat("malformed HTTP request: ", http_errno_description(err));
      RespondError(e);
      close_when_written_ = true;
      break;
    }
    if (too_large_) {
      // Answered before reading a body that would not be kept; the connection then closes.
      keep_alive_ = false;
      ApiError e;
      e.http_status = 413;
      e.message = absl::StrCat("request body larger than ", ctx_->options->proxy.max_message_bytes,
                               " bytes (proxy.max_message_bytes)");
      RespondError(e);
      close_when_written_ = true;
      break;
    }
  }
  if (close_when_written_) {
    pending_in_.clear();
  } else {
    pending_in_.erase(0, at);
  }
  parsing_ = false;
}

void HttpConnection::HeaderDone() {
  const std::string field = absl::AsciiStrToLower(field_);
  if (field == "authorization") authorization_ = value_;
  if (field == "x-api-key") api_key_ = std::string(absl::StripAsciiWhitespace(value_));
  if (field == "anthropic-version") anthropic_version_ = value_;
  if (field == "x-request-id") request_id_ = std::string(absl::StripAsciiWhitespace(value_));
  if (field == "expect" &&
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(value_)) == "100-continue") {
    expect_continue_ = true;
  }
  field_.clear();
  value_.clear();
}

void HttpConnection::TakeApiKey() {
  if (api_key_.empty()) return;
  // Anthropic's SDKs send the key as x-api-key: the bearer token where Authorization is absent,
  // or where it is wrong and the key is right (a gateway's Authorization in front of ours).
  std::string bearer = absl::StrCat("Bearer ", api_key_);
  const RelaySecurity* security = ctx_->options->security;
  if (authorization_.empty() ||
      (security != nullptr && security->token_required() &&
       !security->TokenMatches(authorization_) && security->TokenMatches(bearer))) {
    authorization_ = std::move(bearer);
  }
}

bool HttpConnection::AcceptRequestId() {
  constexpr size_t kMaxRequestId = 128;  // GenerateRequest.request_id's bound
  const bool printable = std::all_of(request_id_.begin(), request_id_.end(),
                                     [](char ch) { return ch >= 0x20 && ch <= 0x7E; });
  if (printable && request_id_.size() <= kMaxRequestId) {
    reply_id_ = request_id_;
    return true;
  }
  ApiError e;
  e.param = "X-Request-Id";
  e.message = absl::StrCat("the X-Request-Id header must be at most ", kMaxRequestId,
                           " printable ASCII characters");
  RespondError(e);
  return false;
}

void HttpConnection::Handle() {
  const auto method = static_cast<http_method>(parser_.method);
  head_request_ = method == HTTP_HEAD;
  if (ctx_->draining) keep_alive_ = false;  // answered, then closed: the client goes elsewhere
  if (!AcceptRequestId()) return RequestDone();
  std::string path = url_.substr(0, url_.find('?'));
  if (path.size() > 1 && path.back() == '/') path.pop_back();
  ApiError e;
  const bool chat = path == "/v1/chat/completions";
  const bool completion = path == "/v1/completions";
  const bool responses = path == "/v1/responses";
  const bool messages = path == "/v1/messages";
  const bool count_tokens = path == "/v1/messages/count_tokens";
  TakeApiKey();
  constexpr std::string_view kModelsPath = "/v1/models";
  const bool models_path = path == kModelsPath || path.starts_with("/v1/models/");
  const bool tokenize = path == "/tokenize", detokenize = path == "/detokenize";
  if (path == "/health") {
    Respond(ctx_->draining ? 503 : 200,
            ctx_->draining ? R"({"status":"draining"})" : R"({"status":"ok"})");
    return RequestDone();
  }
  if (!models_path && !chat && !completion && !responses && !messages && !count_tokens &&
      !tokenize && !detokenize) {
    e.http_status = 404;
    e.message = absl::StrCat("no such path: ", path);
    e.code = "not_found";
    RespondError(e);
    return RequestDone();
  }
  const bool get = method == HTTP_GET || method == HTTP_HEAD;
  if ((models_path && !get) || (!models_path && method != HTTP_POST)) {
    e.http_status = 405;
    e.message = absl::StrCat(path, " takes ", models_path ? "GET" : "POST");
    RespondError(e);
    return RequestDone();
  }
  const RelaySecurity* security = ctx_->options->security;
  if (security != nullptr && security->token_required() &&
      !security->TokenMatches(authorization_)) {
    e.http_status = 401;
    e.type = "authentication_error";
    e.code = "invalid_api_key";
    e.message = authorization_.empty()
                    ? "missing bearer token (Authorization: Bearer ..., or x-api-key)"
                    : "invalid bearer token";
    RespondError(e);
    return RequestDone();
  }
  // Whether the model is served is the pick's to say (NOT_FOUND: a 404 model_not_found, or
  // 503 when no worker is up), as for gRPC: nothing here looks at the pool per request.
  if (models_path) return ListModels(std::string_view(path).substr(kModelsPath.size()));
  if (tokenize || detokenize) return HandleTokenize(tokenize);
  if (count_tokens) return HandleCountTokens();
  openai::ParseOptions parse_options;
  parse_options.ignore_unknown_fields = ctx_->options->http_ignore_unknown_fields;
  const ApiKind kind = chat        ? ApiKind::kChat
                       : responses ? ApiKind::kResponses
                       : messages  ? ApiKind::kMessages
                                   : ApiKind::kCompletion;
  auto parsed = openai::ParseOpenAiRequest(kind, body_, &e, parse_options);
  if (!parsed.ok()) {
    RespondError(e);
    return RequestDone();
  }
  StartCall(*std::move(parsed));
}

void HttpConnection::ListModels(std::string_view name) {
  // Each name once, with the longest prompt + output every worker serving it accepts (vLLM's
  // max_model_len: the smallest of their max_context_tokens; 0 where none reports one).
  openai::ServedModels models;
  const auto add = [&models](const std::string& m, uint32_t context) {
    auto [it, fresh] = models.emplace(m, context);
    if (!fresh && context > 0 && (it->second == 0 || context < it->second)) it->second = context;
  };
  for (const WorkerView& v : ctx_->pool->Snapshot()) {
    // Ejected workers count: the pick falls back to them when no other can serve.
    if (!v.healthy || v.report.draining) continue;
    if (!v.report.model.empty()) add(v.report.model, v.report.max_context_tokens);
    for (const std::string& m : v.report.served_names) add(m, v.report.max_context_tokens);
  }
  const openai::ModelsShape shape{.anthropic = anthropic_, .created = kStartedAt};
  if (!name.empty()) {  // "/{name}"
    const std::string model = PercentDecode(name.substr(1));
    if (const auto it = models.find(model); it != models.end()) {
      Respond(200, openai::ModelBody(model, it->second, shape));
    } else {
      ApiError e;
      e.http_status = 404;
      e.code = "model_not_found";
      e.param = "model";
      e.message = absl::StrCat("the model '", model, "' is not served here");
      RespondError(e);
    }
    return RequestDone();
  }
  Respond(200, openai::ModelsListBody(models, shape));
  RequestDone();
}

void HttpConnection::HandleTokenize(bool tokenize) {
  ApiError e;
  openai::ParseOptions options;
  options.ignore_unknown_fields = ctx_->options->http_ignore_unknown_fields;
  std::string message;
  if (tokenize) {
    auto r = openai::ParseTokenizeBody(body_, &e, options);
    if (r.ok()) message = r->SerializeAsString();
  } else {
    auto r = openai::ParseDetokenizeBody(body_, &e, options);
    if (r.ok()) message = r->SerializeAsString();
  }
  if (!e.message.empty()) {
    RespondError(e);
    return RequestDone();
  }
  StartUnary(tokenize ? kTokenizePath : kDetokenizePath, message);
}

void HttpConnection::HandleCountTokens() {
  ApiError e;
  openai::ParseOptions options;
  options.ignore_unknown_fields = ctx_->options->http_ignore_unknown_fields;
  auto parsed = openai::ParseMessagesRequest(body_, &e, options, /*count_tokens=*/true);
  if (!parsed.ok()) {
    RespondError(e);
    return RequestDone();
  }
  llm::v1::TokenizeRequest r;
  r.set_model(parsed->request.model());
  *r.mutable_chat() = parsed->request.chat();
  count_tokens_ = true;
  StartUnary(kTokenizePath, r.SerializeAsString());
}

}  // namespace llm::router::relay
