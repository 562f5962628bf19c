#include "tests/router/tcp_forwarder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "tests/test_util.h"

namespace llm::testing {

TcpForwarder::TcpForwarder(int target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  // A backlog of one: once accepting stops, two pending connections fill the queue.
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 1) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::abort();
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpForwarder::~TcpForwarder() {
  stop_ = true;
  acceptor_.join();
  for (auto& t : threads_) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) ::close(fd);
  ::close(listen_fd_);
}

void TcpForwarder::StopAccepting() {
  accepting_ = false;
  // Let the acceptor see the flag, then fill the queue (backlog 1 holds two).
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < 2; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fds_.push_back(fd);
  }
}

void TcpForwarder::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (!accepting_ || ::poll(&p, 1, 50) <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (!accepting_) continue;
    const int client = ::accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    const int upstream = ConnectLoopback(target_port_);
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(client);
    if (upstream < 0) continue;
    fds_.push_back(upstream);
    threads_.emplace_back([this, client, upstream] { Pump(client, upstream); });
    threads_.emplace_back([this, client, upstream] { Pump(upstream, client); });
  }
}

void TcpForwarder::Pump(int from, int to) {
  char buf[16384];
  while (!stop_) {
    if (frozen_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    pollfd p{from, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (frozen_) continue;
    const ssize_t n = ::read(from, buf, sizeof(buf));
    if (n <= 0) {
      ::shutdown(to, SHUT_WR);
      return;
    }
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) return;
      off += w;
    }
  }
}

}  // namespace llm::testing
