#include "router/http/http_front.h"

#include <http_parser.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <future>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "llm/v1/generation.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "router/http/openai_api.h"
#include "router/relay/event_loop.h"
#include "router/relay/relay_server.h"
#include "router/relay/security.h"

namespace llm::router::http {

using relay::Clock;
using relay::EventLoop;
using relay::FdHandler;

namespace {

// Stop reading a call's responses beyond this much output not yet written (a slow client).
constexpr size_t kMaxBuffered = 1 << 20;
constexpr size_t kReadChunk = 64 * 1024;

std::atomic<uint64_t> g_next_id{1};

std::string NewId(const char* prefix) {
  return absl::StrCat(prefix, absl::Hex(static_cast<uint64_t>(std::time(nullptr)), absl::kZeroPad8),
                      absl::Hex(g_next_id.fetch_add(1), absl::kZeroPad8));
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
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

}  // namespace

class Connection;

struct HttpFront::Loop {
  EventLoop loop;
  HttpFront* front = nullptr;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<llm::v1::Generation::Stub> stub;
  std::set<Connection*> connections;
  std::atomic<int64_t> calls{0};        // Call objects alive (they post to this loop)
  std::unique_ptr<FdHandler> acceptor;  // on the first loop
};

// One Generate call through the relay. Its gRPC callbacks post to the connection's loop; it is
// deleted there, by the task that OnDone posts (gRPC's last callback).
class Call final : public grpc::ClientReadReactor<llm::v1::GenerateResponse> {
 public:
  Call(HttpFront::Loop* loop, Connection* conn, ParsedRequest request)
      : loop_(loop),
        conn_(conn),
        request_(std::move(request)),
        responder_(request_, NewId(request_.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                   static_cast<int64_t>(std::time(nullptr))) {
    loop_->calls.fetch_add(1);
  }
  ~Call() override { loop_->calls.fetch_sub(1); }

  void Start(const std::string& authorization) {
    if (!authorization.empty()) ctx_.AddMetadata("authorization", authorization);
    loop_->stub->async()->Generate(&ctx_, &request_.request, this);
    // Held until no more reads will be started: OnDone must not run while a message is on
    // its way to the loop, which then starts the next read.
    AddHold();
    read_pending_ = true;
    StartRead(&response_);
    StartCall();
  }

  // gRPC threads.
  void OnReadDone(bool ok) override {
    if (!ok) {
      ReleaseHold();  // the status follows in OnDone
      return;
    }
    auto m = std::make_shared<llm::v1::GenerateResponse>(std::move(response_));
    loop_->loop.Post([this, m] { OnMessage(*m); });
  }
  void OnDone(const grpc::Status& status) override {
    loop_->loop.Post([this, status] { Finished(status); });
  }

  // Loop thread: the client went away.
  void Detach() {
    conn_ = nullptr;
    ctx_.TryCancel();
    if (!read_pending_) ReleaseHold();  // else the read's completion releases it
  }
  // Loop thread: the connection's output drained below the bound.
  void Resume() {
    if (want_read_ && !read_pending_) {
      want_read_ = false;
      read_pending_ = true;
      StartRead(&response_);
    }
  }

 private:
  void OnMessage(const llm::v1::GenerateResponse& m);
  void Finished(const grpc::Status& status);
  void ReleaseHold() {
    if (!hold_released_.exchange(true)) RemoveHold();
  }

  HttpFront::Loop* loop_;
  Connection* conn_;
  ParsedRequest request_;
  OpenAiResponder responder_;
  grpc::ClientContext ctx_;
  llm::v1::GenerateResponse response_;
  bool read_pending_ = false;
  bool want_read_ = false;
  bool headers_sent_ = false;
  std::atomic<bool> hold_released_{false};
};

class Connection final : public FdHandler {
 public:
  Connection(HttpFront::Loop* loop, int fd, const HttpFrontOptions* options, WorkerPool* pool,
             const std::atomic<bool>* draining)
      : loop_(loop), fd_(fd), options_(options), pool_(pool), draining_(draining) {
    http_parser_init(&parser_, HTTP_REQUEST);
    parser_.data = this;
    loop_->connections.insert(this);
    loop_->loop.Add(fd_, EPOLLIN | EPOLLRDHUP, this);
  }
  ~Connection() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void OnEvents(uint32_t events) override {
    if (closed_) return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ReadAll();
    if (!closed_ && (events & EPOLLOUT)) Flush();
  }

  void Flush() override {
    if (closed_) return;
    while (out_offset_ < out_.size()) {
      const ssize_t w =
          ::send(fd_, out_.data() + out_offset_, out_.size() - out_offset_, MSG_NOSIGNAL);
      if (w > 0) {
        out_offset_ += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      Close();
      return;
    }
    if (out_offset_ == out_.size()) {
      out_.clear();
      out_offset_ = 0;
      if (close_when_written_) {
        Close();
        return;
      }
    }
    const bool want = out_offset_ < out_.size();
    if (want != want_out_) {
      want_out_ = want;
      loop_->loop.Modify(fd_, EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u), this);
    }
    if (call_ != nullptr && out_.size() - out_offset_ < kMaxBuffered) call_->Resume();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    loop_->loop.Remove(fd_);
    ::shutdown(fd_, SHUT_RDWR);
    if (call_ != nullptr) {
      call_->Detach();
      call_ = nullptr;
    }
    loop_->connections.erase(this);
    loop_->loop.DeleteLater(std::unique_ptr<FdHandler>(this));
  }

  // From the call (loop thread).
  void Write(std::string_view bytes) {
    if (out_offset_ > 0 && out_offset_ == out_.size()) {
      out_.clear();
      out_offset_ = 0;
    }
    out_.append(bytes);
    loop_->loop.MarkDirty(this);
  }
  void WriteChunk(std::string_view bytes) {
    if (bytes.empty()) return;
    if (!chunked_) return Write(bytes);  // HTTP/1.0: the body ends when the connection does
    Write(absl::StrCat(absl::Hex(bytes.size()), "\r\n", std::string(bytes), "\r\n"));
  }
  bool Congested() const { return out_.size() - out_offset_ >= kMaxBuffered; }
  // A whole response, with Content-Length.
  void Respond(int status, std::string_view body, const std::vector<std::string>& extra = {}) {
    std::string head =
        absl::StrCat("HTTP/1.1 ", status, " ", Reason(status),
                     "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(), "\r\n");
    for (const auto& h : extra) absl::StrAppend(&head, h, "\r\n");
    if (!keep_alive_) head += "Connection: close\r\n";
    head += "\r\n";
    Write(head);
    Write(body);
  }
  void RespondError(const ApiError& e) {
    std::vector<std::string> extra;
    if (e.http_status == 429) {
      extra.push_back(
          absl::StrCat("Retry-After: ", (std::max<int64_t>(e.retry_after_ms, 1) + 999) / 1000));
    }
    if (e.http_status == 401) extra.push_back("WWW-Authenticate: Bearer");
    Respond(e.http_status, OpenAiErrorBody(e), extra);
  }
  void StartStream() {
    if (!chunked_) keep_alive_ = false;
    Write(absl::StrCat(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
        chunked_ ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n", "\r\n"));
  }
  void EndStream() {
    if (chunked_) Write("0\r\n\r\n");
  }
  // The response to the current request is complete: take the next one.
  void RequestDone() {
    call_ = nullptr;
    if (!keep_alive_) {
      close_when_written_ = true;
      loop_->loop.MarkDirty(this);
      return;
    }
    in_request_ = false;
    if (!pending_in_.empty()) {
      std::string rest = std::move(pending_in_);
      pending_in_.clear();
      Parse(rest.data(), rest.size());
    }
  }

 private:
  void ReadAll() {
    char buf[kReadChunk];
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n > 0) {
        if (in_request_) {
          pending_in_.append(buf, static_cast<size_t>(n));  // pipelined: parsed after this one
          if (pending_in_.size() > static_cast<size_t>(options_->max_body_bytes) + kReadChunk) {
            Close();
            return;
          }
        } else {
          Parse(buf, static_cast<size_t>(n));
          if (closed_) return;
        }
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

  void Parse(const char* data, size_t n) {
    static const http_parser_settings settings = [] {
      http_parser_settings s;
      http_parser_settings_init(&s);
      s.on_message_begin = [](http_parser* p) {
        auto* c = static_cast<Connection*>(p->data);
        c->url_.clear();
        c->body_.clear();
        c->authorization_.clear();
        c->field_.clear();
        c->value_.clear();
        c->too_large_ = false;
        return 0;
      };
      s.on_url = [](http_parser* p, const char* at, size_t len) {
        static_cast<Connection*>(p->data)->url_.append(at, len);
        return 0;
      };
      s.on_header_field = [](http_parser* p, const char* at, size_t len) {
        auto* c = static_cast<Connection*>(p->data);
        if (!c->value_.empty()) c->HeaderDone();
        c->field_.append(at, len);
        return 0;
      };
      s.on_header_value = [](http_parser* p, const char* at, size_t len) {
        static_cast<Connection*>(p->data)->value_.append(at, len);
        return 0;
      };
      s.on_headers_complete = [](http_parser* p) {
        auto* c = static_cast<Connection*>(p->data);
        if (!c->field_.empty()) c->HeaderDone();
        if (p->content_length != ULLONG_MAX &&
            p->content_length > static_cast<uint64_t>(c->options_->max_body_bytes)) {
          c->too_large_ = true;
        }
        return 0;
      };
      s.on_body = [](http_parser* p, const char* at, size_t len) {
        auto* c = static_cast<Connection*>(p->data);
        if (c->too_large_ ||
            c->body_.size() + len > static_cast<size_t>(c->options_->max_body_bytes)) {
          c->too_large_ = true;
          c->body_.clear();
          return 0;
        }
        c->body_.append(at, len);
        return 0;
      };
      s.on_message_complete = [](http_parser* p) {
        auto* c = static_cast<Connection*>(p->data);
        c->keep_alive_ = http_should_keep_alive(p) != 0;
        c->chunked_ = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);
        c->in_request_ = true;
        http_parser_pause(p, 1);
        return 0;
      };
      return s;
    }();
    size_t at = 0;
    while (at < n && !closed_) {
      const size_t used = http_parser_execute(&parser_, &settings, data + at, n - at);
      at += used;
      const auto err = HTTP_PARSER_ERRNO(&parser_);
      if (err == HPE_PAUSED) {
        http_parser_pause(&parser_, 0);
        pending_in_.append(data + at, n - at);  // the next requests wait for this one's answer
        Handle();
        return;
      }
      if (err != HPE_OK) {
        keep_alive_ = false;
        ApiError e;
        e.message = absl::StrCat("malformed HTTP request: ", http_errno_description(err));
        RespondError(e);
        close_when_written_ = true;
        return;
      }
      if (too_large_ && !in_request_) {
        // Answer before reading a body we will not keep.
        keep_alive_ = false;
        ApiError e;
        e.http_status = 413;
        e.message = absl::StrCat("request body larger than ", options_->max_body_bytes, " bytes");
        RespondError(e);
        close_when_written_ = true;
        return;
      }
    }
  }

  void HeaderDone() {
    const std::string name = absl::AsciiStrToLower(field_);
    if (name == "authorization") authorization_ = value_;
    field_.clear();
    value_.clear();
  }

  // Answers the complete request in url_, body_.
  void Handle() {
    const auto method = static_cast<http_method>(parser_.method);
    std::string path = url_.substr(0, url_.find('?'));
    if (path.size() > 1 && path.back() == '/') path.pop_back();
    ApiError e;
    if (too_large_) {
      e.http_status = 413;
      e.message = absl::StrCat("request body larger than ", options_->max_body_bytes, " bytes");
      keep_alive_ = false;
      RespondError(e);
      return RequestDone();
    }
    const bool chat = path == "/v1/chat/completions";
    const bool completion = path == "/v1/completions";
    if (path == "/health") {
      if (*draining_) {
        Respond(503, R"({"status":"draining"})");
      } else {
        Respond(200, R"({"status":"ok"})");
      }
      return RequestDone();
    }
    if (path != "/v1/models" && !chat && !completion) {
      e.http_status = 404;
      e.message = absl::StrCat("no such path: ", path);
      e.code = "not_found";
      RespondError(e);
      return RequestDone();
    }
    const bool want_get = path == "/v1/models";
    if ((want_get && method != HTTP_GET) || (!want_get && method != HTTP_POST)) {
      e.http_status = 405;
      e.message = absl::StrCat(path, " takes ", want_get ? "GET" : "POST");
      RespondError(e);
      return RequestDone();
    }
    const RelaySecurity* security = options_->security;
    if (security != nullptr && security->token_required() &&
        !security->TokenMatches(authorization_)) {
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      e.message = authorization_.empty() ? "missing bearer token (Authorization: Bearer ...)"
                                         : "invalid bearer token";
      RespondError(e);
      return RequestDone();
    }
    std::set<std::string> models;
    bool any_worker = false;
    for (const WorkerView& v : pool_->Snapshot()) {
      if (!v.healthy || v.ejected || v.report.draining) continue;
      any_worker = true;
      if (!v.report.model.empty()) models.insert(v.report.model);
    }
    if (want_get) {
      nlohmann::json data = nlohmann::json::array();
      for (const auto& m : models) {
        data.push_back(
            {{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "llm-serving"}});
      }
      Respond(200, nlohmann::json{{"object", "list"}, {"data", data}}.dump());
      return RequestDone();
    }
    auto parsed = ParseOpenAiRequest(chat ? ApiKind::kChat : ApiKind::kCompletion, body_, &e);
    if (!parsed.ok()) {
      RespondError(e);
      return RequestDone();
    }
    if (!any_worker) {
      e.http_status = 503;
      e.type = "service_unavailable";
      e.message = "no worker can take the request";
      RespondError(e);
      return RequestDone();
    }
    if (!models.count(parsed->model)) {
      e.http_status = 404;
      e.param = "model";
      e.code = "model_not_found";
      e.message =
          absl::StrCat("the model '", parsed->model, "' is not served here (GET /v1/models)");
      RespondError(e);
      return RequestDone();
    }
    call_ = new Call(loop_, this, *std::move(parsed));
    call_->Start(authorization_);
  }

  HttpFront::Loop* loop_;
  int fd_;
  const HttpFrontOptions* options_;
  WorkerPool* pool_;
  const std::atomic<bool>* draining_;
  http_parser parser_;
  std::string url_, body_, authorization_, field_, value_;
  bool too_large_ = false;
  bool in_request_ = false;  // a complete request is being answered
  bool keep_alive_ = true;
  bool chunked_ = true;  // HTTP/1.1: streams use chunked transfer encoding
  std::string pending_in_;
  std::string out_;
  size_t out_offset_ = 0;
  bool want_out_ = false;
  bool close_when_written_ = false;
  bool closed_ = false;
  Call* call_ = nullptr;
};

void Call::OnMessage(const llm::v1::GenerateResponse& m) {
  read_pending_ = false;
  if (conn_ == nullptr) {  // cancelled: no more reads; OnDone follows
    ReleaseHold();
    return;
  }
  if (request_.stream) {
    if (!headers_sent_) {
      headers_sent_ = true;
      conn_->StartStream();
    }
    conn_->WriteChunk(responder_.OnStreamMessage(m));
  } else {
    responder_.Accumulate(m);
  }
  if (conn_->Congested()) {
    want_read_ = true;  // Connection::Flush resumes
    return;
  }
  read_pending_ = true;
  StartRead(&response_);
}

void Call::Finished(const grpc::Status& status) {
  if (conn_ != nullptr) {
    if (status.ok()) {
      if (request_.stream) {
        if (!headers_sent_) conn_->StartStream();
        conn_->WriteChunk(responder_.StreamEnd());
        conn_->EndStream();
      } else {
        conn_->Respond(200, responder_.Body());
      }
    } else {
      int64_t pushback = 0;
      const auto& trailers = ctx_.GetServerTrailingMetadata();
      if (const auto it = trailers.find("grpc-retry-pushback-ms"); it != trailers.end()) {
        (void)absl::SimpleAtoi(std::string(it->second.data(), it->second.size()), &pushback);
      }
      const ApiError e =
          ErrorFromGrpc(static_cast<int>(status.error_code()), status.error_message(), pushback);
      if (headers_sent_) {
        conn_->WriteChunk(OpenAiResponder::StreamError(e));
        conn_->EndStream();
      } else {
        conn_->RespondError(e);
      }
    }
    conn_->RequestDone();
  }
  delete this;
}

// Accepts on the first loop and hands connections out in turn.
class Acceptor final : public FdHandler {
 public:
  Acceptor(int fd, std::vector<std::unique_ptr<HttpFront::Loop>>* loops,
           const HttpFrontOptions* options, WorkerPool* pool, const std::atomic<bool>* draining)
      : fd_(fd), loops_(loops), options_(options), pool_(pool), draining_(draining) {}
  void OnEvents(uint32_t) override {
    for (;;) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR) continue;
        return;
      }
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      HttpFront::Loop* l = (*loops_)[next_++ % loops_->size()].get();
      auto* options = options_;
      auto* pool = pool_;
      auto* draining = draining_;
      l->loop.Post([l, c, options, pool, draining] {
        new Connection(l, c, options, pool, draining);  // owned by its loop; deleted on close
      });
    }
  }

 private:
  int fd_;
  std::vector<std::unique_ptr<HttpFront::Loop>>* loops_;
  const HttpFrontOptions* options_;
  WorkerPool* pool_;
  const std::atomic<bool>* draining_;
  size_t next_ = 0;
};

HttpFront::HttpFront(const HttpFrontOptions& options, WorkerPool* pool,
                     std::function<std::shared_ptr<grpc::Channel>()> connect)
    : options_(options), pool_(pool), connect_(std::move(connect)) {}

HttpFront::~HttpFront() { Stop(); }

absl::Status HttpFront::Start() {
  std::string address = options_.listen;
  if (!address.empty() && address[0] == ':') address = "0.0.0.0" + address;
  auto fd = ListenTcp(address, &port_, "router.http_listen");
  if (!fd.ok()) return fd.status();
  listen_fd_ = *fd;
  const int n = std::max(1, options_.threads);
  for (int i = 0; i < n; ++i) {
    auto l = std::make_unique<Loop>();
    l->front = this;
    l->channel = connect_();
    l->stub = llm::v1::Generation::NewStub(l->channel);
    loops_.push_back(std::move(l));
  }
  loops_[0]->acceptor =
      std::make_unique<Acceptor>(listen_fd_, &loops_, &options_, pool_, &draining_);
  loops_[0]->loop.Add(listen_fd_, EPOLLIN, loops_[0]->acceptor.get());
  started_ = true;
  for (auto& l : loops_) {
    Loop* raw = l.get();
    threads_.emplace_back([raw] {
      SetCurrentThreadName("http");
      raw->loop.Run();
    });
  }
  return absl::OkStatus();
}

void HttpFront::StartDrain() {
  if (!started_ || draining_.exchange(true)) return;
  std::promise<void> closed;
  Loop* first = loops_[0].get();
  const int fd = listen_fd_;
  first->loop.Post([first, fd, &closed] {
    first->loop.Remove(fd);
    ::shutdown(fd, SHUT_RDWR);
    closed.set_value();
  });
  closed.get_future().wait();
}

void HttpFront::Stop() {
  if (!started_) return;
  started_ = false;
  for (auto& l : loops_) {
    Loop* raw = l.get();
    raw->loop.Post([raw] {
      const std::set<Connection*> all = raw->connections;
      for (Connection* c : all) c->Close();
    });
  }
  // Cancelled calls post their last task to their loop: let the loops run until every call is
  // gone (gRPC ends a cancelled call promptly; the bound only guards against a stuck channel).
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  for (auto& l : loops_) {
    while (l->calls.load() > 0 && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  for (auto& l : loops_) l->loop.Stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  ::close(listen_fd_);
  listen_fd_ = -1;
  loops_.clear();
}

}  // namespace llm::router::http
