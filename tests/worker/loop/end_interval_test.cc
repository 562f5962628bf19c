#include "worker/loop/end_interval.h"

#include "gtest/gtest.h"

namespace llm::loop {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(EndIntervalTest, GapsCountWhileEverySlotIsTaken) {
  EndInterval e;
  EXPECT_EQ(e.seconds(1.0), 1.0);
  const auto t0 = EndInterval::Clock::time_point{} + seconds(100);
  e.OnEnd(t0);  // not saturated: nothing counts
  EXPECT_EQ(e.seconds(1.0), 1.0);
  e.OnSaturated(t0 + milliseconds(100));
  e.OnEnd(t0 + milliseconds(300));  // 200 ms since every slot was taken
  EXPECT_DOUBLE_EQ(e.seconds(1.0), 0.2);
  e.OnSaturated(t0 + milliseconds(350));  // still saturated: no new start
  e.OnEnd(t0 + milliseconds(400));
  EXPECT_DOUBLE_EQ(e.seconds(1.0), 0.9 * 0.2 + 0.1 * 0.1);
}

// A quiet hour, or one long stream alone, between two bursts leaves the mean as the bursts made
// it: such gaps were averaged in, and a full worker then told clients to retry in minutes.
TEST(EndIntervalTest, GapsWithASlotFreeDoNotCount) {
  EndInterval e;
  auto t = EndInterval::Clock::time_point{} + seconds(100);
  e.OnSaturated(t);
  for (int i = 0; i < 20; ++i) e.OnEnd(t += milliseconds(50));
  EXPECT_NEAR(e.seconds(1.0), 0.05, 1e-9);
  e.OnUnsaturated();
  e.OnEnd(t += std::chrono::hours(1));  // the long stream ends, a slot free all along
  EXPECT_NEAR(e.seconds(1.0), 0.05, 1e-9);
  e.OnSaturated(t += seconds(5));  // the next burst fills the slots
  e.OnEnd(t += milliseconds(50));
  EXPECT_NEAR(e.seconds(1.0), 0.05, 1e-9);
}

}  // namespace
}  // namespace llm::loop
