// WorkerAddresses (router/pool/worker_addresses.h): where the relay connects for a worker named
// by host name, filled off the event loops.
#include "router/pool/worker_addresses.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace llm::router {
namespace {

// Each connection takes the next address in turn; a name not resolved yet has none; a new list
// starts from its first address, the same list keeps its turn, and an empty one changes nothing.
TEST(WorkerAddressesTest, ConnectionsTakeTheAddressesInTurn) {
  WorkerAddresses a;
  EXPECT_FALSE(a.Next("worker-0.llm:50051").has_value());
  a.Set("worker-0.llm:50051", {"10.0.0.1:50051", "[fd00::1]:50051"});
  EXPECT_EQ(a.Next("worker-0.llm:50051"), "10.0.0.1:50051");
  EXPECT_EQ(a.Next("worker-0.llm:50051"), "[fd00::1]:50051");
  EXPECT_EQ(a.Next("worker-0.llm:50051"), "10.0.0.1:50051");
  a.Set("worker-0.llm:50051", {"10.0.0.1:50051", "[fd00::1]:50051"});  // a refresh, unchanged
  EXPECT_EQ(a.Next("worker-0.llm:50051"), "[fd00::1]:50051");
  a.Set("worker-0.llm:50051", {});  // resolved to nothing: the last addresses stay
  EXPECT_EQ(a.Next("worker-0.llm:50051"), "10.0.0.1:50051");
  a.Set("worker-0.llm:50051", {"10.0.0.7:50051", "10.0.0.8:50051"});  // moved
  EXPECT_EQ(a.Next("worker-0.llm:50051"), "10.0.0.7:50051");
  EXPECT_FALSE(a.Next("worker-1.llm:50051").has_value());  // names are separate
}

// A resolver thread replacing the list while loops take addresses: every answer is one of the
// lists' addresses (the race detector of a sanitizer build sees the rest).
TEST(WorkerAddressesTest, RefreshesWhileLoopsConnect) {
  WorkerAddresses a;
  a.Set("w:1", {"10.0.0.1:1"});
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      a.Set("w:1", i % 2 == 0 ? std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1"}
                              : std::vector<std::string>{"10.0.0.3:1"});
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        const auto next = a.Next("w:1");
        if (!next || (*next != "10.0.0.1:1" && *next != "10.0.0.2:1" && *next != "10.0.0.3:1")) {
          ++bad;
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  stop = true;
  writer.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(WorkerAddressesTest, NumericAddressesNeedNoLookup) {
  EXPECT_TRUE(IsNumericAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsNumericAddress("[::1]:50051"));
  EXPECT_TRUE(IsNumericAddress("[fd00::1:2]:8000"));
  EXPECT_FALSE(IsNumericAddress("worker-0.llm:50051"));
  EXPECT_FALSE(IsNumericAddress("localhost:50051"));
  EXPECT_FALSE(IsNumericAddress("127.1:50051"));  // inet_aton's short form is a name here
  EXPECT_FALSE(IsNumericAddress("127.0.0.1"));    // no port
  EXPECT_FALSE(IsNumericAddress("[::1]"));
  EXPECT_FALSE(IsNumericAddress(""));
}

}  // namespace
}  // namespace llm::router
