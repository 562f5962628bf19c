#include "common/periodic_thread.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(PeriodicThreadTest, TicksEveryIntervalUntilStopped) {
  std::atomic<int> ticks{0};
  PeriodicThread t("test-tick", std::chrono::milliseconds(1), [&] { ++ticks; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ticks.load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_GE(ticks.load(), 3);
  t.Stop();
  const int after = ticks.load();
  t.Stop();  // idempotent
  EXPECT_EQ(ticks.load(), after) << "no tick after Stop returned";
}

// Stop wakes the thread: it does not wait out the interval, and no tick runs.
TEST(PeriodicThreadTest, StopDoesNotWaitForTheInterval) {
  std::atomic<int> ticks{0};
  const auto start = std::chrono::steady_clock::now();
  {
    PeriodicThread t("test-idle", std::chrono::hours(1), [&] { ++ticks; });
  }
  EXPECT_EQ(ticks.load(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
}

}  // namespace
}  // namespace llm
