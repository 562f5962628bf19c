#include "router/relay/relay_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "router/relay/http_connection.h"
#include "router/relay/http_gate.h"
#include "router/relay/relay_internal.h"
#include "router/relay/security.h"

namespace llm::router {

namespace relay {

// Accepts connections on the first loop and hands them to the loops in turn: HTTP/2 (gRPC)
// clients, or (`http`) the OpenAI front's HTTP/1.1 clients.
class Acceptor : public FdHandler {
 public:
  Acceptor(int fd, std::vector<std::unique_ptr<LoopContext>>* loops, bool http = false)
      : fd_(fd), loops_(loops), http_(http) {}
  void OnEvents(uint32_t) override {
    for (;;) {
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof(peer);
      const int c = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                              SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) Pause();  // EMFILE, ENFILE, ENOBUFS...
        return;
      }
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      LoopContext* ctx = (*loops_)[next_++ % loops_->size()].get();
      if (http_) {
        AcceptHttp(ctx, c, PeerAddress(peer));
        continue;
      }
      if (ctx == (*loops_)[0].get()) {
        ctx->AddConnection(std::make_unique<ClientConnection>(ctx, c, NewSsl(ctx)));
      } else {
        SSL* ssl = NewSsl(ctx);
        ctx->loop.Post(
            [ctx, c, ssl] { ctx->AddConnection(std::make_unique<ClientConnection>(ctx, c, ssl)); });
      }
    }
  }

 private:
  // A connection of the OpenAI front: counted by the gate, or refused with a 503 past its caps.
  static void AcceptHttp(LoopContext* ctx, int c, std::string client) {
    const HttpGate::Verdict verdict = ctx->http_gate->Admit(client);
    if (verdict != HttpGate::Verdict::kAdmitted) {
      const RelaySecurity* sec = ctx->options->security;
      if (sec == nullptr || !sec->server_tls()) {  // best effort: it fits the socket's buffer
        const std::string answer = RefusalResponse(verdict);
        (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      }
      ::shutdown(c, SHUT_RDWR);
      ::close(c);
      return;
    }
    const RelaySecurity* sec = ctx->options->security;
    SSL* ssl = sec != nullptr ? sec->NewServerSsl(/*http1=*/true) : nullptr;
    ctx->loop.Post([ctx, c, ssl, client = std::move(client)] {
      new HttpConnection(ctx, c, ssl, client);  // owned by its loop
    });
  }

  static std::string PeerAddress(const sockaddr_storage& peer) {
    char text[INET6_ADDRSTRLEN] = "";
    if (peer.ss_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr, text,
                  sizeof(text));
    } else if (peer.ss_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text,
                  sizeof(text));
    }
    return text[0] != '\0' ? text : "unknown";
  }

  // Out of descriptors: the pending connection would wake the loop again at once, so stop
  // watching the socket for a moment (connections wait in the backlog meanwhile).
  void Pause() {
    LoopContext* first = (*loops_)[0].get();
    first->loop.Remove(fd_);
    first->loop.AddTimer(Clock::now() + std::chrono::milliseconds(100), [this, first] {
      if (!first->draining && !first->stopping) first->loop.Add(fd_, EPOLLIN, this);
    });
  }

  static SSL* NewSsl(LoopContext* ctx) {
    const RelaySecurity* s = ctx->options->security;
    return s != nullptr ? s->NewServerSsl() : nullptr;
  }

  int fd_;
  std::vector<std::unique_ptr<LoopContext>>* loops_;
  bool http_;
  size_t next_ = 0;
};

}  // namespace relay

absl::StatusOr<int> ListenTcp(const std::string& address, int* port, const std::string& key) {
  std::string host, p;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": '", address, "'"));
    }
    host = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": '", address, "' is not host:port"));
    }
    host = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat(key, ": cannot listen on ", address, ": ", gai_strerror(rc)));
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 4096) != 0) {
    const std::string err = std::strerror(errno);
    freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat(key, ": cannot listen on ", address, ": ", err));
  }
  freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

RelayServer::RelayServer(WorkerPool* pool, const Options& options, ProxyObserver* observer)
    : pool_(pool),
      options_(std::make_unique<relay::RelayOptions>()),
      observer_(observer),
      http_gate_(std::make_unique<relay::HttpGate>(options.http_limits)) {
  static_cast<Options&>(*options_) = options;
}

HttpConnectionStats RelayServer::http_stats() const { return http_gate_->stats(); }

RelayServer::~RelayServer() { Stop(); }

absl::Status RelayServer::Start() {
  auto fd = ListenTcp(options_->listen, &port_, "router.listen");
  if (!fd.ok()) return fd.status();
  listen_fd_ = *fd;
  int n = options_->threads > 0 ? options_->threads
                                : static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(1, n);
  for (int i = 0; i < n; ++i) {
    auto ctx = std::make_unique<relay::LoopContext>();
    ctx->pool = pool_;
    ctx->options = options_.get();
    ctx->observer = observer_;
    ctx->in_flight = &in_flight_;
    ctx->http_gate = http_gate_.get();
    loops_.push_back(std::move(ctx));
  }
  acceptor_ = std::make_unique<relay::Acceptor>(listen_fd_, &loops_);
  loops_[0]->loop.Add(listen_fd_, EPOLLIN, acceptor_.get());
  if (!options_->http_listen.empty()) {
    std::string address = options_->http_listen;
    if (address[0] == ':') address = "0.0.0.0" + address;
    auto http = ListenTcp(address, &http_port_, "router.http_listen");
    if (!http.ok()) {
      loops_[0]->loop.Remove(listen_fd_);
      ::close(listen_fd_);
      listen_fd_ = -1;
      loops_.clear();
      return http.status();
    }
    http_fd_ = *http;
    http_acceptor_ = std::make_unique<relay::Acceptor>(http_fd_, &loops_, /*http=*/true);
    loops_[0]->loop.Add(http_fd_, EPOLLIN, http_acceptor_.get());
  }
  for (auto& ctx : loops_) {
    relay::LoopContext* c = ctx.get();
    threads_.emplace_back([c] {
      SetCurrentThreadName("relay");
      c->loop.Run();
    });
  }
  started_ = true;
  return absl::OkStatus();
}

void RelayServer::StartDrain() {
  if (!started_ || draining_) return;
  draining_ = true;
  relay::LoopContext* first = loops_[0].get();
  const int fd = listen_fd_, http_fd = http_fd_;
  std::promise<void> closed;
  first->loop.Post([first, fd, http_fd, &closed] {
    first->draining = true;
    for (const int f : {fd, http_fd}) {
      if (f < 0) continue;
      first->loop.Remove(f);
      ::shutdown(f, SHUT_RDWR);  // connects are refused from now on
    }
    closed.set_value();
  });
  closed.get_future().wait();
  for (auto& ctx : loops_) {
    relay::LoopContext* c = ctx.get();
    c->loop.Post([c] {
      c->draining = true;  // connections handed over later get their GOAWAY in AddConnection
      for (auto& [raw, owned] : c->connections) raw->StartDrain();
    });
  }
}

void RelayServer::Stop() {
  if (!started_) return;
  started_ = false;
  if (!draining_) {
    loops_[0]->loop.Remove(listen_fd_);
    if (http_fd_ >= 0) loops_[0]->loop.Remove(http_fd_);
  }
  for (auto& ctx : loops_) {
    relay::LoopContext* c = ctx.get();
    // Close every connection on its own loop: calls in progress end and free their streams.
    c->loop.Post([c] {
      c->stopping = true;
      const std::set<relay::HttpConnection*> http = c->http_connections;
      for (relay::HttpConnection* conn : http) conn->Close();
      std::vector<relay::H2Connection*> all;
      for (auto& [raw, owned] : c->connections) all.push_back(raw);
      for (relay::H2Connection* conn : all) conn->Close("router stopping");
    });
    c->loop.Stop();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  ::close(listen_fd_);
  listen_fd_ = -1;
  if (http_fd_ >= 0) ::close(http_fd_);
  http_fd_ = -1;
  loops_.clear();
}

}  // namespace llm::router
