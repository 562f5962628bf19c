#include "worker/engine/scheduler.h"

#include <map>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm::engine {
namespace {

using sampling::FinishReason;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

RequestPtr Req(uint64_t key, int32_t prompt, int32_t max_tokens) {
  auto r = std::make_shared<EngineRequest>();
  r->key = key;
  r->prompt_ids.assign(prompt, 7);
  r->max_tokens = max_tokens;
  return r;
}

// Plays the runner's part: keeps each slot's generated count and reports a stop token after
// `eos_after[key]` tokens (if set) or kLength at max_tokens. Token value = generated index.
// A decode with proposals accepts `accept` of them (at most max_draft), each an output of its
// own, ending at the first that finishes the request.
class FakeRunner {
 public:
  std::map<uint64_t, int> eos_after;
  int32_t accept = 0;

  StepResult Run(const StepPlan& plan) {
    for (int32_t s : plan.releases) slots_.erase(s);
    for (const auto& a : plan.admissions) slots_[a.slot] = {a.request, 0, false};
    StepResult r;
    r.step_id = plan.step_id;
    auto sample = [&](int32_t s) {
      auto& st = slots_.at(s);
      if (st.finished) return;  // the pipeline's extra step: nothing to report
      const int32_t tok = st.generated++;
      FinishReason f = FinishReason::kNone;
      if (eos_after.count(st.req->key) && st.generated == eos_after[st.req->key]) {
        f = FinishReason::kStopToken;
      } else if (st.generated >= st.req->max_tokens) {
        f = FinishReason::kLength;
      }
      st.finished = f != FinishReason::kNone;
      r.outputs.push_back(SlotOutput{s, st.req->key, {tok, 0.0f, {}}, f});
    };
    for (const auto& p : plan.prefills) {
      if (p.samples) sample(p.slot);
    }
    for (const auto& d : plan.decodes) {
      const size_t first = r.outputs.size();
      sample(d.slot);
      if (r.outputs.size() == first || d.max_draft == 0) continue;
      const int32_t accepted = std::min(accept, d.max_draft);
      for (int32_t j = 0; j < accepted && !slots_.at(d.slot).finished; ++j) sample(d.slot);
      r.outputs[first].draft_tokens = d.max_draft;
      r.outputs[first].accepted_tokens = static_cast<int32_t>(r.outputs.size() - first - 1);
    }
    return r;
  }

 private:
  struct State {
    RequestPtr req;
    int32_t generated;
    bool finished;
  };
  std::map<int32_t, State> slots_;
};

// The slots a plan decodes, in order.
std::vector<int32_t> DecodeSlots(const StepPlan& plan) {
  std::vector<int32_t> slots;
  for (const DecodeChunk& d : plan.decodes) slots.push_back(d.slot);
  return slots;
}

SchedulerConfig Config(int32_t slots, int32_t blocks, int32_t batch = 64, int32_t prefill = 32) {
  SchedulerConfig c;
  c.sizes = {.max_slots = slots, .kv_blocks = blocks, .block_tokens = 16};
  c.max_batch_tokens = batch;
  c.max_prefill_tokens = prefill;
  return c;
}

// Runs synchronously until idle; returns each request's tokens.
std::map<uint64_t, std::vector<int32_t>> RunAll(Scheduler& s, FakeRunner& runner,
                                                int max_steps = 1000) {
  std::map<uint64_t, std::vector<int32_t>> out;
  std::vector<TokenEvent> events;
  for (int i = 0; i < max_steps && !s.idle(); ++i) {
    const StepPlan plan = s.Schedule();
    if (s.config().max_batch_tokens > 0) {
      EXPECT_LE(plan.num_tokens(), s.config().max_batch_tokens);
    }
    events.clear();
    s.Update(runner.Run(plan), events);
    for (const auto& e : events) out[e.request_key].push_back(e.sampled.token_id);
  }
  EXPECT_TRUE(s.idle());
  return out;
}

TEST(SchedulerTest, ConfigValidationNamesTheField) {
  SchedulerConfig c = Config(4, 10);
  c.sizes.max_slots = 0;
  EXPECT_NE(c.Validate().message().find("max_slots"), std::string::npos);
  c = Config(64, 10, 32);
  EXPECT_NE(c.Validate().message().find("max_batch_tokens"), std::string::npos);
  c = Config(64, 10, 0);  // no cap
  EXPECT_TRUE(c.Validate().ok());
  c.max_prefill_tokens_alone = -1;
  EXPECT_NE(c.Validate().message().find("max_prefill_tokens_alone"), std::string::npos);
  EXPECT_TRUE(Config(4, 10).Validate().ok());
}

SchedulerConfig Speculating(SchedulerConfig c, int32_t num_tokens) {
  c.speculative.method = SpeculativeMethod::kNgram;
  c.speculative.num_tokens = num_tokens;
  c.speculative.adaptive = false;
  return c;
}

// Decode chunks carry the proposals the policy allows, never past max_tokens, none for a
// request that opted out; a capped step keeps its prompt budget.
TEST(SchedulerTest, DecodeChunksCarryProposals) {
  Scheduler s(Speculating(Config(4, 100, /*batch=*/0), 4));
  auto opted_out = std::make_shared<EngineRequest>(*Req(3, 4, 50));
  opted_out->speculate = false;
  auto constrained = std::make_shared<EngineRequest>(*Req(4, 4, 50));
  constrained->constraint =
      *constraint::Compile({constraint::Kind::kChoice, "", {"a"}},
                           std::make_shared<constraint::TokenTable>(std::vector<std::string>{"a"}));
  s.Add(Req(1, 4, 50));
  s.Add(Req(2, 4, 3));
  s.Add(opted_out);
  s.Add(constrained);
  FakeRunner runner;
  std::vector<TokenEvent> ev;
  s.Update(runner.Run(s.Schedule()), ev);  // the prompts; each samples its first token
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.decodes.size(), 4u);
  EXPECT_EQ(p.decodes[0].max_draft, 4);
  EXPECT_EQ(p.decodes[1].max_draft, 1);  // 1 sampled + this decode's own + 1 proposal = 3
  EXPECT_EQ(p.decodes[2].max_draft, 0);
  EXPECT_EQ(p.decodes[3].max_draft, 0);  // the runner cannot verify under masks
  EXPECT_EQ(p.num_tokens(), 4 + 5);
  EXPECT_EQ(p.num_draft_tokens(), 5);
  EXPECT_EQ(s.stats().draft_tokens_per_slot, 4);

  // A runner that verifies under masks (RunnerInfo::speculates_constrained) gets proposals
  // for the constrained request too.
  SchedulerConfig masked = Speculating(Config(4, 100, /*batch=*/0), 4);
  masked.speculate_constrained = true;
  Scheduler m(masked);
  m.Add(std::make_shared<EngineRequest>(*constrained));
  m.Update(runner.Run(m.Schedule()), ev);
  const StepPlan mp = m.Schedule();
  ASSERT_EQ(mp.decodes.size(), 1u);
  EXPECT_EQ(mp.decodes[0].max_draft, 4);

  // max_batch_tokens 40 with 32 prompt tokens a step: proposals get the 8 - 3 left over.
  Scheduler capped(Speculating(Config(4, 100, /*batch=*/40, /*prefill=*/32), 4));
  for (uint64_t k = 1; k <= 3; ++k) capped.Add(Req(k, 4, 50));
  capped.Update(runner.Run(capped.Schedule()), ev);
  capped.Add(Req(9, 100, 5));
  const StepPlan q = capped.Schedule();
  ASSERT_EQ(q.decodes.size(), 3u);
  EXPECT_EQ(q.decodes[0].max_draft, 1);
  ASSERT_EQ(q.prefills.size(), 1u);
  EXPECT_EQ(q.prefills[0].num_tokens, 32);
}

// Once the speculation policy settles on none at a batch size (here nothing is ever accepted
// and a step's time grows with its tokens), its plans say a draft model may lapse; never while
// it measures, never in a step with proposals. Where the runner lets its draft lapse
// (draft_lapses), a slot that decoded in such a plan gets no proposals afterwards, and the
// policy does not count a reprobe in which nobody could propose; a request admitted later
// speculates as before. Elsewhere reprobes keep their proposals.
TEST(SchedulerTest, PlansLetTheDraftLapseOnceSpeculationSettlesOff) {
  for (const bool lapses : {true, false}) {
    SchedulerConfig c = Speculating(Config(2, 400, /*batch=*/0), 4);
    c.speculative.adaptive = true;
    c.draft_lapses = lapses;
    Scheduler s(c);
    FakeRunner runner;
    s.Add(Req(1, 4, 3000));
    std::vector<TokenEvent> ev;
    const auto run = [&](const StepPlan& p) {
      StepResult r = runner.Run(p);
      r.device_seconds = 0.001 * p.num_tokens();
      s.Update(r, ev);
    };
    int first = -1, lapsing = 0, reprobes = 0;
    std::vector<int> samples_at_first;
    for (int step = 0; step < 400; ++step) {
      const StepPlan p = s.Schedule();
      if (p.draft_may_lapse) {
        EXPECT_EQ(p.num_draft_tokens(), 0) << step;
        if (first < 0) {
          first = step;
          for (const auto& cand : s.policy().candidates(1))
            samples_at_first.push_back(cand.samples);
        }
        ++lapsing;
      } else if (first >= 0) {
        ++reprobes;
        EXPECT_EQ(p.num_draft_tokens() > 0, !lapses) << step;  // a lapsed slot proposes nothing
      }
      run(p);
    }
    // The prompt's step, then four candidates (k = 4, 2, 1, 0) measured over 24 decodes each.
    EXPECT_EQ(first, 1 + 4 * static_cast<int>(SpeculationPolicy::kMinDecodes)) << lapses;
    EXPECT_GT(lapsing, 290) << lapses;
    EXPECT_GT(reprobes, 0) << lapses;
    // Reprobes without proposals are not counted as samples of their k.
    const auto& now = s.policy().candidates(1);
    for (size_t i = 0; i < now.size(); ++i) {
      if (now[i].k == 0) continue;
      if (lapses) {
        EXPECT_EQ(now[i].samples, samples_at_first[i]) << "k " << now[i].k;
      } else {
        EXPECT_GE(now[i].samples, samples_at_first[i]) << "k " << now[i].k;
      }
    }
    // A second request: two decode (another group, measured anew); it gets proposals, the
    // lapsed one does not.
    s.Add(Req(2, 4, 3000));
    run(s.Schedule());
    const StepPlan both = s.Schedule();
    ASSERT_EQ(both.decodes.size(), 2u);
    EXPECT_EQ(both.decodes[0].max_draft, lapses ? 0 : 4) << lapses;
    EXPECT_EQ(both.decodes[1].max_draft, 4) << lapses;
  }
}

// Several outputs of one slot in a step: they all count, a request reaching max_tokens inside
// a run ends there (its next planned decode gives nothing), and every block comes back.
TEST(SchedulerTest, AcceptedRunsEndRequestsEarlyAndFreeTheirBlocks) {
  Scheduler s(Speculating(Config(2, 20, /*batch=*/0), 4));
  FakeRunner runner;
  runner.accept = 3;
  s.Add(Req(1, 10, 10));
  s.Add(Req(2, 20, 23));
  s.Add(Req(3, 5, 7));
  const auto out = RunAll(s, runner);
  EXPECT_EQ(out.at(1).size(), 10u);
  EXPECT_EQ(out.at(2).size(), 23u);
  EXPECT_EQ(out.at(3).size(), 7u);
  for (const auto& [key, tokens] : out) {
    std::vector<int32_t> expected(tokens.size());
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(tokens, expected) << "request " << key;
  }
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_EQ(s.stats().free_slots, 2);
}

TEST(SchedulerTest, SlotsBoundAdmissionAndFreedSlotsAreRefilled) {
  Scheduler s(Config(2, 100));
  FakeRunner runner;
  for (uint64_t k = 1; k <= 3; ++k) s.Add(Req(k, 4, 3));
  StepPlan p1 = s.Schedule();
  ASSERT_EQ(p1.admissions.size(), 2u);
  EXPECT_EQ(s.stats().queued_requests, 1);
  EXPECT_EQ(s.stats().free_slots, 0);
  std::vector<TokenEvent> ev;
  s.Update(runner.Run(p1), ev);
  // Steps 2 and 3 decode; request 1 and 2 finish by length at step 3.
  for (int i = 0; i < 2; ++i) s.Update(runner.Run(s.Schedule()), ev);
  StepPlan p4 = s.Schedule();
  EXPECT_THAT(p4.releases, ElementsAre(0, 1));
  ASSERT_EQ(p4.admissions.size(), 1u);
  EXPECT_EQ(p4.admissions[0].slot, 0);  // the lowest free slot
  EXPECT_EQ(p4.admissions[0].request->key, 3u);
}

TEST(SchedulerTest, ReservedBlocksBoundAdmissionFirstComeFirstServed) {
  // Reserving (kv_on_demand off), 6 blocks of 16: request 1 needs 4 (prompt 40 + 20), request
  // 2 needs 3, request 3 needs 1.
  SchedulerConfig c = Config(4, 6);
  c.kv_on_demand = false;
  Scheduler s(c);
  FakeRunner runner;
  s.Add(Req(1, 40, 20));
  s.Add(Req(2, 30, 10));
  s.Add(Req(3, 4, 4));
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.admissions.size(), 1u);  // request 2 does not fit, and 3 may not overtake it
  EXPECT_EQ(p.admissions[0].blocks.size(), 4u);
  EXPECT_EQ(s.stats().kv_blocks_used, 4);
  std::vector<TokenEvent> first;
  s.Update(runner.Run(p), first);
  EXPECT_THAT(first, IsEmpty());  // a 40-token prompt needs two 32-token prefill steps
  const auto tokens = RunAll(s, runner);
  EXPECT_EQ(tokens.at(1).size(), 20u);
  EXPECT_EQ(tokens.at(2).size(), 10u);
  EXPECT_EQ(tokens.at(3).size(), 4u);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

TEST(SchedulerTest, LongPromptsArePrefilledInChunksAndDecodeNeverStalls) {
  Scheduler s(Config(4, 100, /*batch=*/64, /*prefill=*/32));
  FakeRunner runner;
  s.Add(Req(1, 5, 50));
  std::vector<TokenEvent> ev;
  s.Update(runner.Run(s.Schedule()), ev);  // request 1 prefilled in one chunk
  s.Add(Req(2, 100, 5));
  std::vector<int32_t> chunk_sizes;
  for (int i = 0; i < 4; ++i) {
    const StepPlan p = s.Schedule();
    EXPECT_THAT(DecodeSlots(p), ElementsAre(0)) << "step " << i;  // request 1 decodes every step
    ASSERT_EQ(p.prefills.size(), 1u);
    chunk_sizes.push_back(p.prefills[0].num_tokens);
    EXPECT_EQ(p.prefills[0].samples, i == 3);
    s.Update(runner.Run(p), ev);
  }
  EXPECT_THAT(chunk_sizes, ElementsAre(32, 32, 32, 4));
  // The step after the last chunk already decodes request 2.
  EXPECT_THAT(DecodeSlots(s.Schedule()), ElementsAre(0, 1));
}

// With nobody decoding, a prompt takes max_prefill_tokens_alone per step; while another
// request decodes, max_prefill_tokens.
TEST(SchedulerTest, APromptAloneTakesTheLongerChunk) {
  SchedulerConfig c = Config(4, 100, /*batch=*/0, /*prefill=*/32);
  c.max_prefill_tokens_alone = 80;
  c.prefix_cache = false;  // request 2's prompt would start with request 1's cached blocks
  EXPECT_EQ(c.PrefillBudget(0), 80);
  EXPECT_EQ(c.PrefillBudget(3), 32);
  Scheduler s(c);
  FakeRunner runner;
  std::vector<TokenEvent> ev;
  const auto chunks = [&] {
    std::vector<int32_t> sizes;
    while (true) {
      const StepPlan p = s.Schedule();
      s.Update(runner.Run(p), ev);
      if (p.prefills.empty()) break;
      sizes.push_back(p.prefills[0].num_tokens);
    }
    return sizes;
  };
  s.Add(Req(1, 200, 50));
  EXPECT_THAT(chunks(), ElementsAre(80, 80, 40));  // request 1 alone
  s.Add(Req(2, 100, 5));
  EXPECT_THAT(chunks(), ElementsAre(32, 32, 32, 4));  // request 1 decodes meanwhile
  EXPECT_EQ(RunAll(s, runner).size(), 2u);

  // Not above max_batch_tokens, and never below max_prefill_tokens.
  c.max_batch_tokens = 50;
  Scheduler capped(c);
  capped.Add(Req(1, 200, 3));
  EXPECT_EQ(capped.Schedule().prefills[0].num_tokens, 50);
  c.max_batch_tokens = 0;
  c.max_prefill_tokens_alone = 8;
  Scheduler shorter(c);
  shorter.Add(Req(1, 200, 3));
  EXPECT_EQ(shorter.Schedule().prefills[0].num_tokens, 32);
}

// With max_decode_slowdown, a long prompt's chunks are spaced out while another request
// decodes, so that the decoder's time per token stays within the ratio; a short prompt that
// arrives meanwhile is not held back; and the long prompt still finishes.
TEST(SchedulerTest, ALongPromptIsPacedWhileOthersDecode) {
  SchedulerConfig c = Config(4, 200, /*batch=*/0, /*prefill=*/32);
  c.max_decode_slowdown = 2;
  c.prefix_cache = false;
  Scheduler s(c);
  FakeRunner runner;
  std::vector<TokenEvent> ev;
  // The device: 1 ms a step, 0.1 ms a prompt token (a chunk of 32: 4.2 ms).
  const auto step = [&] {
    const StepPlan p = s.Schedule();
    StepResult r = runner.Run(p);
    int32_t prompt = 0;
    for (const PrefillChunk& chunk : p.prefills) prompt += chunk.num_tokens;
    r.device_seconds = 0.001 + 0.0001 * prompt;
    s.Update(r, ev);
    return std::make_pair(p, r.device_seconds);
  };
  s.Add(Req(1, 10, 400));
  for (int i = 0; step().first.decodes.empty(); ++i) ASSERT_LT(i, 10);  // request 1 decodes
  // Request 2: ten chunks.
  s.Add(Req(2, 320, 3));
  double seconds = 0;
  int steps = 0, chunks = 0;
  int32_t long_slot = -1;
  int short_admitted = 0, waited = 0;
  for (bool done = false; !done;) {
    if (steps == 10) s.Add(Req(3, 20, 2));
    const auto [p, t] = step();
    ++steps;
    ASSERT_FALSE(p.decodes.empty());
    seconds += t;
    for (const SlotAdmission& a : p.admissions) {
      if (a.request->key == 2) long_slot = a.slot;
      if (a.request->key == 3) short_admitted = steps;
    }
    bool chunk_of_long = false;
    for (const PrefillChunk& chunk : p.prefills) {
      if (chunk.slot != long_slot) continue;
      ++chunks;
      chunk_of_long = true;
      done = chunk.samples;
    }
    waited += chunk_of_long ? 0 : 1;
    ASSERT_LT(steps, 200);
  }
  // A short prompt is not paced: its one chunk comes in the next step whose budget the long
  // prompt does not take.
  EXPECT_GE(short_admitted, 11);
  EXPECT_LE(short_admitted, 12);
  EXPECT_EQ(chunks, 10);
  EXPECT_LE(seconds / steps, 0.002 * 1.05) << steps << " steps";
  EXPECT_GT(steps, 20) << "unpaced it takes 10";
  // Every step without a chunk of the long prompt counts as paced, except those whose budget
  // went elsewhere (the short prompt's chunk, a step that measures the decode-only time).
  EXPECT_LE(s.stats().paced_steps, static_cast<uint64_t>(waited));
  EXPECT_GE(s.stats().paced_steps + 3, static_cast<uint64_t>(waited));
  EXPECT_TRUE(s.CheckAccounting().ok());
}

TEST(SchedulerTest, BatchTokenBudgetIsRespected) {
  Scheduler s(Config(8, 200, /*batch=*/20, /*prefill=*/100));
  FakeRunner runner;
  for (uint64_t k = 1; k <= 8; ++k) s.Add(Req(k, 10, 6));
  const auto tokens = RunAll(s, runner);  // RunAll checks num_tokens <= 20 every step
  for (uint64_t k = 1; k <= 8; ++k) EXPECT_EQ(tokens.at(k).size(), 6u);
}

// With step N+1 launched before step N's result is applied, a request that stops at step N
// still decodes in N+1; that output is dropped and the slot is retired at N+2.
TEST(SchedulerTest, PipelinedExtraStepIsDiscarded) {
  Scheduler s(Config(2, 100));
  FakeRunner runner;
  runner.eos_after[1] = 2;
  s.Add(Req(1, 3, 10));
  std::vector<TokenEvent> ev;
  StepPlan p1 = s.Schedule();  // prefill, samples token 0
  StepPlan p2 = s.Schedule();  // decode (planned without p1's result)
  EXPECT_THAT(DecodeSlots(p2), ElementsAre(0));
  s.Update(runner.Run(p1), ev);
  StepPlan p3 = s.Schedule();    // decode again: nothing known yet about p2
  s.Update(runner.Run(p2), ev);  // token 1 with a stop: request 1 ends
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].finish, FinishReason::kStopToken);
  s.Update(runner.Run(p3), ev);  // the extra step: the fake reports nothing, and any output
  EXPECT_EQ(ev.size(), 2u);      // would be dropped
  StepPlan p4 = s.Schedule();
  EXPECT_TRUE(p4.empty());
  EXPECT_THAT(p4.releases, IsEmpty());  // nothing to launch: the release waits for a plan that is
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_TRUE(s.idle());
}

TEST(SchedulerTest, OutputsOfAnEndedOrReassignedSlotAreDropped) {
  Scheduler s(Config(1, 100));
  s.Add(Req(1, 3, 10));
  StepPlan p1 = s.Schedule();
  ASSERT_TRUE(s.Abort(1));
  std::vector<TokenEvent> ev;
  s.Update(StepResult{p1.step_id, {SlotOutput{0, 1, {42, 0.0f, {}}}}, 0}, ev);
  EXPECT_THAT(ev, IsEmpty());  // ended
  s.Add(Req(2, 3, 10));
  StepPlan p2 = s.Schedule();
  ASSERT_EQ(p2.admissions.size(), 1u);
  EXPECT_EQ(p2.admissions[0].slot, 0);
  s.Update(StepResult{p1.step_id, {SlotOutput{0, 1, {43, 0.0f, {}}}}, 0}, ev);
  EXPECT_THAT(ev, IsEmpty());  // slot 0 now belongs to request 2
  s.Update(StepResult{p2.step_id, {SlotOutput{0, 2, {44, 0.0f, {}}}}, 0}, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].request_key, 2u);
}

TEST(SchedulerTest, AbortQueuedAndRunning) {
  Scheduler s(Config(1, 100));
  s.Add(Req(1, 3, 10));
  s.Add(Req(2, 5, 10));
  s.Schedule();  // 1 runs, 2 waits
  EXPECT_EQ(s.stats().queued_prompt_tokens, 5);
  EXPECT_TRUE(s.Abort(2));
  EXPECT_EQ(s.stats().queued_requests, 0);
  EXPECT_EQ(s.stats().queued_prompt_tokens, 0);
  EXPECT_FALSE(s.Abort(2));
  EXPECT_FALSE(s.Abort(99));
  EXPECT_TRUE(s.Abort(1));
  EXPECT_FALSE(s.Abort(1));
  EXPECT_EQ(s.stats().running_requests, 1);  // until the next step retires it
  const StepPlan p = s.Schedule();
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_EQ(s.stats().free_slots, 1);
}

TEST(SchedulerTest, ReleasesOfAPlanThatComputesNothingGoOutWithTheNextPlan) {
  // The engine does not launch a plan without tokens; the scheduler, not the engine loop, keeps
  // the slots such a plan retired until a plan that is launched releases them.
  Scheduler s(Config(2, 100));
  s.Add(Req(1, 3, 10));
  s.Add(Req(2, 3, 10));
  ASSERT_EQ(s.Schedule().admissions.size(), 2u);
  ASSERT_TRUE(s.Abort(1));
  ASSERT_TRUE(s.Abort(2));
  const StepPlan quiet = s.Schedule();
  EXPECT_TRUE(quiet.empty());
  EXPECT_THAT(quiet.releases, IsEmpty());
  EXPECT_TRUE(s.idle());
  EXPECT_TRUE(s.Schedule().releases.empty());  // still nothing to launch
  s.Add(Req(3, 3, 10));
  const StepPlan next = s.Schedule();
  EXPECT_THAT(next.releases, ElementsAre(0, 1));  // before its admission into slot 0
  ASSERT_EQ(next.admissions.size(), 1u);
  EXPECT_EQ(next.admissions[0].slot, 0);
  EXPECT_FALSE(next.empty());
  s.Abort(3);
  EXPECT_TRUE(s.Schedule().releases.empty());
  s.Add(Req(4, 3, 10));
  EXPECT_THAT(s.Schedule().releases, ElementsAre(0));  // each retired slot released once
}

TEST(SchedulerTest, LengthFinishPlansNoExtraStep) {
  Scheduler s(Config(1, 100));
  s.Add(Req(1, 3, 2));
  StepPlan p1 = s.Schedule();  // prefill: token 0
  StepPlan p2 = s.Schedule();  // decode: token 1 (the last)
  StepPlan p3 = s.Schedule();  // nothing left to plan
  EXPECT_THAT(DecodeSlots(p2), ElementsAre(0));
  EXPECT_TRUE(p3.empty());
}

TEST(SchedulerTest, ChurnLeavesNothingBehind) {
  Scheduler s(Config(8, 64));
  FakeRunner runner;
  uint64_t key = 1;
  std::vector<TokenEvent> ev;
  for (int step = 0; step < 500; ++step) {
    if (step % 3 == 0) {
      s.Add(Req(key, 1 + (key * 7) % 40, 1 + (key * 5) % 30));
      ++key;
    }
    if (step % 7 == 0 && key > 3) s.Abort(key - 3);
    s.Update(runner.Run(s.Schedule()), ev);
  }
  RunAll(s, runner);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_EQ(s.stats().free_slots, 8);
  EXPECT_EQ(s.stats().running_requests, 0);
}

}  // namespace
}  // namespace llm::engine
