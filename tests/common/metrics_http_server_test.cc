#include "common/metrics_http/metrics_http_server.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <chrono>

#include "gtest/gtest.h"
#include "tests/grpc_test_util.h"

namespace llm {
namespace {

std::shared_ptr<prometheus::Registry> OneCounter() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("test_things_total").Help("Things.").Register(*registry).Add({});
  return registry;
}

TEST(MetricsHttpServerTest, ServesMetricsAndNamesTheKeyWhenThePortIsTaken) {
  const auto registry = OneCounter();  // the server holds it weakly, as the Exposer does
  auto server = MetricsHttpServer::Start("127.0.0.1:0", "server.metrics_listen", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_NE(llm::testing::HttpGet((*server)->port(), "/metrics").find("test_things_total 0"),
            std::string::npos);
  const std::string taken = "127.0.0.1:" + std::to_string((*server)->port());
  auto second = MetricsHttpServer::Start(taken, "router.metrics_listen", OneCounter());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(), "router.metrics_listen: cannot listen on " + taken +
                                           " (in use, or not an address of this host)");
}

// civetweb checks for a stop between 2 s polls: a server that had served a scrape took 2 s to
// stop (every drained worker and router spent it after its last call). Wildcard and loopback
// binds alike.
TEST(MetricsHttpServerTest, StopsAtOnceAfterAScrape) {
  const auto registry = OneCounter();
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:0"}) {
    auto server = MetricsHttpServer::Start(listen, "server.metrics_listen", registry);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_NE(llm::testing::HttpGet((*server)->port(), "/metrics").find("test_things_total"),
              std::string::npos);
    const auto start = std::chrono::steady_clock::now();
    server->reset();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0)
        << listen;
  }
}

}  // namespace
}  // namespace llm
