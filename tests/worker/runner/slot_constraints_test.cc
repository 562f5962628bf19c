// The CUDA runner's structured-output bookkeeping (worker/runner/slot_constraints.h), without a
// GPU: which tokens move a slot's matcher in a pipelined runner, and the mask rows it uploads.
#include "worker/runner/slot_constraints.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace llm::runner {
namespace {

using constraint::Kind;
using sampling::FinishReason;

constexpr int32_t kVocab = 70;  // more than the table's 12: the model's padded ids
constexpr int32_t kEos = 0;

std::shared_ptr<const constraint::TokenTable> Vocabulary() {
  return std::make_shared<constraint::TokenTable>(
      std::vector<std::string>{"", "{", "}", "\"", "a", "b", ":", ",", "yes", "no", "ye", "s"});
}

std::shared_ptr<const constraint::CompiledConstraint> Compiled(constraint::ConstraintSpec spec) {
  auto c = constraint::Compile(spec, Vocabulary());
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

engine::RequestPtr Request(uint64_t key, std::shared_ptr<const constraint::CompiledConstraint> c) {
  auto r = std::make_shared<engine::EngineRequest>();
  r->key = key;
  r->prompt_ids = {4, 5};
  r->stop_token_ids = {kEos};
  r->constraint = std::move(c);
  return r;
}

engine::StepPlan Admit(uint64_t step, int32_t slot, engine::RequestPtr r,
                       std::vector<int32_t> resumed = {}) {
  engine::StepPlan p;
  p.step_id = step;
  p.admissions.push_back({slot, std::move(r), {slot}, std::move(resumed)});
  return p;
}

// The ids a mask row allows.
std::vector<int32_t> Allowed(const uint64_t* words) {
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < kVocab; ++t) {
    if ((words[t / 64] >> (t % 64)) & 1) ids.push_back(t);
  }
  return ids;
}

// The ids a CPU matcher in the same place leaves finite (the CPU runner's path).
std::vector<int32_t> CpuAllowed(const std::shared_ptr<const constraint::CompiledConstraint>& c,
                                const std::vector<int32_t>& tokens) {
  constraint::Matcher m(c);
  for (int32_t t : tokens) m.Advance(t);
  std::vector<float> logits(kVocab, 0.0f);
  const int32_t stops[] = {kEos};
  m.Apply(logits, stops);
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < kVocab; ++t) {
    if (logits[t] > -std::numeric_limits<float>::infinity()) ids.push_back(t);
  }
  return ids;
}

class SlotConstraintsTest : public ::testing::Test {
 protected:
  // Writes the masks of sampling rows `row_slots`; returns how many.
  int32_t Write(SlotConstraints& sc, const std::vector<int32_t>& row_slots) {
    index_.assign(row_slots.size(), -2);
    masks_.assign(8 * sc.words(), ~uint64_t{0});
    return sc.WriteMasks(row_slots, index_, masks_);
  }
  const uint64_t* Mask(const SlotConstraints& sc, int32_t k) const {
    return masks_.data() + static_cast<size_t>(k) * sc.words();
  }
  std::vector<int32_t> index_;
  std::vector<uint64_t> masks_;
};

// Constrained rows get a mask each, equal to what the CPU runner's matcher applies; other rows
// and padding get none.
TEST_F(SlotConstraintsTest, MasksAreTheCpuMatchersMasks) {
  const auto choice = Compiled({Kind::kChoice, "", {"yes", "no"}});
  const auto json = Compiled({Kind::kJsonObject, "", {}});
  SlotConstraints sc(8, kVocab, 1);
  ASSERT_EQ(sc.words(), 2u);
  sc.OnPlan(Admit(1, 1, Request(11, choice)));
  sc.OnPlan(Admit(1, 2, Request(12, nullptr)));
  sc.OnPlan(Admit(1, 3, Request(13, json)));
  EXPECT_EQ(sc.active(), 2);
  EXPECT_EQ(Write(sc, {1, 2, 3, -1}), 2);
  EXPECT_EQ(index_, (std::vector<int32_t>{0, -1, 1, -1}));
  EXPECT_EQ(Allowed(Mask(sc, 0)), CpuAllowed(choice, {}));
  EXPECT_EQ(Allowed(Mask(sc, 1)), CpuAllowed(json, {}));
  EXPECT_EQ(Allowed(Mask(sc, 0)), (std::vector<int32_t>{8, 9, 10}));

  // Step 1's tokens: "ye" and "{"; then "s" ends the choice: only EOS may follow.
  sc.OnToken(1, 1, 11, 10, FinishReason::kNone);
  sc.OnToken(1, 3, 13, 1, FinishReason::kNone);
  ASSERT_EQ(Write(sc, {3, 1}), 2);
  EXPECT_EQ(Allowed(Mask(sc, 0)), CpuAllowed(json, {1}));
  EXPECT_EQ(Allowed(Mask(sc, 1)), (std::vector<int32_t>{11}));
  sc.OnToken(2, 1, 11, 11, FinishReason::kNone);
  ASSERT_EQ(Write(sc, {1}), 1);
  EXPECT_EQ(Allowed(Mask(sc, 0)), (std::vector<int32_t>{kEos}));
}

// Tokens of another request (a slot released and reused while a step was in flight), of a step
// launched before the admission, and stop tokens leave the matcher where it was.
TEST_F(SlotConstraintsTest, StaleAndStopTokensDoNotMoveTheMatcher) {
  const auto choice = Compiled({Kind::kChoice, "", {"yes", "no"}});
  SlotConstraints sc(4, kVocab, 1);
  sc.OnPlan(Admit(5, 0, Request(21, choice)));
  sc.OnToken(4, 0, 21, 9, FinishReason::kNone);  // an earlier step
  sc.OnToken(5, 0, 99, 9, FinishReason::kNone);  // another request's
  sc.OnToken(5, 0, 21, kEos, FinishReason::kStopToken);
  ASSERT_EQ(Write(sc, {0}), 1);
  EXPECT_EQ(Allowed(Mask(sc, 0)), CpuAllowed(choice, {}));
  sc.OnToken(5, 0, 21, 9, FinishReason::kNone);  // "no": complete
  ASSERT_EQ(Write(sc, {0}), 1);
  EXPECT_EQ(Allowed(Mask(sc, 0)), (std::vector<int32_t>{kEos}));

  // Released, then the slot holds an unconstrained request: no mask, nothing active.
  engine::StepPlan release;
  release.step_id = 7;
  release.releases = {0};
  sc.OnPlan(release);
  EXPECT_EQ(sc.active(), 0);
  sc.OnPlan(Admit(8, 0, Request(22, nullptr)));
  EXPECT_EQ(Write(sc, {0}), 0);
  EXPECT_EQ(index_[0], -1);
  // Admitted over a constrained one without a release (a readmission): still one active.
  sc.OnPlan(Admit(9, 1, Request(23, choice)));
  sc.OnPlan(Admit(10, 1, Request(23, choice)));
  EXPECT_EQ(sc.active(), 1);
}

// The pipelined runner's rule: a step's masks are written at its launch only when none of its
// constrained slots sampled in a step still in flight; unconstrained rows never count.
TEST_F(SlotConstraintsTest, MasksAreReadyAtLaunchUnlessATokenIsInFlight) {
  const auto choice = Compiled({Kind::kChoice, "", {"yes", "no"}});
  SlotConstraints sc(4, kVocab, 1);
  sc.OnPlan(Admit(1, 0, Request(41, nullptr)));
  auto m = sc.OnLaunch(1, 1, std::vector<int32_t>{0, -1});
  EXPECT_FALSE(m.masked);  // nothing constrained: samples as before
  sc.OnPlan(Admit(2, 1, Request(42, choice)));
  m = sc.OnLaunch(2, 1, std::vector<int32_t>{0, 1});  // step 1 in flight; slot 1 just admitted
  EXPECT_TRUE(m.masked);
  EXPECT_TRUE(m.ready);
  m = sc.OnLaunch(3, 2, std::vector<int32_t>{0, 1});  // slot 1's token of step 2 in flight
  EXPECT_TRUE(m.masked);
  EXPECT_FALSE(m.ready);
  m = sc.OnLaunch(4, 4, std::vector<int32_t>{1});  // everything collected
  EXPECT_TRUE(m.ready);
  // A slot that skipped a step (its last token from step 4, collected): ready beside step 5.
  sc.OnPlan(Admit(5, 2, Request(43, choice)));
  m = sc.OnLaunch(5, 5, std::vector<int32_t>{2});
  EXPECT_TRUE(m.ready);
  m = sc.OnLaunch(6, 5, std::vector<int32_t>{1});
  EXPECT_TRUE(m.ready);
  m = sc.OnLaunch(7, 6, std::vector<int32_t>{1, 2});  // slot 1 sampled in step 6
  EXPECT_FALSE(m.ready);
  // Readmitted into a slot whose last step is in flight: a new matcher, ready.
  sc.OnPlan(Admit(8, 1, Request(44, choice)));
  m = sc.OnLaunch(8, 7, std::vector<int32_t>{1});
  EXPECT_TRUE(m.ready);
}

// Step ids are the plan's, and the runner contract does not make them start at 1: a first step
// numbered 0, with nothing in flight, is ready; so is a slot admitted beside a step 0 in flight.
TEST_F(SlotConstraintsTest, AStepNumberedZeroIsReady) {
  const auto choice = Compiled({Kind::kChoice, "", {"yes", "no"}});
  SlotConstraints sc(4, kVocab, 1);
  sc.OnPlan(Admit(0, 0, Request(51, choice)));
  auto m = sc.OnLaunch(0, SlotConstraints::kNothingInFlight, std::vector<int32_t>{0});
  EXPECT_TRUE(m.masked);
  EXPECT_TRUE(m.ready);
  sc.OnPlan(Admit(1, 1, Request(52, choice)));
  m = sc.OnLaunch(1, 0, std::vector<int32_t>{1});
  EXPECT_TRUE(m.ready);
  m = sc.OnLaunch(2, 0, std::vector<int32_t>{0});  // slot 0's token of step 0 in flight
  EXPECT_FALSE(m.ready);
}

// A readmitted request's resumed tokens move its new matcher, as CpuRunner::Resume does.
TEST_F(SlotConstraintsTest, ResumedTokensMoveTheMatcher) {
  const auto json = Compiled({Kind::kJsonObject, "", {}});
  SlotConstraints sc(4, kVocab, 1);
  sc.OnPlan(Admit(3, 2, Request(31, json), {1, 3, 4}));  // {"a
  ASSERT_EQ(Write(sc, {2}), 1);
  EXPECT_EQ(Allowed(Mask(sc, 0)), CpuAllowed(json, {1, 3, 4}));
  EXPECT_NE(Allowed(Mask(sc, 0)), CpuAllowed(json, {}));
}

// Masks written by a pool equal those written by the caller alone, and a staging that cannot
// hold them is reported, not overrun.
TEST_F(SlotConstraintsTest, PoolWritesTheSameMasksAndOverflowIsReported) {
  const auto json = Compiled({Kind::kJsonObject, "", {}});
  SlotConstraints one(64, kVocab, 1), pool(64, kVocab, 3);
  std::vector<int32_t> rows;
  for (int32_t s = 0; s < 64; ++s) {
    std::vector<int32_t> resumed;
    if (s % 3 >= 1) resumed.push_back(1);
    if (s % 3 == 2) resumed.push_back(3);
    one.OnPlan(Admit(1, s, Request(100 + s, json), resumed));
    pool.OnPlan(Admit(1, s, Request(100 + s, json), resumed));
    rows.push_back(s);
  }
  std::vector<int32_t> i1(64), i2(64);
  std::vector<uint64_t> m1(64 * one.words()), m2(64 * one.words(), ~uint64_t{0});
  ASSERT_EQ(one.WriteMasks(rows, i1, m1), 64);
  ASSERT_EQ(pool.WriteMasks(rows, i2, m2), 64);
  EXPECT_EQ(i1, i2);
  EXPECT_EQ(m1, m2);
  std::vector<uint64_t> small(10 * one.words());
  EXPECT_EQ(one.WriteMasks(rows, i1, small), -1);
}

// A verify group's row j is masked as the matcher stands after the slot's proposals 0 .. j - 1;
// rows verification cannot reach (past the proposals, after a refused proposal or a stop id)
// and unconstrained rows get none.
TEST_F(SlotConstraintsTest, GroupRowsAreMaskedAfterTheProposalsBeforeThem) {
  const auto choice = Compiled({Kind::kChoice, "", {"yes", "no"}});
  SlotConstraints sc(4, kVocab, 2);
  sc.OnPlan(Admit(1, 0, Request(61, choice)));
  sc.OnPlan(Admit(1, 1, Request(62, choice)));
  sc.OnPlan(Admit(1, 2, Request(63, nullptr)));
  // Stride 4: slot 0 proposes "ye" "s" EOS "a"; slot 1 "no" "a" (refused) with 3 real ones
  // claimed; slot 2 is not constrained.
  const std::vector<int32_t> tokens = {10, 11, kEos, 4, 9, 4, 4, 4, 8, 8, 8, 8, 0, 0, 0, 0};
  const std::vector<int32_t> counts = {4, 3, 4, 0};
  const std::vector<int32_t> slots = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 0};
  const std::vector<int32_t> offsets = {0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 0};
  index_.assign(slots.size(), -2);
  masks_.assign(16 * sc.words(), 0);
  const SlotConstraints::Proposals p{tokens, counts, 4};
  ASSERT_EQ(sc.WriteGroupMasks(slots, offsets, p, index_, masks_), 10);
  EXPECT_EQ(index_, (std::vector<int32_t>{0, 1, 2, -1, -1, 5, 6, -1, -1, -1, -1, 9}));
  EXPECT_EQ(Allowed(Mask(sc, 0)), (std::vector<int32_t>{8, 9, 10}));
  EXPECT_EQ(Allowed(Mask(sc, 1)), (std::vector<int32_t>{11}));    // after "ye"
  EXPECT_EQ(Allowed(Mask(sc, 2)), (std::vector<int32_t>{kEos}));  // after "yes"
  EXPECT_EQ(Allowed(Mask(sc, 5)), (std::vector<int32_t>{8, 9, 10}));
  EXPECT_EQ(Allowed(Mask(sc, 6)), (std::vector<int32_t>{kEos}));  // after "no"
  EXPECT_EQ(Allowed(Mask(sc, 9)), (std::vector<int32_t>{8, 9, 10}));
  // The slot's own matcher has not moved.
  ASSERT_EQ(Write(sc, {0}), 1);
  EXPECT_EQ(Allowed(Mask(sc, 0)), (std::vector<int32_t>{8, 9, 10}));
  // No copy of the proposals: only each group's first row is reachable.
  index_.assign(3, -2);
  ASSERT_EQ(sc.WriteGroupMasks(std::vector<int32_t>{0, 0, 1}, std::vector<int32_t>{0, 1, 0}, {},
                               index_, masks_),
            3);
  EXPECT_EQ(index_, (std::vector<int32_t>{0, -1, 2}));
}

// A stand-in target: a fixed score for each (history, token), greedy under the row's mask.
int32_t GreedyUnder(const std::vector<int32_t>& history, const uint64_t* mask) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : history) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  int32_t best = -1;
  uint64_t best_score = 0;
  for (int32_t t = 0; t < kVocab; ++t) {
    if (mask != nullptr && ((mask[t / 64] >> (t % 64)) & 1) == 0) continue;
    const uint64_t score = ((h ^ static_cast<uint64_t>(t)) * 0x9E3779B97F4A7C15ull) >> 11;
    if (best < 0 || score > best_score) best = t, best_score = score;
  }
  return best;
}

// The CUDA runner's verification (kernels/speculative/verify.h) over a stand-in greedy target,
// its rows masked by WriteGroupMasks along random proposals (the true continuation or not):
// the ids are those of one masked token a step, and every row it reaches has a mask.
TEST_F(SlotConstraintsTest, VerifiedGroupsKeepTheMaskedGreedyIds) {
  const auto json = Compiled({Kind::kJsonObject, "", {}});
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    // The ids without speculation.
    std::vector<int32_t> want;
    {
      SlotConstraints plain(1, kVocab, 1);
      plain.OnPlan(Admit(1, 0, Request(70, json)));
      for (uint64_t step = 1; want.size() < 24 && (want.empty() || want.back() != kEos); ++step) {
        ASSERT_EQ(Write(plain, {0}), 1);
        want.push_back(GreedyUnder(want, Mask(plain, 0)));
        plain.OnToken(step, 0, 70, want.back(),
                      want.back() == kEos ? FinishReason::kStopToken : FinishReason::kNone);
      }
    }
    SlotConstraints sc(1, kVocab, 2);
    sc.OnPlan(Admit(1, 0, Request(70, json)));
    std::vector<int32_t> got;
    for (uint64_t step = 1; got.size() < want.size() && (got.empty() || got.back() != kEos);
         ++step) {
      const auto k = static_cast<int32_t>(rng() % 5);
      std::vector<int32_t> proposals(4, 0);
      for (int32_t j = 0; j < k; ++j) {
        const size_t at = got.size() + static_cast<size_t>(j);
        proposals[j] =
            rng() % 3 != 0 && at < want.size() ? want[at] : static_cast<int32_t>(rng() % 12);
      }
      std::vector<int32_t> slots(static_cast<size_t>(k) + 1, 0), offsets;
      for (int32_t j = 0; j <= k; ++j) offsets.push_back(j);
      index_.assign(slots.size(), -2);
      masks_.assign(5 * sc.words(), 0);
      const std::vector<int32_t> counts = {k};
      ASSERT_EQ(sc.WriteGroupMasks(slots, offsets, {proposals, counts, 4}, index_, masks_), k + 1);
      // Row 0 always; row j while row j - 1 drew proposal j - 1; a stop ends the run.
      std::vector<int32_t> history = got;
      for (int32_t j = 0; j <= k; ++j) {
        ASSERT_GE(index_[j], 0) << "round " << round << " step " << step << " row " << j;
        const int32_t t = GreedyUnder(history, Mask(sc, index_[j]));
        history.push_back(t);
        sc.OnToken(step, 0, 70, t, t == kEos ? FinishReason::kStopToken : FinishReason::kNone);
        if (t == kEos || j == k || t != proposals[j]) break;
      }
      got.insert(got.end(), history.begin() + static_cast<ptrdiff_t>(got.size()), history.end());
    }
    got.resize(std::min(got.size(), want.size()));
    ASSERT_EQ(got, want) << "round " << round;
  }
}

}  // namespace
}  // namespace llm::runner
