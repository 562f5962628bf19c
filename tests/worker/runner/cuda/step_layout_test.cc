// The CUDA runner's host logic, without a GPU: plan checks, decode-row bookkeeping, what a step
// uploads, and the batch layout.
#include "worker/runner/cuda/step_layout.h"

#include <functional>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/constraint/constraint.h"

namespace llm::runner::cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

StepLimits Limits() {
  StepLimits l;
  l.sizes = {.max_slots = 8, .kv_blocks = 64, .block_tokens = 16};
  l.max_blocks_per_seq = 8;
  l.max_context = 128;
  l.vocab_size = 1000;
  l.max_prefill_tokens = 100;
  return l;
}

engine::RequestPtr Request(uint64_t key, int32_t prompt_len, int32_t max_tokens = 10) {
  auto r = std::make_shared<engine::EngineRequest>();
  r->key = key;
  for (int32_t i = 0; i < prompt_len; ++i) r->prompt_ids.push_back(100 + i);
  r->max_tokens = max_tokens;
  r->stop_token_ids = {2};
  return r;
}

class SlotMirrorTest : public ::testing::Test {
 protected:
  SlotMirrorTest() : mirror_(Limits(), MakeBuckets(8)) {}

  // Checks and applies; fails the test on a refused plan.
  const StepLayout& Step(const engine::StepPlan& plan) {
    const absl::Status st = mirror_.Check(plan);
    EXPECT_TRUE(st.ok()) << st;
    mirror_.Apply(plan, layout_);
    return layout_;
  }
  // Admits `slot` and prefills its whole prompt (completing it) in one step.
  engine::StepPlan AdmitAndPrefill(uint64_t id, int32_t slot, int32_t prompt_len) {
    engine::StepPlan p;
    p.step_id = id;
    p.admissions.push_back({slot, Request(100 + slot, prompt_len), {slot * 2, slot * 2 + 1}});
    p.prefills.push_back({slot, 0, prompt_len, true});
    return p;
  }

  // Check refuses `p` with INVALID_ARGUMENT saying `what`.
  void Refused(const engine::StepPlan& p, const std::string& what) {
    const absl::Status st = mirror_.Check(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(st.message()), HasSubstr(what));
  }

  SlotMirror mirror_;
  StepLayout layout_;
};

// The prefill attention's inputs: a chunk per prompt in the step (rows back to back from row
// 0, each at its own position), and its tiles of packed (token, head) rows, most keys first.
TEST(SlotMirrorPrefillTest, PromptChunksAndTheirAttentionTiles) {
  StepLimits limits = Limits();
  limits.attention_group = 4;
  SlotMirror mirror(limits, MakeBuckets(8));
  StepLayout l;
  engine::StepPlan p1;
  p1.step_id = 1;
  p1.admissions.push_back({0, Request(100, 70), {0, 1, 2, 3, 4}});
  p1.admissions.push_back({1, Request(101, 5), {5}});
  p1.prefills.push_back({0, 0, 40, false});
  p1.prefills.push_back({1, 0, 5, true});
  ASSERT_TRUE(mirror.Check(p1).ok());
  mirror.Apply(p1, l);
  ASSERT_EQ(l.prefill_chunks.size(), 2u);
  const auto chunk = [](const kernels::PrefillChunk& c) {
    return std::vector<int32_t>{c.row_begin, c.tokens, c.slot, c.pos_begin};
  };
  EXPECT_THAT(chunk(l.prefill_chunks[0]), ElementsAre(0, 40, 0, 0));
  EXPECT_THAT(chunk(l.prefill_chunks[1]), ElementsAre(40, 5, 1, 0));
  // Slot 0: 160 packed rows in 3 tiles, whose last tokens are 39, 31 and 15; slot 1: 20 rows.
  const auto tiles = [&] {
    std::vector<std::pair<int32_t, int32_t>> t;
    for (const auto& x : l.prefill_tiles) t.emplace_back(x.chunk, x.row_begin);
    return t;
  };
  EXPECT_THAT(tiles(),
              ElementsAre(std::pair(0, 128), std::pair(0, 64), std::pair(0, 0), std::pair(1, 0)));
  // The last layer needs only slot 1's tile: slot 0's chunk does not complete its prompt.
  const auto last_tiles = [&] {
    std::vector<std::pair<int32_t, int32_t>> t;
    for (const auto& x : l.last_token_tiles) t.emplace_back(x.chunk, x.row_begin);
    return t;
  };
  EXPECT_THAT(last_tiles(), ElementsAre(std::pair(1, 0)));

  // The rest of slot 0's prompt continues at position 40 while slot 1 decodes.
  engine::StepPlan p2;
  p2.step_id = 2;
  p2.prefills.push_back({0, 40, 30, true});
  p2.decodes = {{1}};
  ASSERT_TRUE(mirror.Check(p2).ok());
  mirror.Apply(p2, l);
  ASSERT_EQ(l.prefill_chunks.size(), 1u);
  EXPECT_THAT(chunk(l.prefill_chunks[0]), ElementsAre(0, 30, 0, 40));
  EXPECT_THAT(tiles(), ElementsAre(std::pair(0, 64), std::pair(0, 0)));
  EXPECT_THAT(last_tiles(), ElementsAre(std::pair(0, 64)));  // rows 116-119: token 29

  // A decode-only step has none.
  engine::StepPlan p3;
  p3.step_id = 3;
  p3.decodes = {{0}, {1}};
  ASSERT_TRUE(mirror.Check(p3).ok());
  mirror.Apply(p3, l);
  EXPECT_TRUE(l.prefill_chunks.empty());
  EXPECT_TRUE(l.prefill_tiles.empty());
  EXPECT_TRUE(l.last_token_tiles.empty());
}

// The slot of each sampling row, as the device's row_slot has it: a completed prompt's last
// row, then the decode rows (mixed steps), or the decode rows in order (decode-only steps).
TEST(SlotMirrorPrefillTest, SampleRowSlotsFollowTheLayout) {
  SlotMirror mirror(Limits(), MakeBuckets(8));
  StepLayout l;
  std::vector<int32_t> slots, offsets;
  const auto step = [&](const engine::StepPlan& p) {
    ASSERT_TRUE(mirror.Check(p).ok());
    mirror.Apply(p, l);
    mirror.SampleRowSlots(l, slots, offsets);
  };
  engine::StepPlan p1;
  p1.step_id = 1;
  p1.admissions.push_back({3, Request(103, 5), {0}});
  p1.admissions.push_back({5, Request(105, 40), {1, 2, 3}});
  p1.prefills.push_back({3, 0, 5, true});
  p1.prefills.push_back({5, 0, 20, false});
  step(p1);
  ASSERT_EQ(slots.size(), static_cast<size_t>(kSampleRowAlign));
  EXPECT_EQ(slots[0], 3);  // slot 5's chunk does not complete its prompt
  for (size_t i = 1; i < slots.size(); ++i) EXPECT_EQ(slots[i], -1) << i;

  engine::StepPlan p2;  // slot 3 decodes while slot 5's prompt completes
  p2.step_id = 2;
  p2.prefills.push_back({5, 20, 20, true});
  p2.decodes = {{3}};
  step(p2);
  EXPECT_EQ(slots[0], 5);
  EXPECT_EQ(slots[1], 3);
  for (size_t i = 2; i < slots.size(); ++i) EXPECT_EQ(slots[i], -1) << i;

  engine::StepPlan p3;  // decode only: slot 3 kept row 0, slot 5 took row 1
  p3.step_id = 3;
  p3.decodes = {{5}, {3}};
  step(p3);
  ASSERT_TRUE(l.identity_sampling);
  ASSERT_EQ(slots.size(), static_cast<size_t>(l.num_sample_rows));
  EXPECT_EQ(slots[0], 3);
  EXPECT_EQ(slots[1], 5);
  for (size_t i = 2; i < slots.size(); ++i) EXPECT_EQ(slots[i], -1) << i;
}

TEST(MakeBucketsTest, CoverEverySizeUpToMaxSlots) {
  EXPECT_THAT(MakeBuckets(8), ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(MakeBuckets(20), ElementsAre(1, 2, 4, 8, 16, 20));
  const auto b = MakeBuckets(256);
  EXPECT_EQ(b.front(), 1);
  EXPECT_EQ(b.back(), 256);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  EXPECT_EQ(MakeBuckets(300).back(), 300);
}

TEST_F(SlotMirrorTest, MixedStepLayout) {
  const StepLayout& l = Step(AdmitAndPrefill(1, 0, 5));
  ASSERT_EQ(l.admits.size(), 1u);
  EXPECT_EQ(l.admits[0].slot, 0);
  EXPECT_EQ(l.admits[0].num_blocks, 2);
  EXPECT_EQ(l.settings[0].key, 100u);
  EXPECT_EQ(l.settings[0].num_stop_ids, 1);
  EXPECT_THAT(l.blocks, ElementsAre(0, 1));
  EXPECT_TRUE(l.row_changes.empty());
  EXPECT_EQ(l.bucket, -1);
  EXPECT_EQ(l.rows, 64);  // 5 prompt tokens, padded to the row alignment
  EXPECT_EQ(l.prefill_rows, 64);
  EXPECT_EQ(l.decode_rows, 0);
  EXPECT_FALSE(l.identity_sampling);
  EXPECT_THAT(std::vector<int32_t>(l.prefill_slot.begin(), l.prefill_slot.begin() + 6),
              ElementsAre(0, 0, 0, 0, 0, -1));
  EXPECT_THAT(std::vector<int32_t>(l.prefill_pos.begin(), l.prefill_pos.begin() + 5),
              ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(l.prefill_token[4], 104);
  ASSERT_EQ(l.num_sample_rows, 16);
  EXPECT_EQ(l.sample_rows[0], 4);  // the prompt's last token samples
  EXPECT_EQ(l.sample_rows[1], -1);

  // Next step: slot 0 decodes while slot 1's prompt comes in (two chunks).
  engine::StepPlan p2;
  p2.step_id = 2;
  p2.admissions.push_back({1, Request(101, 70), {2, 3, 4, 5, 6}});
  p2.prefills.push_back({1, 0, 40, false});
  p2.decodes = {{0}};
  const StepLayout& l2 = Step(p2);
  EXPECT_THAT(l2.row_changes, ElementsAre(0, 0));  // slot 0 takes decode row 0
  EXPECT_EQ(l2.decode_rows, 1);
  EXPECT_EQ(l2.rows, 64);
  EXPECT_EQ(l2.prefill_rows, 63);
  EXPECT_EQ(l2.sample_rows[0], 63);  // only the decode row samples
  EXPECT_EQ(l2.sample_rows[1], -1);
  EXPECT_EQ(l2.num_sample_rows, 16);
}

TEST_F(SlotMirrorTest, SteadyDecodeUploadsNothingAndRowsStayPut) {
  for (int32_t s = 0; s < 3; ++s) Step(AdmitAndPrefill(1 + s, s, 4));
  engine::StepPlan d;
  d.step_id = 10;
  d.decodes = {{0}, {1}, {2}};
  const StepLayout& l = Step(d);
  EXPECT_EQ(l.row_changes.size(), 6u);
  EXPECT_TRUE(l.identity_sampling);
  EXPECT_EQ(l.decode_rows, 4);  // bucket holding 3 rows
  EXPECT_EQ(l.rows, 4);
  EXPECT_EQ(l.num_sample_rows, 4);
  EXPECT_EQ(mirror_.decode_row(1), 1);

  d.step_id = 11;
  EXPECT_TRUE(Step(d).upload_empty());  // nothing changed: nothing to copy

  // Slot 1 ends; 0 and 2 keep their rows; the bucket still holds row 2.
  engine::StepPlan e;
  e.step_id = 12;
  e.releases = {1};
  e.decodes = {{0}, {2}};
  const StepLayout& l2 = Step(e);
  EXPECT_THAT(l2.row_changes, ElementsAre(1, -1));
  EXPECT_EQ(mirror_.decode_row(0), 0);
  EXPECT_EQ(mirror_.decode_row(2), 2);
  EXPECT_EQ(mirror_.rows_in_use(), 3);
  EXPECT_EQ(l2.decode_rows, 4);

  // A new request in slot 1 decodes from the step after its prompt, in the lowest free row;
  // meanwhile the others keep decoding (a slot left out of a plan's decodes loses its row).
  engine::StepPlan admit = AdmitAndPrefill(13, 1, 4);
  admit.decodes = {{0}, {2}};
  EXPECT_TRUE(Step(admit).row_changes.empty());
  engine::StepPlan f;
  f.step_id = 14;
  f.decodes = {{0}, {1}, {2}};
  const StepLayout& l3 = Step(f);
  EXPECT_THAT(l3.row_changes, ElementsAre(1, 1));
  // Slot 2 released and slot 0 stops: the used rows shrink to the bucket of 2.
  engine::StepPlan g;
  g.step_id = 15;
  g.releases = {2};
  g.decodes = {{0}, {1}};
  const StepLayout& l4 = Step(g);
  EXPECT_EQ(mirror_.rows_in_use(), 2);
  EXPECT_EQ(l4.decode_rows, 2);
}

// Speculative decoding: a plan whose decodes carry proposals lays each decoding slot out as a
// verify group of consecutive rows (1 + the most proposals, rounded up to 1 + a power of two),
// uploads each decode row's allowance, and falls back to one row a slot past the capacity.
TEST(SlotMirrorSpeculativeTest, DecodesWithProposalsBecomeVerifyGroups) {
  StepLimits limits = Limits();
  limits.spec_group = 5;  // engine.speculative.num_tokens 4
  limits.max_decode_rows = 20;
  SlotMirror mirror(limits, MakeBuckets(8));
  StepLayout l;
  const auto step = [&](const engine::StepPlan& plan) {
    const absl::Status st = mirror.Check(plan);
    EXPECT_TRUE(st.ok()) << st;
    mirror.Apply(plan, l);
  };
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
    const auto step = [&](const engine::StepPlan& plan) {
      const absl::Status st = mirror.Check(plan);
      ASSERT_TRUE(st.ok()) << st;
      mirror.Apply(plan, l);
    };
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
  const auto step = [&](const engine::StepPlan& plan) {
    const absl::Status st = mirror.Check(plan);
    EXPECT_TRUE(st.ok()) << st;
    mirror.Apply(plan, l);
  };
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

TEST_F(SlotMirrorTest, ReleaseAndReadmitInOnePlan) {
  Step(AdmitAndPrefill(1, 0, 4));
  engine::StepPlan d;
  d.step_id = 2;
  d.decodes = {{0}};
  Step(d);
  engine::StepPlan p = AdmitAndPrefill(3, 0, 6);
  p.releases = {0};
  const StepLayout& l = Step(p);
  EXPECT_THAT(l.row_changes, ElementsAre(0, -1));
  EXPECT_EQ(l.admits.size(), 1u);
  EXPECT_EQ(l.bucket, -1);
  // Its decode is accepted only from the next step.
  engine::StepPlan bad;
  bad.step_id = 4;
  bad.prefills = {{0, 0, 6, true}};
  EXPECT_FALSE(mirror_.Check(bad).ok());  // the prompt is already complete
  d.step_id = 5;
  EXPECT_TRUE(mirror_.Check(d).ok());
}

// The sampler's two-launch path is taken only when every slot that samples in the step is
// greedy without logprobs: a decode, or a prompt completing in a mixed step; a prompt chunk
// that samples nothing does not count, nor does a slot once released.
TEST_F(SlotMirrorTest, ArgmaxOnlyWhenEverySamplingSlotIsGreedyWithoutLogprobs) {
  const auto admit = [&](uint64_t id, int32_t slot, int32_t prompt_len, bool samples,
                         auto&& settings) {
    engine::StepPlan p;
    p.step_id = id;
    auto r = std::make_shared<engine::EngineRequest>(*Request(100 + slot, prompt_len));
    settings(*r);
    p.admissions.push_back({slot, r, {slot * 2, slot * 2 + 1}});
    p.prefills.push_back({slot, 0, samples ? prompt_len : prompt_len - 1, samples});
    return p;
  };
  const auto greedy = [](engine::EngineRequest& r) { r.sampling.temperature = 0; };
  const auto drawn = [](engine::EngineRequest& r) { r.sampling.temperature = 0.7f; };
  const auto logprobs = [](engine::EngineRequest& r) {
    r.sampling.temperature = 0;
    r.want_logprobs = true;
  };
  const auto top_logprobs = [](engine::EngineRequest& r) {
    r.sampling.temperature = 0;
    r.num_top_logprobs = 2;
  };
  // Greedy with penalties still only needs the argmax (penalties apply in the first kernel).
  const auto penalised = [](engine::EngineRequest& r) {
    r.sampling.temperature = 0;
    r.sampling.repetition_penalty = 1.2f;
  };

  EXPECT_TRUE(Step(admit(1, 0, 4, true, greedy)).argmax_only);
  EXPECT_FALSE(Step(admit(2, 1, 4, true, drawn)).argmax_only);  // completes: samples
  engine::StepPlan d;
  d.step_id = 3;
  d.decodes = {{0}, {1}};
  EXPECT_FALSE(Step(d).argmax_only);
  d.step_id = 4;
  d.decodes = {{0}};  // slot 1 stops decoding
  EXPECT_TRUE(Step(d).argmax_only);

  // A drawn prompt whose chunk does not complete it samples nothing.
  engine::StepPlan p = admit(5, 2, 4, false, drawn);
  p.decodes = {{0}};
  EXPECT_TRUE(Step(p).argmax_only);

  // Logprobs of either kind need the probabilities; penalties do not.
  for (const auto& [id, settings, want] :
       std::vector<std::tuple<uint64_t, std::function<void(engine::EngineRequest&)>, bool>>{
           {6, logprobs, false}, {8, top_logprobs, false}, {10, penalised, true}}) {
    engine::StepPlan a = admit(id, 3, 4, true, settings);
    a.releases = id == 6 ? std::vector<int32_t>{} : std::vector<int32_t>{3};
    a.decodes = {{0}};
    EXPECT_EQ(Step(a).argmax_only, want) << "step " << id;
    engine::StepPlan next;
    next.step_id = id + 1;
    next.decodes = {{0}, {3}};
    EXPECT_EQ(Step(next).argmax_only, want) << "step " << id + 1;
  }

  // The drawn slot 1, released, no longer counts.
  engine::StepPlan r;
  r.step_id = 12;
  r.releases = {1};
  r.decodes = {{0}, {3}};
  EXPECT_TRUE(Step(r).argmax_only);
}

TEST_F(SlotMirrorTest, BadPlansAreRefusedAndChangeNothing) {
  Step(AdmitAndPrefill(1, 0, 4));
  engine::StepPlan p;
  p.step_id = 7;
  p.releases = {8};
  Refused(p, "release of slot 8");
  p = {};
  p.admissions.push_back({0, Request(5, 4), {4}});
  Refused(p, "busy slot 0");
  p = {};
  p.admissions.push_back({1, Request(5, 20), {4}});  // a 20-token prompt, 1 block
  Refused(p, "blocks do not cover");
  p = {};
  p.admissions.push_back({1, Request(5, 4, 200), {4}});  // 204 tokens: past the context
  Refused(p, "blocks do not cover");
  p = {};
  p.admissions.push_back({1, Request(5, 4), {64}});
  Refused(p, "KV block 64");
  p = {};
  auto many_stops = Request(5, 4);
  std::const_pointer_cast<engine::EngineRequest>(many_stops)->stop_token_ids.assign(81, 3);
  p.admissions.push_back({1, many_stops, {4}});
  Refused(p, "limits");
  p = {};
  p.admissions.push_back({1, Request(5, 4), {4}});
  p.decodes = {{1}};  // decodes before its prompt is in
  Refused(p, "decode of slot 1");
  p = {};
  p.decodes = {{0}, {0}};
  Refused(p, "twice");
  p = {};
  p.decodes = {{0, 4}};  // proposals: the CUDA runner does not verify them yet
  Refused(p, "does not speculate");
  p = {};
  p.prefills = {{3, 0, 2, false}};
  Refused(p, "bad prefill of slot 3");
  p = {};
  p.admissions.push_back({1, Request(5, 90), {4, 5, 6, 7, 8, 9, 10}});
  p.admissions.push_back({2, Request(6, 20), {11, 12}});
  p.prefills = {{1, 0, 90, true}, {2, 0, 20, true}};
  Refused(p, "110 prompt tokens");
  // Nothing above took effect: slot 0 still decodes, slot 1 is still free.
  p = {};
  p.step_id = 8;
  p.decodes = {{0}};
  p.admissions.push_back({1, Request(9, 4), {4}});
  p.prefills = {{1, 0, 4, true}};
  EXPECT_TRUE(mirror_.Check(p).ok());
}

// KV on demand: a grant appends to a running slot's block table (after the admissions, in the
// same upload); a decode must write inside the slot's blocks.
TEST_F(SlotMirrorTest, GrantsExtendABlockTableAndDecodesStayInside) {
  engine::StepPlan p;
  p.step_id = 1;
  p.admissions.push_back({0, Request(100, 15), {7}});
  p.prefills.push_back({0, 0, 15, true});
  Step(p);
  engine::StepPlan d;
  d.step_id = 2;
  d.decodes = {{0}};
  Step(d);  // writes position 15, the first block's last
  d.step_id = 3;
  const absl::Status past = mirror_.Check(d);
  EXPECT_THAT(std::string(past.message()), HasSubstr("past its 1 KV blocks"));
  d.grants.push_back({0, {9}});
  const StepLayout& l = Step(d);
  ASSERT_EQ(l.grants.size(), 1u);
  EXPECT_EQ(l.grants[0].slot, 0);
  EXPECT_EQ(l.grants[0].first, 1);
  EXPECT_EQ(l.grants[0].num_blocks, 1);
  EXPECT_THAT(l.blocks, ElementsAre(9));
  EXPECT_FALSE(l.upload_empty());
  // Positions 16..31 fit the second block.
  d = {};
  d.step_id = 4;
  d.decodes = {{0}};
  EXPECT_TRUE(Step(d).upload_empty());
}

TEST_F(SlotMirrorTest, BadGrantsAreRefused) {
  Step(AdmitAndPrefill(1, 0, 4));
  engine::StepPlan p;
  p.step_id = 2;
  p.grants.push_back({1, {20}});  // a free slot
  Refused(p, "grant to slot 1");
  p = {};
  p.admissions.push_back({1, Request(5, 4), {4}});
  p.grants.push_back({1, {20}});  // admitted by the same plan
  Refused(p, "grant to slot 1");
  p = {};
  p.grants.push_back({0, {20, 21, 22, 23, 24, 25, 26}});  // 2 + 7 > 8 per table
  Refused(p, "overflow");
  p = {};
  p.grants.push_back({0, {64}});
  Refused(p, "KV block 64");
  p = {};
  p.grants.push_back({0, {20}});
  p.grants.push_back({0, {21}});
  Refused(p, "twice");
}

// A readmitted request prefills its prompt and the tokens it generated before its preemption;
// the device counts those as generated (the sampler's counter and the penalties).
TEST_F(SlotMirrorTest, AReadmissionPrefillsItsResumedTokens) {
  engine::StepPlan p;
  p.step_id = 1;
  engine::SlotAdmission a{1, Request(100, 4), {3}, {500, 501, 502}, true};
  p.admissions.push_back(a);
  p.prefills.push_back({1, 0, 8, true});
  EXPECT_THAT(std::string(mirror_.Check(p).message()), HasSubstr("bad prefill of slot 1"));
  p.prefills = {{1, 0, 7, true}};
  const StepLayout& l = Step(p);
  ASSERT_EQ(l.admits.size(), 1u);
  EXPECT_EQ(l.admits[0].generated, 3);
  EXPECT_EQ(l.settings[0].prompt_tokens, 4);
  EXPECT_THAT(std::vector<int32_t>(l.prefill_token.begin(), l.prefill_token.begin() + 7),
              ElementsAre(100, 101, 102, 103, 500, 501, 502));
  engine::StepPlan bad;
  bad.step_id = 2;
  bad.admissions.push_back({2, Request(101, 4), {4}, {5000}, true});  // outside the vocabulary
  EXPECT_THAT(std::string(mirror_.Check(bad).message()), HasSubstr("prompt token 5000"));
  bad.admissions = {{2, Request(101, 4, 2), {4}, {5, 6}, true}};  // max_tokens already reached
  EXPECT_THAT(std::string(mirror_.Check(bad).message()), HasSubstr("limits"));
}

}  // namespace
}  // namespace llm::runner::cuda
