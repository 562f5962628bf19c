// Prefix caching in the scheduler: sharing with reference counts, eviction order, whole and
// mid-block prefixes, cancels while shared, reservations that evict, a pool full of cached
// blocks. Every test ends with every block accounted for (referenced + evictable + free =
// total) and, when idle, nothing referenced.
#include <map>
#include <numeric>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/scheduler.h"

namespace llm::engine {
namespace {

using sampling::FinishReason;

constexpr int32_t kBt = 16;

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

SchedulerConfig Config(int32_t slots, int32_t blocks, bool cache = true) {
  SchedulerConfig c;
  c.sizes = {.max_slots = slots, .kv_blocks = blocks, .block_tokens = kBt};
  c.max_batch_tokens = 256;
  c.max_prefill_tokens = 128;
  c.prefix_cache = cache;
  return c;
}

void ExpectAccounted(const Scheduler& s) {
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.kv_blocks_used + st.kv_blocks_evictable + st.kv_blocks_free, st.kv_blocks_total);
  if (s.idle()) {
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

// Steps with a runner that samples token 0 and ends each request at max_tokens. Returns, per
// request, the prompt tokens its prefill chunks covered and the first event's cached count.
struct Outcome {
  int32_t prefilled = 0;
  int32_t cached = -1;
  int32_t tokens = 0;
};
class Driver {
 public:
  explicit Driver(Scheduler& s) : s_(s) {}
  StepPlan Step() {
    StepPlan plan = s_.Schedule();
    for (int32_t r : plan.releases) live_.erase(r);
    for (const auto& a : plan.admissions) live_[a.slot] = {a.request, 0};
    StepResult result;
    result.step_id = plan.step_id;
    const auto sample = [&](int32_t slot) {
      auto& [req, n] = live_.at(slot);
      if (n >= req->max_tokens) return;
      ++n;
      result.outputs.push_back(
          SlotOutput{slot,
                     req->key,
                     {0, 0.0f, {}},
                     n >= req->max_tokens ? FinishReason::kLength : FinishReason::kNone});
    };
    for (const auto& p : plan.prefills) {
      out_[live_.at(p.slot).first->key].prefilled += p.num_tokens;
      if (p.samples) sample(p.slot);
    }
    for (const auto& d : plan.decodes) sample(d.slot);
    std::vector<TokenEvent> events;
    s_.Update(result, events);
    for (const auto& e : events) {
      Outcome& o = out_[e.request_key];
      ++o.tokens;
      if (e.cached_prompt_tokens >= 0) o.cached = e.cached_prompt_tokens;
    }
    return plan;
  }
  void RunIdle() {
    for (int i = 0; i < 1000 && !s_.idle(); ++i) Step();
    Step();  // retire what ended in the last step
    EXPECT_TRUE(s_.idle());
  }
  const Outcome& of(uint64_t key) { return out_[key]; }

 private:
  Scheduler& s_;
  std::map<int32_t, std::pair<RequestPtr, int32_t>> live_;
  std::map<uint64_t, Outcome> out_;
};

TEST(PrefixCacheTest, ALaterRequestSharesTheCachedPrefixWithReferenceCounts) {
  Scheduler s(Config(4, 64));
  Driver d(s);
  const auto shared = Tokens(48, 100);  // three full blocks
  s.Add(Req(1, Cat(shared, Tokens(5, 1)), 20));
  d.Step();  // prefills all 53 tokens; its 3 full blocks become reusable from the next step
  s.Add(Req(2, Cat(shared, Tokens(7, 9)), 20));
  const StepPlan p = d.Step();
  ASSERT_EQ(p.admissions.size(), 1u);
  // The 3 shared blocks are request 1's; request 2 prefills only its 7 own tokens.
  const auto& blocks2 = p.admissions[0].blocks;
  EXPECT_EQ(d.of(2).prefilled, 7);
  EXPECT_EQ(d.of(2).cached, 48);
  // Shared blocks are counted once, and blocks are taken on demand: request 1 holds its 53
  // prompt positions and its first decode's (4 blocks); request 2 its 55 and one more (4
  // blocks, 3 shared).
  EXPECT_EQ(s.stats().kv_blocks_used, 4 + 1);
  EXPECT_EQ(blocks2.size(), 4u);
  EXPECT_EQ(s.stats().prefix_hit_tokens, 48);
  EXPECT_EQ(s.stats().prefix_query_tokens, 53 + 55);
  ExpectAccounted(s);
  d.RunIdle();
  // Both ended with 20 tokens: K/V is final up to 53+19 and 55+19 positions, so besides the 3
  // shared blocks each keeps its fourth block (prompt tail + output); partial blocks are freed.
  EXPECT_EQ(s.stats().kv_blocks_cached, 3 + 1 + 1);
  EXPECT_EQ(s.stats().kv_blocks_evictable, 5);
  ExpectAccounted(s);
}

TEST(PrefixCacheTest, AWholeCachedPromptStillComputesItsLastBlock) {
  Scheduler s(Config(2, 32));
  Driver d(s);
  const auto prompt = Tokens(32, 500);  // exactly two blocks
  s.Add(Req(1, prompt, 4));
  d.RunIdle();
  s.Add(Req(2, prompt, 4));
  d.RunIdle();
  // At least one token must be computed: the second block is recomputed, the first reused.
  EXPECT_EQ(d.of(2).cached, 16);
  EXPECT_EQ(d.of(2).prefilled, 16);
  EXPECT_EQ(d.of(2).tokens, 4);
  ExpectAccounted(s);
}

// A request that asks for its prompt's logprobs computes its whole prompt (every token's row),
// even where the prefix cache holds it; the next plain request still shares the blocks.
TEST(PrefixCacheTest, PromptLogprobsComputeTheWholePrompt) {
  Scheduler s(Config(2, 32));
  Driver d(s);
  const auto prompt = Tokens(40, 700);
  s.Add(Req(1, prompt, 2));
  d.RunIdle();
  auto echo = std::make_shared<EngineRequest>(*Req(2, prompt, 2));
  echo->prompt_logprobs = 0;
  s.Add(echo);
  d.RunIdle();
  EXPECT_EQ(d.of(2).cached, 0);
  EXPECT_EQ(d.of(2).prefilled, 40);
  s.Add(Req(3, prompt, 2));
  d.RunIdle();
  EXPECT_EQ(d.of(3).cached, 32);
  ExpectAccounted(s);
}

// Rows that keep their logits hold a vocabulary each: such a prompt goes in chunks of at most
// max_prompt_logprob_rows over the step, whatever the prefill budget.
TEST(PrefixCacheTest, PromptLogprobChunksAreBounded) {
  SchedulerConfig c = Config(2, 64);
  c.max_prefill_tokens = 1024;
  c.max_batch_tokens = 2048;
  c.max_prompt_logprob_rows = 100;
  Scheduler s(c);
  Driver d(s);
  auto echo = std::make_shared<EngineRequest>(*Req(1, Tokens(250, 1), 2));
  echo->prompt_logprobs = 1;
  s.Add(echo);
  s.Add(Req(2, Tokens(300, 900), 2));  // a plain prompt beside it is not bounded
  const StepPlan first = d.Step();
  ASSERT_EQ(first.prefills.size(), 2u);
  EXPECT_EQ(first.prefills[0].num_tokens, 100);
  EXPECT_EQ(first.prefills[1].num_tokens, 300);
  d.RunIdle();
  EXPECT_EQ(d.of(1).prefilled, 250);
  EXPECT_EQ(d.of(1).tokens, 2);
  ExpectAccounted(s);
}

TEST(PrefixCacheTest, APrefixEndingMidBlockMatchesOnlyWholeBlocks) {
  Scheduler s(Config(2, 32));
  Driver d(s);
  s.Add(Req(1, Tokens(40, 1), 2));
  d.RunIdle();
  // Shares 20 tokens: one whole block (16) matches; the partial one does not.
  s.Add(Req(2, Cat(Tokens(20, 1), Tokens(20, 900)), 2));
  d.RunIdle();
  EXPECT_EQ(d.of(2).cached, 16);
  EXPECT_EQ(d.of(2).prefilled, 24);
  ExpectAccounted(s);
}

TEST(PrefixCacheTest, ACancelWhileSharedKeepsTheOtherRequestsBlocks) {
  Scheduler s(Config(4, 64));
  Driver d(s);
  const auto shared = Tokens(32, 7000);
  s.Add(Req(1, Cat(shared, Tokens(3, 1)), 50));
  d.Step();
  s.Add(Req(2, Cat(shared, Tokens(3, 50)), 50));
  d.Step();
  EXPECT_EQ(d.of(2).cached, 32);
  const int32_t used_both = s.stats().kv_blocks_used;
  ASSERT_TRUE(s.Abort(1));
  d.Step();  // retires request 1: the shared blocks stay with request 2
  // Request 1 held 36 positions (3 blocks, 2 shared); request 2 keeps its 3.
  EXPECT_EQ(used_both, 4);
  EXPECT_EQ(s.stats().kv_blocks_used, 3);
  EXPECT_EQ(s.stats().running_requests, 1);
  ExpectAccounted(s);
  d.RunIdle();
  EXPECT_EQ(d.of(2).tokens, 50);
  // Request 1 (cancelled after 2 tokens) added nothing past its 2 prompt blocks; request 2's
  // 35 + 49 final positions fill 5 blocks: 2 shared + 3 of its own.
  EXPECT_EQ(s.stats().kv_blocks_cached, 5);
  ExpectAccounted(s);
}

TEST(PrefixCacheTest, EvictionIsLeastRecentlyUsedAndOnlyWhenRoomIsNeeded) {
  // 8 blocks. Three finished prompts of 2 full blocks + 1 token each (+1 token out: 3 blocks
  // reserved while running) leave 2 cached blocks apiece: 6 cached, 2 free.
  Scheduler s(Config(1, 8));
  Driver d(s);
  const auto a = Tokens(33, 100), b = Tokens(33, 200), c = Tokens(33, 300);
  for (uint64_t k = 1; k <= 3; ++k) {
    s.Add(Req(k, k == 1 ? a : k == 2 ? b : c, 1));
    d.RunIdle();
  }
  EXPECT_EQ(s.stats().kv_blocks_cached, 6);
  EXPECT_EQ(s.stats().kv_blocks_free, 2);
  // Touch `a` again so that `b` becomes the least recently used.
  s.Add(Req(4, a, 1));
  d.RunIdle();
  EXPECT_EQ(d.of(4).cached, 32);
  // A new 5-block reservation: 2 free + 3 evicted, `b`'s two blocks first, then one of `c`.
  s.Add(Req(5, Tokens(70, 5000), 10));
  d.RunIdle();
  EXPECT_EQ(d.of(5).cached, 0);
  s.Add(Req(6, a, 1));
  s.Add(Req(7, b, 1));
  d.RunIdle();
  EXPECT_EQ(d.of(6).cached, 32);  // `a` survived
  EXPECT_EQ(d.of(7).cached, 0);   // `b` was evicted first
  ExpectAccounted(s);
}

TEST(PrefixCacheTest, APoolFullOfCachedBlocksStillAdmitsNewRequests) {
  Scheduler t(Config(1, 4));
  Driver e(t);
  t.Add(Req(1, Tokens(63, 1), 1));  // 64 tokens: all 4 blocks; 3 full prompt blocks cached
  e.RunIdle();
  EXPECT_EQ(t.stats().kv_blocks_evictable, 3);
  EXPECT_EQ(t.stats().kv_blocks_used, 0);
  t.Add(Req(2, Tokens(63, 1000), 1));  // needs all 4: evicts every cached block
  e.RunIdle();
  EXPECT_EQ(e.of(2).tokens, 1);
  EXPECT_EQ(t.stats().kv_blocks_cached, 3);  // now request 2's prefix
  ExpectAccounted(t);
}

TEST(PrefixCacheTest, TheNextTurnReusesTheBlocksOfThePreviousAnswer) {
  // The driver samples token 0. Turn 1: 20 prompt tokens + 30 out; K/V is final for 20 + 29
  // positions (the last token was never an input), so 3 full blocks: 1 of prompt, 1 mixed, 1 of
  // output.
  Scheduler s(Config(2, 64));
  Driver d(s);
  const auto prompt = Tokens(20, 1);
  s.Add(Req(1, prompt, 30));
  d.RunIdle();
  EXPECT_EQ(s.stats().kv_blocks_cached, 3);
  ExpectAccounted(s);
  // Turn 2 resends the conversation: prompt, answer, a new user message.
  const auto turn2 = Cat(Cat(prompt, std::vector<int32_t>(30, 0)), Tokens(5, 900));
  s.Add(Req(2, turn2, 4));
  d.RunIdle();
  EXPECT_EQ(d.of(2).cached, 48);
  EXPECT_EQ(d.of(2).prefilled, 55 - 48);
  // A different answer shares only the prompt's block.
  s.Add(Req(3, Cat(Cat(prompt, std::vector<int32_t>(30, 7)), Tokens(5, 900)), 4));
  d.RunIdle();
  EXPECT_EQ(d.of(3).cached, 16);
  ExpectAccounted(s);
}

TEST(PrefixCacheTest, TheLastSampledTokenIsNeverInACachedBlock) {
  // 16 prompt tokens: 16 tokens out make 31 final positions (1 block), 17 make 32 (2 blocks).
  for (const int32_t out : {16, 17}) {
    Scheduler s(Config(1, 16));
    Driver d(s);
    s.Add(Req(1, Tokens(16, 1), out));
    d.RunIdle();
    EXPECT_EQ(s.stats().kv_blocks_cached, out == 16 ? 1 : 2) << out;
    ExpectAccounted(s);
  }
}

TEST(PrefixCacheTest, WithTheCacheOffNothingIsShared) {
  Scheduler s(Config(2, 32, /*cache=*/false));
  Driver d(s);
  s.Add(Req(1, Tokens(40, 1), 2));
  d.RunIdle();
  s.Add(Req(2, Tokens(40, 1), 2));
  d.RunIdle();
  EXPECT_EQ(d.of(2).cached, 0);
  EXPECT_EQ(d.of(2).prefilled, 40);
  EXPECT_EQ(s.stats().kv_blocks_cached, 0);
  EXPECT_EQ(s.stats().kv_blocks_free, 32);
}

TEST(PrefixCacheTest, RandomRequestsOverSharedPrefixesWithCancelsLeaveEverythingAccounted) {
  Scheduler s(Config(8, 96));
  Driver d(s);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prefixes;
  for (int g = 0; g < 20; ++g) prefixes.push_back(Tokens(16 * (1 + g % 4), 10000 * (g + 1)));
  uint64_t key = 1;
  for (int step = 0; step < 2000 && key <= 1000; ++step) {
    if (rng() % 2 == 0) {
      auto prompt = Cat(prefixes[rng() % prefixes.size()], Tokens(1 + rng() % 20, 50 + rng() % 9));
      s.Add(Req(key++, prompt, 1 + static_cast<int32_t>(rng() % 30)));
    }
    if (rng() % 7 == 0 && key > 1) s.Abort(1 + rng() % (key - 1));
    d.Step();
    ExpectAccounted(s);
  }
  d.RunIdle();
  EXPECT_EQ(s.stats().running_requests, 0);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_GT(s.stats().prefix_hit_tokens, 0);
  ExpectAccounted(s);
}

}  // namespace
}  // namespace llm::engine
