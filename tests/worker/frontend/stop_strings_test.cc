#include "worker/frontend/stop_strings.h"

#include "gtest/gtest.h"

namespace llm::frontend {
namespace {

// Feeds deltas and returns everything emitted plus whether it stopped.
std::pair<std::string, bool> Feed(StopStringMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const auto& d : deltas) {
    const auto r = m.Add(d);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  return {out + m.Flush(), false};
}

TEST(StopStringsTest, StopsBeforeTheMatchAcrossDeltas) {
  StopStringMatcher m({"END"}, false);
  EXPECT_EQ(Feed(m, {"hello E", "N", "D tail"}), std::make_pair(std::string("hello "), true));
}

TEST(StopStringsTest, IncludeStop) {
  StopStringMatcher m({"\n\n"}, true);
  EXPECT_EQ(Feed(m, {"a\n", "\nb"}), std::make_pair(std::string("a\n\n"), true));
}

TEST(StopStringsTest, HoldsBackOnlyPossiblePrefixes) {
  StopStringMatcher m({"STOP"}, false);
  auto r = m.Add("abc ST");
  EXPECT_EQ(r.text, "abc ");  // "ST" might begin STOP
  EXPECT_FALSE(r.stopped);
  r = m.Add("AR");
  EXPECT_EQ(r.text, "STAR");  // it did not
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringsTest, EarliestOfSeveral) {
  StopStringMatcher m({"world", "lo w"}, false);
  const auto r = m.Add("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(r.matched, "lo w");
}

TEST(StopStringsTest, MultibyteStopNeverSplitsACharacter) {
  StopStringMatcher m({"世界"}, false);
  auto r = m.Add("你好世");
  EXPECT_EQ(r.text, "你好");
  r = m.Add("界!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopStringsTest, NoStopsPassesThrough) {
  StopStringMatcher m({}, false);
  EXPECT_EQ(Feed(m, {"a", "b"}), std::make_pair(std::string("ab"), false));
}

}  // namespace
}  // namespace llm::frontend
