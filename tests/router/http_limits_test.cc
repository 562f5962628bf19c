// The OpenAI front's defences against slow, idle and too many clients (router.http_*): a
// slowloris crowd trickling header bytes is closed within the read timeout while a
// well-behaved client is served throughout; an idle keep-alive connection is closed, a long
// streaming answer is not; past the connection caps a new connection gets 503 with
// Retry-After; the router counts each in its metrics.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/router_server.h"
#include "tests/router/http_test_util.h"
#include "tests/test_util.h"
#include "tools/fake_worker/fake_worker.h"

namespace llm::router {
namespace {

using tools::FakeBehaviour;
using tools::FakeWorker;

// Raises the soft descriptor limit to the hard one; the descriptors the process may open.
rlim_t RaiseFdLimit() {
  rlimit l{};
  ::getrlimit(RLIMIT_NOFILE, &l);
  l.rlim_cur = l.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &l);
  ::getrlimit(RLIMIT_NOFILE, &l);
  return l.rlim_cur;
}

// Whether the router closed `fd`: a read sees the end (or a reset).
bool ClosedByPeer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char buf[256];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

class HttpLimitsTest : public ::testing::Test {
 protected:
  void StartRouter(const HttpLimits& limits) {
    worker_ = FakeWorker::Start(behaviour_);
    RouterConfig c;
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "";
    c.http_listen = "127.0.0.1:0";
    c.http_limits = limits;
    c.workers = {worker_->address()};
    c.threads = 2;
    router_ = std::make_unique<RouterServer>(c);
    ASSERT_TRUE(router_->Start().ok());
    ASSERT_TRUE(llm::testing::WaitFor(
        [&] {
          for (const auto& v : router_->pool().Snapshot()) {
            if (v.healthy && v.fresh && !v.report.model.empty()) return true;
          }
          return false;
        },
        std::chrono::seconds(10)));
  }
  int Connect() { return llm::testing::ConnectLoopback(router_->http_port()); }
  // One completion on a fresh connection: its status.
  int Complete() {
    const int fd = Connect();
    Send(fd, Post("/v1/completions", R"({"model": "fake-model", "prompt": "x"})"));
    const HttpReply r = ReadReply(fd);
    ::close(fd);
    return r.status;
  }

  FakeBehaviour behaviour_;
  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<RouterServer> router_;
};

// 2,000 connections that never finish their headers (each sends a byte every 0.2 s) are all
// closed within the 2 s read timeout (plus the loop's slack), while a client sending whole
// requests is answered throughout.
TEST_F(HttpLimitsTest, SlowlorisConnectionsAreClosedWithinTheReadTimeout) {
  const rlim_t fds = RaiseFdLimit();
  const int crowd = static_cast<int>(std::min<rlim_t>(2000, (fds - 200) / 2));
  ASSERT_GE(crowd, 500) << "descriptor limit " << fds;
  HttpLimits limits;
  limits.read_timeout_seconds = 2;
  limits.max_connections = 0;
  limits.max_connections_per_client = 0;
  StartRouter(limits);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: test\r\nX-Slow: ";
  std::vector<int> slow;
  for (int i = 0; i < crowd; ++i) {
    const int fd = Connect();
    ASSERT_GE(fd, 0) << "connection " << i;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<bool> closed(slow.size(), false);
  size_t open = slow.size();
  int served = 0, failed = 0;
  auto tick = start;
  const bool all_closed = llm::testing::WaitFor(
      [&] {
        if (std::chrono::steady_clock::now() >= tick) {  // trickle, and a good request
          tick += std::chrono::milliseconds(200);
          for (size_t i = 0; i < slow.size(); ++i) {
            if (!closed[i]) (void)::send(slow[i], "a", 1, MSG_NOSIGNAL);
          }
          (Complete() == 200 ? served : failed) += 1;
        }
        for (size_t i = 0; i < slow.size(); ++i) {
          if (!closed[i] && ClosedByPeer(slow[i])) {
            closed[i] = true;
            --open;
          }
        }
        return open == 0;
      },
      std::chrono::seconds(8));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(all_closed) << open << " of " << slow.size() << " still open after " << seconds
                          << " s";
  EXPECT_GE(seconds, 1.5);  // not before the timeout
  EXPECT_GT(served, 3);
  EXPECT_EQ(failed, 0);
  for (int fd : slow) ::close(fd);
  EXPECT_GE(router_->http_stats().read_timeouts, static_cast<uint64_t>(crowd));
  EXPECT_EQ(Complete(), 200);
}

// A keep-alive connection idle past the idle timeout is closed; one whose answer streams for
// longer than either timeout is not.
TEST_F(HttpLimitsTest, IdleKeepAliveClosesButALongStreamDoesNot) {
  behaviour_.messages = 12;
  behaviour_.per_message_delay = std::chrono::milliseconds(150);  // about 1.8 s of stream
  HttpLimits limits;
  limits.read_timeout_seconds = 0.5;
  limits.idle_timeout_seconds = 0.5;
  StartRouter(limits);
  const int fd = Connect();
  Send(fd, Post("/v1/chat/completions", R"({"model": "fake-model", "stream": true,
           "messages": [{"role": "user", "content": "hi"}]})"));
  const HttpReply r = ReadReply(fd);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  bool done = false;
  EXPECT_EQ(Events(r.body, &done).size(), 13u);
  EXPECT_TRUE(done);
  // Now idle: closed after about half a second.
  EXPECT_TRUE(llm::testing::WaitFor([&] { return ClosedByPeer(fd); }, std::chrono::seconds(5)));
  ::close(fd);
  EXPECT_EQ(router_->http_stats().idle_timeouts, 1u);
  EXPECT_EQ(router_->http_stats().read_timeouts, 0u);
}

// Past max_connections (and, separately, the per-client cap) a new connection is answered 503
// with Retry-After and closed; once one closes, connections are taken again.
TEST_F(HttpLimitsTest, ConnectionsPastTheCapsGet503) {
  HttpLimits limits;
  limits.max_connections = 20;
  limits.max_connections_per_client = 0;
  StartRouter(limits);
  std::vector<int> held;
  for (int i = 0; i < 20; ++i) held.push_back(Connect());
  ASSERT_TRUE(llm::testing::WaitFor([&] { return router_->http_stats().open == 20; },
                                    std::chrono::seconds(5)));
  const int extra = Connect();
  const HttpReply refused = ReadReply(extra);
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.headers.find("retry-after: 1"), std::string::npos) << refused.headers;
  EXPECT_NE(refused.body.find("router.http_max_connections"), std::string::npos) << refused.body;
  ::close(extra);
  EXPECT_EQ(router_->http_stats().refused, 1u);
  ::close(held.back());
  held.pop_back();
  ASSERT_TRUE(llm::testing::WaitFor([&] { return router_->http_stats().open == 19; },
                                    std::chrono::seconds(5)));
  EXPECT_EQ(Complete(), 200);
  for (int fd : held) ::close(fd);
  ASSERT_TRUE(llm::testing::WaitFor([&] { return router_->http_stats().open == 0; },
                                    std::chrono::seconds(5)));
}

TEST_F(HttpLimitsTest, ConnectionsPastThePerClientCapGet503) {
  HttpLimits limits;
  limits.max_connections = 0;
  limits.max_connections_per_client = 5;
  StartRouter(limits);
  std::vector<int> held;
  for (int i = 0; i < 5; ++i) held.push_back(Connect());
  ASSERT_TRUE(llm::testing::WaitFor([&] { return router_->http_stats().open == 5; },
                                    std::chrono::seconds(5)));
  const int extra = Connect();
  const HttpReply refused = ReadReply(extra);
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("max_connections_per_client"), std::string::npos) << refused.body;
  ::close(extra);
  EXPECT_EQ(router_->http_stats().refused_per_client, 1u);
  for (int fd : held) ::close(fd);
}

}  // namespace
}  // namespace llm::router
