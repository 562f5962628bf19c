#include "router/pool/discovery.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/router_config.h"

namespace llm::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DiscoveryTest, ParsesStaticLists) {
  auto l = ParseWorkerList(" a:1, b.example:50051 ,[::1]:9,a:1");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(*l, ElementsAre("a:1", "b.example:50051", "[::1]:9"));
  for (const char* bad : {"a", "a:", ":5", "a:b", "a:70000", "[::1]9"}) {
    auto r = ParseWorkerList(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(bad));
  }
}

// NOTE: no test here asks the host's name service for a name: a minimal Debian root has no
// /etc/hosts (so not even "localhost" resolves) and CI may have no DNS. The real resolver is
// checked on numeric addresses, which getaddrinfo answers without any lookup; name changes go
// through an injected resolver.
TEST(DiscoveryTest, ResolvesNumericAddresses) {
  auto v4 = ResolveAll("127.0.0.1:8123");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_THAT(*v4, ElementsAre("127.0.0.1:8123"));
  auto v6 = ResolveAll("[::1]:8123");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_THAT(*v6, ElementsAre("[::1]:8123"));
  auto malformed = ResolveAll("no-port");
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(malformed.status().message()), HasSubstr("'no-port'"));
}

TEST(DiscoveryTest, RefreshesAndKeepsTheLastSetOnFailure) {
  std::mutex mu;
  std::condition_variable cv;
  int resolutions = 0;
  std::vector<std::vector<std::string>> applied;
  // The service's answer changes over time, then its lookups fail.
  auto resolve = [&](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(name, "workers.test:9000");
    const int n = resolutions++;
    cv.notify_all();
    if (n == 0) return std::vector<std::string>{"10.0.0.1:9000"};
    if (n == 1) return std::vector<std::string>{"10.0.0.1:9000", "10.0.0.2:9000"};
    return absl::UnavailableError("cannot resolve workers.test:9000: timeout");
  };
  {
    DnsDiscovery d(
        "workers.test:9000", std::chrono::milliseconds(10),
        [&](const std::vector<std::string>& a) {
          std::lock_guard<std::mutex> lock(mu);
          applied.push_back(a);
        },
        resolve);
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return resolutions >= 4; }))
        << "only " << resolutions << " resolutions";
    lock.unlock();
    EXPECT_THAT(d.last_error(), HasSubstr("discovery.dns: cannot resolve workers.test:9000"));
  }
  // Failed lookups hand nothing over: the pool keeps the last good set.
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_THAT(applied[0], ElementsAre("10.0.0.1:9000"));
  EXPECT_THAT(applied[1], ElementsAre("10.0.0.1:9000", "10.0.0.2:9000"));
}

TEST(RouterConfigTest, KeysAndErrors) {
  auto c = LoadRouterConfig({"--discovery.workers", "127.0.0.1:1,127.0.0.1:2", "--policy.name",
                             "least_in_flight", "--failures.max_attempts", "2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->workers, ElementsAre("127.0.0.1:1", "127.0.0.1:2"));
  EXPECT_EQ(c->policy, "least_in_flight");
  EXPECT_EQ(c->proxy.max_attempts, 2);
  auto none = LoadRouterConfig({});
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("discovery.workers"));
  auto both = LoadRouterConfig({"--discovery.workers", "a:1", "--discovery.dns", "b:2"});
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("exactly one"));
  auto policy = LoadRouterConfig({"--discovery.dns", "b:2", "--policy.name", "random"});
  EXPECT_THAT(std::string(policy.status().message()), HasSubstr("policy.name"));
  auto list = LoadRouterConfig({"--discovery.workers", "nohost"});
  EXPECT_THAT(std::string(list.status().message()), HasSubstr("'nohost'"));
}

}  // namespace
}  // namespace llm::router
