// The CUDA runner's host logic, without a GPU: plan checks, decode-row bookkeeping, what a step
// uploads, and the batch layout (speculative decoding's: step_layout_speculative_test.cc).
#include "worker/runner/cuda/step_layout.h"

#include <functional>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/runner/cuda/step_layout_test_util.h"

namespace llm::runner::cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SlotMirrorTest : public ::testing::Test {
 protected:
  SlotMirrorTest() : mirror_(Limits(), MakeBuckets(8)) {}

  // Checks and applies; fails the test on a refused plan.
  const StepLayout& Step(const engine::StepPlan& plan) {
    CheckAndApply(mirror_, plan, layout_);
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
