#include "worker/speculative/ngram.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm::speculative {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<int32_t> Propose(const std::vector<int32_t>& history, int32_t max_tokens,
                             NgramOptions options = {.min = 1, .max = 3}) {
  std::vector<int32_t> out;
  const int32_t n = ProposeNgram(history, options, max_tokens, out);
  EXPECT_EQ(n, static_cast<int32_t>(out.size()));
  return out;
}

TEST(NgramTest, ProposesWhatFollowedTheSuffixBefore) {
  // ... 5 6 7 8 9 ... 5 6 -> 7 8 9
  EXPECT_THAT(Propose({1, 5, 6, 7, 8, 9, 2, 5, 6}, 3), ElementsAre(7, 8, 9));
  EXPECT_THAT(Propose({1, 5, 6, 7, 8, 9, 2, 5, 6}, 2), ElementsAre(7, 8));
  // Up to the end of the history only.
  EXPECT_THAT(Propose({5, 6, 7, 5, 6}, 8), ElementsAre(7, 5, 6));
}

TEST(NgramTest, TheLongestSuffixWinsThenTheLatestOccurrence) {
  // "3 4" occurs twice; the longer "2 3 4" only once (followed by 9).
  EXPECT_THAT(Propose({2, 3, 4, 9, 7, 3, 4, 8, 2, 3, 4}, 1), ElementsAre(9));
  // "3 4" alone: its latest earlier occurrence (followed by 8).
  EXPECT_THAT(Propose({2, 3, 4, 9, 7, 3, 4, 8, 1, 3, 4}, 1), ElementsAre(8));
}

TEST(NgramTest, NothingWithoutARepeatOrBelowTheMinimum) {
  EXPECT_THAT(Propose({1, 2, 3, 4}, 4), IsEmpty());
  EXPECT_THAT(Propose({}, 4), IsEmpty());
  EXPECT_THAT(Propose({7}, 4), IsEmpty());
  // Only a 1-token suffix recurs, and 2 is the minimum.
  EXPECT_THAT(Propose({1, 9, 2, 3, 9}, 4, {.min = 2, .max = 4}), IsEmpty());
  EXPECT_THAT(Propose({1, 9, 2, 3, 9}, 4, {.min = 1, .max = 4}), ElementsAre(2, 3, 9));
  EXPECT_THAT(Propose({1, 5, 6, 7, 5, 6}, 0), IsEmpty());
}

TEST(NgramTest, ARunOfOneTokenProposesMoreOfIt) {
  // The suffix overlaps its own earlier occurrence.
  EXPECT_THAT(Propose({4, 4, 4, 4}, 3), ElementsAre(4));
  // The latest occurrence has one token after it; the one before, the two asked for.
  EXPECT_THAT(Propose({1, 4, 4, 4, 4, 4, 4}, 2), ElementsAre(4, 4));
}

TEST(NgramTest, AnEarlierOccurrenceWithMoreAfterItWinsOverALaterShortOne) {
  // "5 6" at 0 is followed by 7 8 9; at 5 only by the current suffix's first token.
  EXPECT_THAT(Propose({5, 6, 7, 8, 9, 5, 6, 5, 6}, 3, {.min = 2, .max = 2}), ElementsAre(7, 8, 9));
}

}  // namespace
}  // namespace llm::speculative
