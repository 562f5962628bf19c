// The worker-facing half of the relay: WorkerConnection (nghttp2 client session to one
// worker) and WorkerAttempt (one attempt of a call).
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "router/pool/discovery.h"
#include "router/pool/worker_addresses.h"
#include "router/relay/grpc_wire.h"
#include "router/relay/h2_util.h"
#include "router/relay/relay_internal.h"
#include "router/relay/security.h"

namespace llm::router::relay {

namespace {

// gRPC's mapping of an HTTP status to a status code (PROTOCOL-HTTP2.md).
int GrpcCodeForHttp(int http) {
  switch (http) {
    case 400:
      return kGrpcInternal;
    case 401:
      return 16;  // UNAUTHENTICATED
    case 403:
      return 7;  // PERMISSION_DENIED
    case 404:
      return 12;  // UNIMPLEMENTED
    case 429:
    case 502:
    case 503:
    case 504:
      return kGrpcUnavailable;
    default:
      return kGrpcUnknown;
  }
}

ssize_t ReadRequestCallback(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                            uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* up = static_cast<WorkerAttempt*>(source->ptr);
  ClientCall* d = up->call_;
  if (d == nullptr) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  const std::string& data = d->request();
  const size_t avail = data.size() - up->request_offset;
  if (avail > 0) {
    const size_t n = std::min(avail, length);
    std::memcpy(buf, data.data() + up->request_offset, n);
    up->request_offset += n;
    if (up->request_offset == data.size() && d->request_done())
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  if (d->request_done()) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  return NGHTTP2_ERR_DEFERRED;
}

const nghttp2_option* ClientOptions() {
  static nghttp2_option* option = [] {
    nghttp2_option* o;
    nghttp2_option_new(&o);
    // Response bytes are credited back as they leave for the client (backpressure).
    nghttp2_option_set_no_auto_window_update(o, 1);
    return o;
  }();
  return option;
}

}  // namespace

// ---- WorkerAttempt ----

void WorkerAttempt::Consume(size_t n) {
  if (n == 0) return;
  nghttp2_session_consume_stream(conn_->session(), stream_id, n);
  conn_->Touch();
}

void WorkerAttempt::Cancel() {
  if (cancelled) return;
  cancelled = true;
  nghttp2_submit_rst_stream(conn_->session(), NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
  conn_->Touch();
}

void WorkerAttempt::ResumeRequest() {
  nghttp2_session_resume_data(conn_->session(), stream_id);
  conn_->Touch();
}

// ---- WorkerConnection ----

WorkerConnection::WorkerConnection(LoopContext* ctx, int fd, SSL* ssl, std::string address,
                                   std::string key)
    : H2Connection(&ctx->loop, fd, ssl),
      ctx_(ctx),
      address_(std::move(address)),
      key_(std::move(key)) {}

WorkerConnection::~WorkerConnection() { CancelTimers(); }

void WorkerConnection::CancelTimers() {
  if (connect_timer_ != 0) ctx_->loop.CancelTimer(connect_timer_);
  if (keepalive_timer_ != 0) ctx_->loop.CancelTimer(keepalive_timer_);
  connect_timer_ = keepalive_timer_ = 0;
}

void WorkerConnection::OnConnectDeadline() {
  connect_timer_ = 0;
  if (!closed() && connecting()) {
    Close(absl::StrCat("connect timed out after ", ctx_->options->proxy.connect_timeout.count(),
                       " ms"));
  }
}

void WorkerConnection::OnKeepalive() {
  keepalive_timer_ = 0;
  if (closed()) return;
  const ProxyOptions& o = ctx_->options->proxy;
  const Clock::time_point now = Clock::now();
  Clock::time_point next = now + o.keepalive;
  if (ping_sent_ && last_read() < *ping_sent_) {
    if (now - *ping_sent_ >= o.keepalive_timeout) {
      Close(absl::StrCat("no answer to a keepalive ping within ", o.keepalive_timeout.count(),
                         " ms"));
      return;
    }
    next = *ping_sent_ + o.keepalive_timeout;
  } else {
    ping_sent_.reset();
    if (!streams_.empty() && !connecting() && now - last_read() >= o.keepalive) {
      nghttp2_submit_ping(session(), NGHTTP2_FLAG_NONE, nullptr);
      Touch();
      ping_sent_ = now;
      next = now + o.keepalive_timeout;
    } else if (!streams_.empty()) {
      next = std::max(now, last_read() + o.keepalive);
    }
  }
  keepalive_timer_ = ctx_->loop.AddTimer(next, [this] { OnKeepalive(); });
}

WorkerConnection* WorkerConnection::Connect(LoopContext* ctx, const std::string& address,
                                            const std::string& key) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) return nullptr;
  // A numeric address is connected to as it is. A host name is connected to at the address
  // discovery resolved it to (WorkerAddresses, kept fresh off the loops), the next of them each
  // time; it is never looked up here, where a slow DNS server would stall the loop's streams.
  std::string ip = host, ip_port = port;
  if (!IsNumericAddress(address)) {
    const std::optional<std::string> resolved =
        ctx->options->addresses != nullptr ? ctx->options->addresses->Next(address) : std::nullopt;
    if (!resolved || !SplitHostPort(*resolved, &ip, &ip_port)) return nullptr;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;  // no lookup: never blocks
  addrinfo* res = nullptr;
  if (getaddrinfo(ip.c_str(), ip_port.c_str(), &hints, &res) != 0 || res == nullptr) {
    return nullptr;
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return nullptr;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return nullptr;
  }
  // The in-process health server is plaintext on loopback; the workers may be TLS.
  const RelaySecurity* security = ctx->options->security;
  SSL* ssl = security != nullptr && address != ctx->options->internal_target
                 ? security->NewUpstreamSsl(host)
                 : nullptr;
  auto* c = new WorkerConnection(ctx, fd, ssl, address, key);
  static const nghttp2_session_callbacks* const callbacks =
      MakeCallbacks({.header = &OnHeader,
                     .frame_recv = &OnFrameRecv,
                     .data_chunk = &OnDataChunk,
                     .stream_close = &OnStreamClose});
  nghttp2_session* session;
  nghttp2_session_client_new2(&session, callbacks, c, ClientOptions());
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
  };
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, 64 << 20);
  ctx->AddConnection(std::unique_ptr<H2Connection>(c));
  ctx->workers[key] = c;
  c->Start(session, /*connecting=*/rc != 0);
  if (rc != 0) {
    c->connect_timer_ = ctx->loop.AddTimer(Clock::now() + ctx->options->proxy.connect_timeout,
                                           [c] { c->OnConnectDeadline(); });
  }
  c->keepalive_timer_ =
      ctx->loop.AddTimer(Clock::now() + ctx->options->proxy.keepalive, [c] { c->OnKeepalive(); });
  return c;
}

WorkerAttempt* WorkerConnection::Submit(ClientCall* call) {
  if (closed() || draining_) return nullptr;
  static const std::string kMethod = ":method", kPost = "POST", kScheme = ":scheme", kHttp = "http",
                           kHttps = "https", kPath = ":path", kAuthority = ":authority";
  const Headers extra = call->WorkerHeaders();
  const bool tls = address_ != ctx_->options->internal_target &&
                   ctx_->options->security != nullptr && ctx_->options->security->upstream_tls();
  std::vector<nghttp2_nv> nva = {Nv(kMethod, kPost), Nv(kScheme, tls ? kHttps : kHttp),
                                 Nv(kPath, call->path()), Nv(kAuthority, address_)};
  for (const auto& [n, v] : extra) nva.push_back(Nv(n, v));
  auto* up = new WorkerAttempt(this, call);
  nghttp2_data_provider prd;
  prd.source.ptr = up;
  prd.read_callback = ReadRequestCallback;
  const int32_t id = nghttp2_submit_request(session(), nullptr, nva.data(), nva.size(), &prd, up);
  if (id < 0) {
    delete up;
    if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) StopTaking();
    return nullptr;
  }
  up->stream_id = id;
  streams_.insert(up);
  Touch();
  return up;
}

void WorkerConnection::StopTaking() {
  draining_ = true;
  auto it = ctx_->workers.find(key_);
  if (it != ctx_->workers.end() && it->second == this) ctx_->workers.erase(it);
}

void WorkerConnection::OnClose(const std::string& why) {
  CancelTimers();
  StopTaking();
  const std::set<WorkerAttempt*> streams = std::move(streams_);
  streams_.clear();
  const std::string message = absl::StrCat("connection to ", address_, " lost: ", why);
  for (WorkerAttempt* up : streams) {
    ClientCall* d = up->call_;
    delete up;
    if (d != nullptr) d->OnWorkerClosed(kGrpcUnavailable, message, {});
  }
  ctx_->Release(this);
}

int WorkerConnection::OnHeader(nghttp2_session* session, const nghttp2_frame* frame,
                               const uint8_t* name, size_t name_len, const uint8_t* value,
                               size_t value_len, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto* up = static_cast<WorkerAttempt*>(
      nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (up == nullptr) return 0;
  std::string n(reinterpret_cast<const char*>(name), name_len);
  std::string v(reinterpret_cast<const char*>(value), value_len);
  if (n == ":status") up->http_status = std::atoi(v.c_str());
  if (n == "grpc-status") {
    const bool numeric =
        !v.empty() && v.size() <= 2 && v.find_first_not_of("0123456789") == std::string::npos;
    up->grpc_status = numeric ? std::atoi(v.c_str()) : kGrpcUnknown;
  }
  if (n == "grpc-message") up->grpc_message = PercentDecode(v);
  const bool trailers_only =
      frame->headers.cat == NGHTTP2_HCAT_RESPONSE && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
  if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE && !trailers_only) {
    up->response_headers.emplace_back(std::move(n), std::move(v));
  } else if (n == ":status" || n == "content-type") {
    up->response_headers.emplace_back(std::move(n), std::move(v));
  } else {
    up->trailers.emplace_back(std::move(n), std::move(v));
  }
  return 0;
}

int WorkerConnection::OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame,
                                  void* user_data) {
  auto* c = static_cast<WorkerConnection*>(user_data);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    c->StopTaking();  // streams above its last id are refused and retried elsewhere
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_RESPONSE ||
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    return 0;
  }
  auto* up = static_cast<WorkerAttempt*>(
      nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (up != nullptr && up->call_ != nullptr) up->call_->OnWorkerHeaders(up->response_headers);
  return 0;
}

int WorkerConnection::OnDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id,
                                  const uint8_t* data, size_t len, void* user_data) {
  // The connection's window is credited at once: only the stream's waits for its client, so a
  // few slow clients cannot stall every other call on the connection.
  nghttp2_session_consume_connection(session, len);
  static_cast<WorkerConnection*>(user_data)->Touch();
  auto* up = static_cast<WorkerAttempt*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (up == nullptr) {
    nghttp2_session_consume_stream(session, stream_id, len);
    return 0;
  }
  if (up->call_ != nullptr) {
    up->call_->OnWorkerData(data, len);
  } else {
    up->Consume(len);
  }
  return 0;
}

int WorkerConnection::OnStreamClose(nghttp2_session* session, int32_t stream_id,
                                    uint32_t error_code, void* user_data) {
  auto* c = static_cast<WorkerConnection*>(user_data);
  auto* up = static_cast<WorkerAttempt*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (up == nullptr) return 0;
  int code;
  std::string message;
  if (up->grpc_status) {
    code = *up->grpc_status;
    message = up->grpc_message;
  } else if (up->cancelled) {
    code = kGrpcCancelled;
    message = "cancelled";
  } else if (error_code == NGHTTP2_REFUSED_STREAM) {
    code = kGrpcUnavailable;
    message = absl::StrCat("worker ", c->address_, " refused the stream");
  } else if (up->http_status != 0 && up->http_status != 200) {
    code = GrpcCodeForHttp(up->http_status);
    message = absl::StrCat("HTTP status ", up->http_status, " from ", c->address_);
  } else {
    code = kGrpcUnavailable;
    message = absl::StrCat("stream reset by ", c->address_, " (",
                           nghttp2_http2_strerror(error_code), ")");
  }
  // A stream refused unprocessed (above a GOAWAY's last id, or REFUSED_STREAM) is retried but
  // not held against the worker (it is draining).
  const bool refused = error_code == NGHTTP2_REFUSED_STREAM && !up->grpc_status;
  c->streams_.erase(up);
  ClientCall* d = up->call_;
  const Headers trailers = std::move(up->trailers);
  delete up;
  if (d != nullptr) d->OnWorkerClosed(code, message, trailers, /*worker_fault=*/!refused);
  return 0;
}

// ---- LoopContext ----

WorkerConnection* LoopContext::Worker(const std::string& address, uint32_t lane) {
  if (stopping) return nullptr;
  const std::string key = lane == 0 ? address : absl::StrCat(address, "#", lane);
  auto it = workers.find(key);
  if (it != workers.end() && !it->second->closed() && !it->second->draining()) return it->second;
  return WorkerConnection::Connect(this, address, key);
}

void LoopContext::AddConnection(std::unique_ptr<H2Connection> c) {
  H2Connection* raw = c.get();
  connections.emplace(raw, std::move(c));
  if (draining) raw->StartDrain();
}

void LoopContext::Release(H2Connection* c) {
  for (auto it = workers.begin(); it != workers.end(); ++it) {
    if (it->second == c) {
      workers.erase(it);
      break;
    }
  }
  auto it = connections.find(c);
  if (it == connections.end()) return;
  loop.DeleteLater(std::move(it->second));
  connections.erase(it);
}

}  // namespace llm::router::relay
