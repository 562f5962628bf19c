#include "worker/loop/end_interval.h"

#include "gtest/gtest.h"

namespace llm::loop {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(EndIntervalTest, FallbackUntilAGapWithinABusyPeriod) {
  EndInterval e;
  EXPECT_EQ(e.seconds(1.0), 1.0);
  const auto t0 = EndInterval::Clock::time_point{} + seconds(100);
  e.OnEnd(t0);
  EXPECT_EQ(e.seconds(1.0), 1.0);  // one end is no gap
  e.OnEnd(t0 + milliseconds(200));
  EXPECT_DOUBLE_EQ(e.seconds(1.0), 0.2);
  e.OnEnd(t0 + milliseconds(300));
  EXPECT_DOUBLE_EQ(e.seconds(1.0), 0.9 * 0.2 + 0.1 * 0.1);
}

// A quiet hour between two bursts leaves the mean as the bursts made it: it was averaged in,
// and a full worker then told clients to retry in minutes.
TEST(EndIntervalTest, IdleTimeIsNotAGap) {
  EndInterval e;
  auto t = EndInterval::Clock::time_point{} + seconds(100);
  for (int i = 0; i < 20; ++i) e.OnEnd(t += milliseconds(50));
  EXPECT_NEAR(e.seconds(1.0), 0.05, 1e-9);
  e.OnIdle();
  t += std::chrono::hours(1);
  e.OnEnd(t);  // the first end of the next burst
  EXPECT_NEAR(e.seconds(1.0), 0.05, 1e-9);
  e.OnEnd(t += milliseconds(50));
  EXPECT_NEAR(e.seconds(1.0), 0.05, 1e-9);
}

}  // namespace
}  // namespace llm::loop
