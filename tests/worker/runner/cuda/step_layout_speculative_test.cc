// The CUDA runner's host logic for speculative decoding, without a GPU: verify groups and their
// allowances, the rows that sample, constrained slots, the draft's catch-up and the history
// spans (worker/runner/cuda/step_layout.h).
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/runner/cuda/step_layout_test_util.h"
#include "worker/constraint/constraint.h"
#include "worker/runner/cuda/step_layout.h"

namespace llm::runner::cuda {
namespace {

using ::testing::ElementsAre;

// Speculative decoding: a plan whose decodes carry proposals lays each decoding slot out as a
// verify group of consecutive rows (1 + the most proposals, rounded up to 1 + a power of two),
// uploads each decode row's allowance, and falls back to one row a slot past the capacity.
TEST(SlotMirrorSpeculativeTest, DecodesWithProposalsBecomeVerifyGroups) {
  StepLimits limits = Limits();
  limits.spec_group = 5;  // engine.speculative.num_tokens 4
  limits.max_decode_rows = 20;
  SlotMirror mirror(limits, MakeBuckets(8));
  StepLayout l;
  const auto step = [&](const engine::StepPlan& plan) { CheckAndApply(mirror, plan, l); };
  for (int32_t s = 0; s < 3; ++s) {
    engine::StepPlan p;
    p.step_id = 1 + s;
    auto r = std::make_shared<engine::EngineRequest>(*Request(100 + s, 4, 50));
    // Penalties speculate too (each verify row counts the proposals before it).
    if (s == 2) r->sampling.repetition_penalty = 1.2f;
    p.admissions.push_back({s, r, {s * 2, s * 2 + 1}});
    p.prefills.push_back({s, 0, 4, true});
    step(p);
  }
  engine::StepPlan d;
  d.step_id = 10;
  d.decodes = {{0, 4}, {1, 2}, {2, 4}};
  step(d);
  EXPECT_EQ(l.group, 5);
  EXPECT_EQ(l.decode_rows, 4 * 5);  // the bucket of 3 decode rows, 5 rows each
  EXPECT_EQ(l.rows, 20);
  EXPECT_TRUE(l.identity_sampling);
  EXPECT_EQ(l.num_sample_rows, 20);
  EXPECT_THAT(l.decode_draft, ElementsAre(4, 2, 4, 0));
  EXPECT_THAT(l.decode_limit, ElementsAre(32, 32, 32, 0));  // 2 blocks of 16 each
  EXPECT_FALSE(l.upload_empty());  // the allowances go up with every speculative step
  std::vector<int32_t> slots, offsets;
  mirror.SampleRowSlots(l, slots, offsets);
  EXPECT_THAT(slots, ElementsAre(0, 0, 0, 0, 0,         // slot 0: 4 proposals
                                 1, 1, 1, -1, -1,       // slot 1: 2
                                 2, 2, 2, 2, 2,         // slot 2: 4 (with penalties)
                                 -1, -1, -1, -1, -1));  // the bucket's unused row
  EXPECT_THAT(offsets, ElementsAre(0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4));

  // At most one proposal: groups of 2. None: one row a slot, nothing extra uploaded.
  d.step_id = 11;
  d.decodes = {{0, 1}, {1, 1}, {2, 1}};
  step(d);
  EXPECT_EQ(l.group, 2);
  EXPECT_EQ(l.decode_rows, 8);
  EXPECT_THAT(l.decode_draft, ElementsAre(1, 1, 1, 0));
  d.step_id = 12;
  d.decodes = {{0, 0}, {1, 0}, {2, 0}};  // no slot asks: no groups
  step(d);
  EXPECT_EQ(l.group, 1);
  EXPECT_EQ(l.decode_rows, 4);
  EXPECT_TRUE(l.decode_draft.empty());
  EXPECT_TRUE(l.upload_empty());

  // Three proposals round up to a group of 5; a fourth slot makes the bucket 4 * 5 = 20 rows,
  // still within the capacity; with a fifth (bucket 8) the step decodes without proposals.
  d.step_id = 13;
  d.decodes = {{0, 3}, {1, 3}, {2, 3}};
  step(d);
  EXPECT_EQ(l.group, 5);
  EXPECT_THAT(l.decode_draft, ElementsAre(3, 3, 3, 0));
  for (int32_t s = 3; s < 5; ++s) {
    engine::StepPlan p;
    p.step_id = 20 + s;
    p.admissions.push_back({s, Request(100 + s, 4, 50), {s * 2, s * 2 + 1}});
    p.prefills.push_back({s, 0, 4, true});
    p.decodes = {{0}, {1}, {2}};
    for (int32_t t = 3; t < s; ++t) p.decodes.push_back({t});
    step(p);
  }
  d.step_id = 30;
  d.decodes = {{0, 4}, {1, 4}, {2, 4}, {3, 4}, {4, 4}};
  step(d);
  EXPECT_EQ(l.group, 1);
  EXPECT_EQ(l.decode_rows, 8);
  EXPECT_TRUE(l.decode_draft.empty());
}

// In a step with prompt rows, every row of every verify group samples after the prompts'.
TEST(SlotMirrorSpeculativeTest, MixedStepsSampleEveryGroupRow) {
  StepLimits limits = Limits();
  limits.spec_group = 3;
  limits.max_decode_rows = 24;
  SlotMirror mirror(limits, MakeBuckets(8));
  StepLayout l;
  engine::StepPlan a;
  a.step_id = 1;
  a.admissions.push_back({0, Request(100, 4, 50), {0, 1}});
  a.prefills.push_back({0, 0, 4, true});
  ASSERT_TRUE(mirror.Check(a).ok());
  mirror.Apply(a, l);
  engine::StepPlan b;
  b.step_id = 2;
  b.admissions.push_back({1, Request(101, 6, 50), {2, 3}});
  b.prefills.push_back({1, 0, 6, true});
  b.decodes = {{0, 2}};
  ASSERT_TRUE(mirror.Check(b).ok());
  mirror.Apply(b, l);
  EXPECT_EQ(l.group, 3);
  EXPECT_EQ(l.decode_rows, 3);
  EXPECT_EQ(l.rows, 64);
  EXPECT_EQ(l.prefill_rows, 61);
  EXPECT_THAT(std::vector<int32_t>(l.sample_rows.begin(), l.sample_rows.begin() + 5),
              ElementsAre(5, 61, 62, 63, -1));
  std::vector<int32_t> slots, offsets;
  mirror.SampleRowSlots(l, slots, offsets);
  EXPECT_THAT(std::vector<int32_t>(slots.begin(), slots.begin() + 5), ElementsAre(1, 0, 0, 0, -1));
  EXPECT_THAT(std::vector<int32_t>(offsets.begin(), offsets.begin() + 4), ElementsAre(0, 0, 1, 2));
}

// A constrained request's allowance is 0 unless the runner masks its verify rows along the
// proposals it copies back (engine.cuda_speculate_constrained); then it speculates as others.
TEST(SlotMirrorSpeculativeTest, ConstrainedSlotsSpeculateOnlyWhereAllowed) {
  auto table = std::make_shared<constraint::TokenTable>(std::vector<std::string>{"", "a", "b"});
  auto compiled = constraint::Compile({constraint::Kind::kChoice, "", {"ab"}}, table);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  for (const bool allowed : {false, true}) {
    StepLimits limits = Limits();
    limits.spec_group = 3;
    limits.max_decode_rows = 24;
    limits.speculate_constrained = allowed;
    SlotMirror mirror(limits, MakeBuckets(8));
    StepLayout l;
    for (int32_t s = 0; s < 2; ++s) {
      engine::StepPlan p;
      p.step_id = 1 + s;
      auto r = std::make_shared<engine::EngineRequest>(*Request(100 + s, 4, 50));
      if (s == 1) r->constraint = *compiled;
      p.admissions.push_back({s, r, {s * 2, s * 2 + 1}});
      p.prefills.push_back({s, 0, 4, true});
      ASSERT_TRUE(mirror.Check(p).ok());
      mirror.Apply(p, l);
    }
    engine::StepPlan d;
    d.step_id = 5;
    d.decodes = {{0, 2}, {1, 2}};
    ASSERT_TRUE(mirror.Check(d).ok());
    mirror.Apply(d, l);
    EXPECT_EQ(l.group, 3);
    EXPECT_THAT(l.decode_draft, ElementsAre(2, allowed ? 2 : 0)) << allowed;
    std::vector<int32_t> slots, offsets;
    mirror.SampleRowSlots(l, slots, offsets);
    EXPECT_THAT(slots, allowed ? ElementsAre(0, 0, 0, 1, 1, 1) : ElementsAre(0, 0, 0, 1, -1, -1));
    EXPECT_THAT(offsets, ElementsAre(0, 1, 2, 0, 1, 2));
  }
}

// With a draft model, a step that decodes without verifying runs the draft's catch-up pass
// unless the plan lets it lapse or no decoding slot may get proposals any more (opted out,
// lapsed); a slot that decoded in a step without it gets no proposals until it ends, while a
// slot admitted later does. The n-gram proposer keeps no state: nothing lapses.
TEST(SlotMirrorSpeculativeTest, ADraftLapsesOnlyWhereThePlanLetsIt) {
  for (const bool draft : {true, false}) {
    StepLimits limits = Limits();
    limits.spec_group = 3;
    limits.max_decode_rows = 24;
    limits.draft = draft;
    SlotMirror mirror(limits, MakeBuckets(8));
    StepLayout l;
    const auto step = [&](const engine::StepPlan& plan) { CheckAndApply(mirror, plan, l); };
    const auto admit = [&](uint64_t id, int32_t s, bool speculate) {
      engine::StepPlan p;
      p.step_id = id;
      auto r = std::make_shared<engine::EngineRequest>(*Request(100 + s, 4, 50));
      r->speculate = speculate;
      p.admissions.push_back({s, r, {s * 2, s * 2 + 1}});
      p.prefills.push_back({s, 0, 4, true});
      step(p);
    };
    admit(1, 0, true);
    admit(2, 1, false);  // opted out
    engine::StepPlan d;
    d.step_id = 3;
    d.decodes = {{0, 0}, {1, 0}};
    step(d);
    EXPECT_EQ(l.group, 1);
    EXPECT_EQ(l.draft_catch_up, draft);  // slot 0 may still speculate
    d.step_id = 4;
    d.draft_may_lapse = true;
    step(d);
    EXPECT_FALSE(l.draft_catch_up);
    // Slot 0's draft lapsed: no proposals, and no catch-up for a batch of lapsed slots.
    d.step_id = 5;
    d.draft_may_lapse = false;
    d.decodes = {{0, 2}, {1, 2}};
    step(d);
    if (draft) {
      EXPECT_EQ(l.group, 1);
      EXPECT_FALSE(l.draft_catch_up);
    } else {
      EXPECT_EQ(l.group, 3);
      EXPECT_THAT(l.decode_draft, ElementsAre(2, 0));
    }
    // A slot admitted after it speculates, and brings the catch-up back.
    admit(6, 2, true);
    d.step_id = 7;
    d.decodes = {{0, 2}, {1, 2}, {2, 2}};
    step(d);
    EXPECT_EQ(l.group, 3);
    EXPECT_THAT(l.decode_draft, draft ? ElementsAre(0, 0, 2, 0) : ElementsAre(2, 0, 2, 0));
    d.step_id = 8;
    d.decodes = {{0, 0}, {1, 0}, {2, 0}};
    step(d);
    EXPECT_EQ(l.group, 1);
    EXPECT_EQ(l.draft_catch_up, draft);
    // Slot 0 released and taken by a new request: its draft starts afresh.
    engine::StepPlan release;
    release.step_id = 9;
    release.releases = {0};
    release.decodes = {{1, 0}, {2, 0}};
    step(release);
    admit(10, 0, true);
    d.step_id = 11;
    d.decodes = {{0, 2}, {1, 2}, {2, 2}};
    step(d);
    EXPECT_EQ(l.group, 3);
    EXPECT_THAT(l.decode_draft, ElementsAre(2, 0, 2, 0));
    // Only the opted-out slot decodes: nothing to keep up, nothing lapses.
    d.step_id = 12;
    d.decodes = {{1, 0}};
    step(d);
    EXPECT_FALSE(l.draft_catch_up);
  }
}

// The device history gets what no row writes: a prefix-cache hit's cached prompt positions with
// the slot's first chunk (searchable), and with the oracle, at every admission, the oracle
// continuation past the prefix (not searchable; the kernel clears the row after it). Within
// max_history_tokens a step: a cached prefix keeps its last positions, an oracle its first
// ones. Nothing without speculation.
TEST(SlotMirrorSpeculativeTest, HistorySpansCarryCachedPromptsAndTheOracle) {
  StepLimits limits = Limits();
  limits.spec_group = 3;
  limits.max_decode_rows = 24;
  limits.max_history_tokens = 40;
  limits.oracle = true;
  SlotMirror mirror(limits, MakeBuckets(8));
  StepLayout l;
  const auto step = [&](const engine::StepPlan& plan) { CheckAndApply(mirror, plan, l); };
  // Slot 0: 20 prompt tokens, the first 16 cached, an oracle of 3; a second chunk adds nothing.
  auto r0 = std::make_shared<engine::EngineRequest>(*Request(100, 20, 50));
  r0->oracle_ids = {7, 8, 9};
  engine::StepPlan a;
  a.step_id = 1;
  a.admissions.push_back({0, r0, {0, 1, 2}});
  a.prefills.push_back({0, 16, 2, false});
  step(a);
  ASSERT_EQ(l.history_spans.size(), 2u);
  const kernels::HistorySpan oracle = l.history_spans[0], cached = l.history_spans[1];
  EXPECT_EQ(std::tie(oracle.slot, oracle.pos, oracle.count, oracle.offset, oracle.searchable),
            std::make_tuple(0, 20, 3, 0, 0));
  EXPECT_EQ(std::tie(cached.slot, cached.pos, cached.count, cached.offset, cached.searchable),
            std::make_tuple(0, 0, 16, 3, 1));
  ASSERT_EQ(l.history_tokens.size(), 19u);
  EXPECT_THAT(std::vector<int32_t>(l.history_tokens.begin(), l.history_tokens.begin() + 5),
              ElementsAre(7, 8, 9, 100, 101));
  EXPECT_EQ(l.history_tokens.back(), 115);
  EXPECT_FALSE(l.upload_empty());
  engine::StepPlan b;
  b.step_id = 2;
  b.prefills.push_back({0, 18, 2, true});
  step(b);
  EXPECT_TRUE(l.history_spans.empty());
  EXPECT_TRUE(l.history_tokens.empty());

  // Two admissions over the budget: slot 1's 30 cached positions fill 30 of the 40, so slot 2's
  // 33 keep their last 10 (contiguous with its chunk at 33).
  engine::StepPlan c;
  c.step_id = 3;
  c.admissions.push_back({1, Request(101, 34, 10), {3, 4, 5}});
  c.admissions.push_back({2, Request(102, 40, 10), {6, 7, 8}});
  c.prefills.push_back({1, 30, 4, true});
  c.prefills.push_back({2, 33, 7, true});
  step(c);
  // No oracle ids: empty oracle spans (the row is cleared, nothing is proposed), then the
  // cached ones.
  ASSERT_EQ(l.history_spans.size(), 4u);
  EXPECT_EQ(std::tie(l.history_spans[0].pos, l.history_spans[0].count), std::make_tuple(34, 0));
  EXPECT_EQ(std::tie(l.history_spans[3].pos, l.history_spans[3].count), std::make_tuple(23, 10));
  EXPECT_EQ(l.history_tokens.size(), 40u);
  EXPECT_EQ(l.history_tokens.back(), 132);  // prompt token 32 of slot 2

  // A readmission's oracle span starts after its resumed outputs, with the oracle's next ids.
  auto r3 = std::make_shared<engine::EngineRequest>(*Request(103, 6, 20));
  r3->oracle_ids = {50, 51, 52, 53};
  engine::StepPlan d;
  d.step_id = 4;
  d.admissions.push_back({3, r3, {9, 10}, {50, 51}, true});
  d.prefills.push_back({3, 0, 8, true});
  step(d);
  ASSERT_EQ(l.history_spans.size(), 1u);
  EXPECT_EQ(std::tie(l.history_spans[0].pos, l.history_spans[0].count), std::make_tuple(8, 2));
  EXPECT_THAT(l.history_tokens, ElementsAre(52, 53));

  // Without speculation (no budget) nothing is written.
  SlotMirror plain(Limits(), MakeBuckets(8));
  ASSERT_TRUE(plain.Check(a).ok());
  plain.Apply(a, l);
  EXPECT_TRUE(l.history_spans.empty());
}

TEST(SlotMirrorSpeculativeTest, GroupSizesAreOnePlusPowersOfTwoAndTheMost) {
  EXPECT_TRUE(SpeculativeGroups(1).empty());
  EXPECT_THAT(SpeculativeGroups(2), ElementsAre(2));
  EXPECT_THAT(SpeculativeGroups(4), ElementsAre(2, 3, 4));
  EXPECT_THAT(SpeculativeGroups(5), ElementsAre(2, 3, 5));
  EXPECT_THAT(SpeculativeGroups(9), ElementsAre(2, 3, 5, 9));
}

}  // namespace
}  // namespace llm::runner::cuda
