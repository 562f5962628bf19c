#include "common/metrics_http/metrics_http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace llm {

namespace {

// The host part of "host:port" or "[v6]:port", and the address a local connection to a socket
// bound there uses: a wildcard is reached on loopback.
std::string WakeHost(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0" || host == "*") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

// Opens and closes one TCP connection to host:port, waiting at most 50 ms for it (a refused or
// dropped one is fine: the caller knocks again).
void Knock(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    bool connected = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!connected && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      connected = ::poll(&p, 1, 50) == 1 &&
                  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
    if (connected) break;
  }
  freeaddrinfo(res);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, const std::string& key,
    std::shared_ptr<prometheus::Collectable> collectable) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(key, ": cannot listen on ", listen,
                                               " (in use, or not an address of this host)"));
  }
  exposer->RegisterCollectable(collectable);
  const auto ports = exposer->GetListeningPorts();
  const int port = ports.empty() ? 0 : ports.front();
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(std::move(exposer), WakeHost(listen), port));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<prometheus::Exposer> exposer,
                                     std::string wake_host, int port)
    : exposer_(std::move(exposer)), wake_host_(std::move(wake_host)), port_(port) {}

MetricsHttpServer::~MetricsHttpServer() {
  // The stop flag is set inside the Exposer's destructor, so knock until it has returned: the
  // first knock after the flag ends the acceptor's poll.
  std::atomic<bool> stopped{false};
  std::thread knocker([&] {
    while (!stopped.load()) {
      Knock(wake_host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped.store(true);
  knocker.join();
}

}  // namespace llm
