#include "common/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(ThreadPoolTest, CoversTheRangeExactlyOnce) {
  ThreadPool pool(4);
  for (size_t n : {0u, 1u, 7u, 100u, 10000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 3, [&](size_t b, size_t e) {
      EXPECT_LE(b, e);
      for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, SingleThreadRunsInline) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.num_threads(), 1);
  size_t calls = 0;
  pool.ParallelFor(50, 1, [&](size_t b, size_t e) {
    ++calls;
    EXPECT_EQ(b, 0u);
    EXPECT_EQ(e, 50u);
  });
  EXPECT_EQ(calls, 1u);
}

TEST(ThreadPoolTest, ManyCallsInARow) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int round = 0; round < 2000; ++round) {
    pool.ParallelFor(64, 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) sum += static_cast<long>(i);
    });
  }
  EXPECT_EQ(sum.load(), 2000L * (63 * 64 / 2));
}

// Both ways of waiting: calls closer together than the spin (workers poll), calls further
// apart (workers sleep and are woken), and chunks slower than the spin (the caller sleeps).
TEST(ThreadPoolTest, SleepingAndPollingWorkersBothWakeForEveryCall) {
  for (auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(50)}) {
    ThreadPool pool(3, spin);
    std::atomic<long> sum{0};
    for (int round = 0; round < 200; ++round) {
      if (round % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
      const bool slow = round % 50 == 7;
      pool.ParallelFor(12, 1, [&](size_t b, size_t e) {
        if (slow && b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        for (size_t i = b; i < e; ++i) sum += static_cast<long>(i);
      });
      ASSERT_EQ(sum.load(), (round + 1) * 66L) << "spin " << spin.count() << " round " << round;
    }
  }
}

}  // namespace
}  // namespace llm
