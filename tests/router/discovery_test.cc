#include "router/pool/discovery.h"

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/router_config.h"

namespace llm::router {
namespace {

using ::testing::Contains;
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

TEST(DiscoveryTest, ResolvesNamesAndRefreshes) {
  auto r = ResolveAll("localhost:8123");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, Contains("127.0.0.1:8123"));
  auto bad = ResolveAll("no-such-host.invalid:1");
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no-such-host.invalid"));

  std::atomic<int> calls{0};
  std::vector<std::string> last;
  std::mutex mu;
  {
    DnsDiscovery d("localhost:9000", std::chrono::milliseconds(100),
                   [&](const std::vector<std::string>& a) {
                     std::lock_guard<std::mutex> lock(mu);
                     last = a;
                     ++calls;
                   });
    for (int i = 0; i < 100 && calls < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_GE(calls.load(), 3);  // re-resolved periodically
  EXPECT_THAT(last, Contains("127.0.0.1:9000"));
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
