// KV blocks on demand in the scheduler: admission by the prefix and the headroom rule, blocks
// granted at block boundaries, preemption of the newest request when the pool runs out, and
// readmission that continues each request's tokens with nothing lost or repeated. The fake
// runner checks every write against the slot's block table; every step ends with every block
// accounted for (Scheduler::CheckAccounting).
#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/scheduler.h"

namespace llm::engine {
namespace {

using sampling::FinishReason;

constexpr int32_t kBt = 16;

// The token a request's runner samples as its output `i`: a function of the request and the
// index only (as greedy decoding and a seeded counter-based sampler are), so a readmitted
// request must continue with the same tokens.
int32_t TokenAt(uint64_t key, int32_t i) {
  return static_cast<int32_t>((key * 7919 + static_cast<uint64_t>(i) * 104729) % 50000);
}

SchedulerConfig Config(int32_t slots, int32_t blocks) {
  SchedulerConfig c;
  c.sizes = {.max_slots = slots, .kv_blocks = blocks, .block_tokens = kBt};
  c.max_batch_tokens = 0;
  c.max_prefill_tokens = 64;
  return c;
}

// With speculative decoding: every decode proposes `num_tokens` (n-gram, not adaptive).
SchedulerConfig Speculating(SchedulerConfig c, int32_t num_tokens) {
  c.speculative.method = SpeculativeMethod::kNgram;
  c.speculative.num_tokens = num_tokens;
  c.speculative.adaptive = false;
  return c;
}

// Plays the runner: applies releases, admissions (resumed tokens must be the request's own)
// and grants; fails the test for any write outside a slot's blocks, any block written while
// another slot holds it, or a prefill outside the prefix.
class FakeRunner {
 public:
  std::map<uint64_t, int32_t> eos_after;  // a stop token as output number n
  int32_t accept = 0;                     // proposals accepted per verifying decode
  // Per request, where the first prefill chunk of each readmission started (past its cache
  // hits).
  std::map<uint64_t, std::vector<int32_t>> readmission_starts;

  StepResult Run(const StepPlan& plan) {
    for (int32_t s : plan.releases) slots_.erase(s);
    for (const SlotAdmission& a : plan.admissions) Admit(a);
    for (const BlockGrant& g : plan.grants) {
      EXPECT_TRUE(slots_.count(g.slot)) << "grant to free slot " << g.slot;
      auto& b = slots_.at(g.slot).blocks;
      b.insert(b.end(), g.blocks.begin(), g.blocks.end());
    }
    StepResult r;
    r.step_id = plan.step_id;
    for (const PrefillChunk& p : plan.prefills) {
      State& st = slots_.at(p.slot);
      EXPECT_LE(p.start + p.num_tokens, st.prefix) << "prefill past the prefix";
      if (st.readmitted && !st.prefilled) readmission_starts[st.req->key].push_back(p.start);
      st.prefilled = true;
      for (int32_t pos = p.start; pos < p.start + p.num_tokens; ++pos) Write(p.slot, pos);
      if (p.samples) {
        EXPECT_EQ(p.start + p.num_tokens, st.prefix);
        Sample(p.slot, r);
      }
    }
    for (const DecodeChunk& d : plan.decodes) {
      State& st = slots_.at(d.slot);
      const auto position = static_cast<int32_t>(st.req->prompt_ids.size()) + st.generated - 1;
      // Proposals stop short of max_tokens (as CpuRunner's); the extra step of a finished slot
      // still writes its input's K/V (as the GPU does).
      const int32_t draft =
          std::clamp(std::min(d.max_draft, st.req->max_tokens - st.generated - 1), 0, d.max_draft);
      for (int32_t i = 0; i <= (st.finished ? 0 : draft); ++i) Write(d.slot, position + i);
      const size_t first = r.outputs.size();
      Sample(d.slot, r);
      if (r.outputs.size() == first || draft == 0) continue;
      const int32_t accepted = std::min(accept, draft);
      for (int32_t j = 0; j < accepted && !st.finished; ++j) Sample(d.slot, r);
      r.outputs[first].draft_tokens = draft;
      r.outputs[first].accepted_tokens = static_cast<int32_t>(r.outputs.size() - first - 1);
    }
    return r;
  }

 private:
  struct State {
    RequestPtr req;
    std::vector<int32_t> blocks;
    int32_t generated = 0;
    int32_t prefix = 0;
    bool finished = false;
    bool readmitted = false;
    bool prefilled = false;
  };

  void Admit(const SlotAdmission& a) {
    EXPECT_FALSE(slots_.count(a.slot)) << "admission into busy slot " << a.slot;
    State st{a.request, a.blocks, static_cast<int32_t>(a.resumed.size())};
    st.prefix = static_cast<int32_t>(a.request->prompt_ids.size() + a.resumed.size());
    for (size_t i = 0; i < a.resumed.size(); ++i) {
      EXPECT_EQ(a.resumed[i], TokenAt(a.request->key, static_cast<int32_t>(i)));
    }
    EXPECT_EQ(a.readmission || a.resumed.empty(), true);
    st.readmitted = a.readmission;
    slots_[a.slot] = std::move(st);
  }

  void Write(int32_t slot, int32_t pos) {
    const State& st = slots_.at(slot);
    ASSERT_LT(pos / kBt, static_cast<int32_t>(st.blocks.size()))
        << "request " << st.req->key << " writes position " << pos << " past its blocks";
    const int32_t block = st.blocks[static_cast<size_t>(pos / kBt)];
    for (const auto& [other, o] : slots_) {
      if (other == slot) continue;
      ASSERT_EQ(std::count(o.blocks.begin(), o.blocks.end(), block), 0)
          << "block " << block << " written by slot " << slot << " is held by slot " << other;
    }
  }

  void Sample(int32_t slot, StepResult& r) {
    State& st = slots_.at(slot);
    if (st.finished) return;  // the pipeline's extra step: nothing to report
    const uint64_t key = st.req->key;
    const int32_t token = TokenAt(key, st.generated++);
    FinishReason f = FinishReason::kNone;
    if (eos_after.count(key) && st.generated == eos_after[key]) {
      f = FinishReason::kStopToken;
    } else if (st.generated >= st.req->max_tokens) {
      f = FinishReason::kLength;
    }
    st.finished = f != FinishReason::kNone;
    r.outputs.push_back(SlotOutput{slot, key, {token, 0.0f, {}}, f});
  }

  std::map<int32_t, State> slots_;
};

struct Outcome {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, FinishReason> finish;
  int32_t max_running = 0;
};

// Drives the scheduler as the engine loop does, with `depth` plans in flight: Schedule and
// launch step N+1, then collect step N. Checks the accounting after every step, and that each
// request's events are its own tokens in order, none after its finish.
class Driver {
 public:
  Driver(Scheduler& s, FakeRunner& runner, int depth = 2) : s_(s), runner_(runner), depth_(depth) {}

  void Step() {
    const StepPlan plan = s_.Schedule();
    if (!plan.empty()) in_flight_.push_back(runner_.Run(plan));
    out.max_running = std::max(out.max_running, s_.stats().running_requests);
    if (static_cast<int>(in_flight_.size()) >= depth_ || (plan.empty() && !in_flight_.empty())) {
      events_.clear();
      s_.Update(in_flight_.front(), events_);
      in_flight_.pop_front();
      for (const TokenEvent& e : events_) Record(e);
    }
    const absl::Status accounted = s_.CheckAccounting();
    ASSERT_TRUE(accounted.ok()) << accounted;
  }
  // Steps until nothing is queued, running or in flight.
  void RunIdle(int max_steps = 20000) {
    for (int i = 0; i < max_steps && !(s_.idle() && in_flight_.empty()); ++i) {
      Step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_TRUE(s_.idle() && in_flight_.empty()) << "not idle after " << max_steps << " steps";
  }
  const std::vector<TokenEvent>& last_events() const { return events_; }

  Outcome out;

 private:
  void Record(const TokenEvent& e) {
    EXPECT_FALSE(out.finish.count(e.request_key)) << "event after the end";
    auto& seq = out.tokens[e.request_key];
    EXPECT_EQ(e.sampled.token_id, TokenAt(e.request_key, static_cast<int32_t>(seq.size())))
        << "request " << e.request_key << " token " << seq.size();
    seq.push_back(e.sampled.token_id);
    if (e.finish != FinishReason::kNone) out.finish[e.request_key] = e.finish;
  }

  Scheduler& s_;
  FakeRunner& runner_;
  int depth_;
  std::deque<StepResult> in_flight_;
  std::vector<TokenEvent> events_;
};

TEST(KvOnDemandTest, AdmissionTakesThePrefixAndKeepsABlockPerRunningRequest) {
  // 10 blocks; each request needs BlocksFor(20 + 1) = 2 at admission. Request n (n running
  // before it) is admitted while 2 + n <= the blocks left: 1 (10), 2 (8), 3 (6), then 4 would
  // need 2 + 3 of the 4 left.
  Scheduler s(Config(8, 10));
  for (uint64_t k = 1; k <= 5; ++k) s.Add(Req(k, Tokens(20, 1), 100));
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.admissions.size(), 3u);
  for (const SlotAdmission& a : p.admissions) EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(s.stats().kv_blocks_used, 6);
  EXPECT_EQ(s.stats().queued_requests, 2);
}

TEST(KvOnDemandTest, ARequestAloneMayTakeTheWholePool) {
  // Prompt 63 + first decode = 64 positions = the whole pool of 4 blocks.
  Scheduler s(Config(2, 4));
  s.Add(Req(1, Tokens(63, 1), 1));
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].blocks.size(), 4u);
}

TEST(KvOnDemandTest, ADecodingSlotTakesABlockWhenItCrossesABoundary) {
  Scheduler s(Config(2, 8));
  FakeRunner runner;
  s.Add(Req(1, Tokens(14, 1), 40));
  std::vector<TokenEvent> events;
  std::vector<size_t> blocks_after;  // the slot's blocks after each step's grants
  size_t held = 0;
  for (int step = 0; step < 20; ++step) {
    const StepPlan plan = s.Schedule();
    if (!plan.admissions.empty()) held = plan.admissions[0].blocks.size();
    for (const BlockGrant& g : plan.grants) held += g.blocks.size();
    blocks_after.push_back(held);
    s.Update(runner.Run(plan), events);
  }
  // Prompt 14 + first decode: 1 block. Decode n (n >= 1) writes position 13 + n: a second block
  // from position 16 (decode 3), a third from 32 (decode 19).
  EXPECT_EQ(blocks_after[0], 1u);  // the prefill
  EXPECT_EQ(blocks_after[2], 1u);  // decode 2 writes position 15
  EXPECT_EQ(blocks_after[3], 2u);  // decode 3 writes position 16
  EXPECT_EQ(blocks_after[18], 2u);
  EXPECT_EQ(blocks_after[19], 3u);
  EXPECT_TRUE(s.CheckAccounting().ok());
}

// Four requests whose prompt + max_tokens (5 blocks each) cannot all be held by 8 blocks: the
// newest is preempted, waits at the head of the queue, and continues where it stopped.
TEST(KvOnDemandTest, PreemptionLosesNothingAndRepeatsNothing) {
  for (const int depth : {1, 2}) {
    Scheduler s(Config(4, 8));
    FakeRunner runner;
    for (uint64_t k = 1; k <= 4; ++k) s.Add(Req(k, Tokens(10, static_cast<int32_t>(k)), 60));
    Driver d(s, runner, depth);
    d.RunIdle();
    const Outcome& out = d.out;
    ASSERT_TRUE(s.idle());
    EXPECT_GT(s.stats().preemptions, 0u);
    EXPECT_EQ(s.stats().preempted_requests, 0);
    for (uint64_t k = 1; k <= 4; ++k) {
      EXPECT_EQ(out.tokens.at(k).size(), 60u) << "request " << k;  // Drive checks the values
      EXPECT_EQ(out.finish.at(k), FinishReason::kLength);
    }
    EXPECT_EQ(s.stats().kv_blocks_used, 0);
  }
}

// Two requests of 16 prompt tokens on 5 blocks (Config(2, 5)): each holds 2 after admission
// (the second leaves one for the first). At their first boundary (decode 17) the older takes
// the last block and the newer is preempted; steps until then.
void StepUntilTheNewerIsPreempted(Scheduler& s, Driver& d) {
  s.Add(Req(1, Tokens(16, 1), 40));
  s.Add(Req(2, Tokens(16, 100), 40));
  for (int i = 0; i < 100 && s.stats().preemptions == 0; ++i) d.Step();
}

TEST(KvOnDemandTest, TheNewestRequestIsPreemptedAndRequeuedAtTheHead) {
  Scheduler s(Config(2, 5));
  FakeRunner runner;
  Driver d(s, runner, 1);
  StepUntilTheNewerIsPreempted(s, d);
  ASSERT_EQ(s.stats().preemptions, 1u);
  EXPECT_EQ(s.stats().queued_requests, 1);
  EXPECT_EQ(s.stats().preempted_requests, 1);
  EXPECT_EQ(s.stats().running_requests, 1);
  // The queue figures count the tokens it will recompute: its prompt and its outputs.
  EXPECT_EQ(d.out.tokens.at(2).size(), 17u);
  EXPECT_EQ(s.stats().queued_prompt_tokens, 16 + 17);
  // Its full blocks with final K/V (positions 0..31) stayed cached.
  EXPECT_EQ(s.stats().kv_blocks_cached, 2 + 1);  // and request 1's prompt block
  s.Add(Req(3, Tokens(4, 900), 4));  // behind it: it may not overtake the preempted request
  d.RunIdle();
  EXPECT_EQ(d.out.tokens.at(1).size(), 40u);
  EXPECT_EQ(d.out.tokens.at(2).size(), 40u);
  EXPECT_EQ(d.out.tokens.at(3).size(), 4u);
  // The readmission found its prompt's block still cached (its output block, the chain's tail,
  // was evicted first when request 1 grew) and prefilled from there.
  ASSERT_EQ(runner.readmission_starts[2].size(), 1u);
  EXPECT_EQ(runner.readmission_starts[2][0], 16);
  // Prefix-cache figures count prompts looked up, not readmissions.
  EXPECT_EQ(s.stats().prefix_query_tokens, 16 + 16 + 4);
}

// With a step in flight, a slot short of a block whose last decode is not back yet waits a
// step instead of preempting: here that decode ends the request (EOS), so nobody is preempted
// for the pipeline's extra step.
TEST(KvOnDemandTest, ASlotWhoseLastDecodeIsInFlightWaitsForItsBlock) {
  Scheduler s(Config(2, 5));
  FakeRunner runner;
  runner.eos_after[2] = 17;  // output 16, sampled by the decode before the boundary
  Driver d(s, runner, /*depth=*/2);
  s.Add(Req(1, Tokens(16, 1), 40));
  s.Add(Req(2, Tokens(16, 100), 40));
  d.RunIdle();
  EXPECT_EQ(s.stats().preemptions, 0u);
  EXPECT_EQ(d.out.tokens.at(1).size(), 40u);
  EXPECT_EQ(d.out.tokens.at(2).size(), 17u);
  EXPECT_EQ(d.out.finish.at(2), FinishReason::kStopToken);
}

// The same with speculation (two proposals a decode, both accepted): accepted proposals give a
// slot more outputs than its plans counted, yet a slot whose last decode is in flight still
// waits rather than preempting. (Counting outputs against planned ones preempted request 2 for
// the extra step of its EOS as output 17; an EOS after the slot's need, 18 here, is rightly a
// preemption.)
TEST(KvOnDemandTest, ASpeculatingSlotWhoseLastDecodeIsInFlightWaitsForItsBlock) {
  for (const int32_t eos : {15, 16, 17}) {
    Scheduler s(Speculating(Config(2, 5), 2));
    FakeRunner runner;
    runner.accept = 2;
    runner.eos_after[2] = eos;
    Driver d(s, runner, /*depth=*/2);
    s.Add(Req(1, Tokens(16, 1), 40));
    s.Add(Req(2, Tokens(16, 100), 40));
    d.RunIdle();
    EXPECT_EQ(s.stats().preemptions, 0u) << "EOS as output " << eos;
    EXPECT_EQ(d.out.tokens.at(1).size(), 40u);
    EXPECT_EQ(d.out.tokens.at(2).size(), static_cast<size_t>(eos));
  }
}

TEST(KvOnDemandTest, AbortingAPreemptedRequestWhileQueued) {
  Scheduler s(Config(2, 5));
  FakeRunner runner;
  Driver d(s, runner, 1);
  StepUntilTheNewerIsPreempted(s, d);
  ASSERT_EQ(s.stats().preempted_requests, 1);
  EXPECT_TRUE(s.Abort(2));
  EXPECT_FALSE(s.Abort(2));
  EXPECT_EQ(s.stats().preempted_requests, 0);
  EXPECT_EQ(s.stats().queued_prompt_tokens, 0);
  EXPECT_TRUE(s.CheckAccounting().ok());
  d.RunIdle();
  EXPECT_EQ(d.out.tokens.at(1).size(), 40u);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

TEST(KvOnDemandTest, ProposalsStayInsideTheSlotsBlocks) {
  Scheduler s(Speculating(Config(4, 12), 5));
  FakeRunner runner;  // checks every proposal's write
  runner.accept = 3;
  for (uint64_t k = 1; k <= 6; ++k) s.Add(Req(k, Tokens(9, static_cast<int32_t>(k)), 50));
  Driver d(s, runner);
  d.RunIdle();
  for (uint64_t k = 1; k <= 6; ++k) EXPECT_EQ(d.out.tokens.at(k).size(), 50u);
}

// 1,000 random requests over shared prefixes on a tight pool, with stop tokens, cancels
// (queued, running and preempted) and speculation: every block is accounted for after every
// step, every request's tokens are its own in order, and nothing is left at the end.
TEST(KvOnDemandTest, RandomRequestsOnATightPoolLeaveEverythingAccounted) {
  for (const bool speculate : {false, true}) {
    Scheduler s(speculate ? Speculating(Config(16, 48), 3) : Config(16, 48));
    FakeRunner runner;
    runner.accept = 2;
    std::mt19937 rng(speculate ? 11 : 7);
    std::vector<std::vector<int32_t>> prefixes;
    for (int g = 0; g < 12; ++g) prefixes.push_back(Tokens(16 * (1 + g % 3), 10000 * (g + 1)));
    Driver d(s, runner);
    std::map<uint64_t, int32_t> expected;  // tokens a request not aborted ends with
    std::set<uint64_t> aborted;
    for (uint64_t key = 1; key <= 1000; ++key) {
      std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
      const std::vector<int32_t> tail = Tokens(1 + static_cast<int32_t>(rng() % 30), 50);
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      const auto max_tokens = 1 + static_cast<int32_t>(rng() % 200);
      expected[key] = max_tokens;
      if (rng() % 2 == 0) {
        runner.eos_after[key] = expected[key] = 1 + static_cast<int32_t>(rng() % max_tokens);
      }
      s.Add(Req(key, std::move(prompt), max_tokens));
      if (rng() % 9 == 0) {
        const uint64_t victim = 1 + rng() % key;
        if (s.Abort(victim)) aborted.insert(victim);
      }
      for (int i = static_cast<int>(rng() % 3); i > 0; --i) {
        d.Step();
        ASSERT_FALSE(::testing::Test::HasFatalFailure());
      }
    }
    d.RunIdle();
    for (const auto& [key, n] : expected) {
      if (aborted.count(key)) continue;
      ASSERT_EQ(d.out.tokens[key].size(), static_cast<size_t>(n)) << "request " << key;
    }
    EXPECT_GE(d.out.max_running, 12);
    ASSERT_TRUE(s.idle());
    EXPECT_GT(s.stats().preemptions, 0u);
    const SchedulerStats st = s.stats();
    EXPECT_EQ(st.running_requests, 0);
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.preempted_requests, 0);
    EXPECT_EQ(st.kv_blocks_evictable + st.kv_blocks_free, st.kv_blocks_total);
    EXPECT_GT(st.prefix_hit_tokens, 0);
    EXPECT_TRUE(s.CheckAccounting().ok());
  }
}

}  // namespace
}  // namespace llm::engine
