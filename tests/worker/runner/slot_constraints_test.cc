// The CUDA runner's structured-output bookkeeping (worker/runner/slot_constraints.h), without a
// GPU: which tokens move a slot's matcher in a pipelined runner, and the mask rows it uploads.
#include "worker/runner/slot_constraints.h"

#include <limits>
#include <memory>
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

}  // namespace
}  // namespace llm::runner
