// Speculative decoding on the CUDA runner (n-gram proposals and verification on the device,
// kernels/speculative/): with the batch-invariant mode on, every request's ids are those of a
// run without speculation, greedy and seeded sampling alike (each verify row draws what the
// plain run draws for its token, kernels/speculative/verify.h), proposals do stand on prompts
// that repeat themselves, and a cancel storm leaves no block behind.
#include <string>
#include <vector>

#include "tests/worker/runner/cuda/runner_test_util.h"

namespace llm::runner::cuda::testing {
namespace {

// A prompt whose continuation copies it: a story told twice, then its start again.
std::string RepeatPrompt() {
  const std::string story =
      "Tom had a red ball. He liked to play with it in the park. One day the ball went into the "
      "pond. Tom was sad. A big duck swam to the ball and pushed it back to Tom. Tom was happy. ";
  return story + story + "Tom had a red ball. He liked";
}

WorkerSetup SpeculativeSetup(bool on, int32_t num_tokens) {
  WorkerSetup s;
  s.slots = 8;
  s.prefill_tokens = 48;
  s.batch_invariant = true;
  if (on) {
    s.speculative.method = engine::SpeculativeMethod::kNgram;
    s.speculative.num_tokens = num_tokens;
    s.speculative.ngram_min = 1;
    s.speculative.ngram_max = 3;
    s.speculative.adaptive = false;  // every decode proposes up to num_tokens
  }
  return s;
}

TEST(CudaSpeculativeTest, NgramKeepsEveryRequestsIdsGreedyAndSeeded) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  std::vector<GenerateSpec> specs = CrowdSpecs();
  for (int i = 0; i < 6; ++i) {
    GenerateSpec s = Spec(RepeatPrompt(), 60);
    s.ignore_eos = true;
    if (i % 2 == 1) {
      s.sampling.temperature = 0.8f;
      s.sampling.seed = 77 + i;
    }
    specs.push_back(s);
  }
  auto off = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(off, nullptr);
  const auto plain = RunCrowd(*off, specs);
  for (const int32_t k : {1, 4}) {
    auto on = MakeWorker(SpeculativeSetup(true, k));
    ASSERT_NE(on, nullptr);
    const auto spec = RunCrowd(*on, specs);
    ASSERT_EQ(spec.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(spec[i], plain[i]) << "k " << k << " request " << i;
    }
    // Alone, a greedy repeating prompt's proposals stand (the last two specs are the greedy
    // and the sampled repeat).
    const size_t greedy = specs.size() - 2;
    auto sink = std::make_shared<CollectingSink>();
    ASSERT_TRUE(on->Submit(specs[greedy], sink).ok());
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->result().token_ids, plain[greedy]);
    EXPECT_GT(sink->result().usage.draft_tokens, 0) << "k " << k;
    EXPECT_GT(sink->result().usage.accepted_draft_tokens, 0) << "k " << k;
  }
}

TEST(CudaSpeculativeTest, PrefixCacheHitsMatchComputingThePrompt) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  ExpectPrefixCacheHitsMatchComputingThePrompt(SpeculativeSetup(true, 4), RepeatPrompt());
}

TEST(CudaSpeculativeTest, CancelsInsideAcceptedRunsLeaveEveryBlock) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto w = MakeWorker(SpeculativeSetup(true, 4));
  ASSERT_NE(w, nullptr);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 40; ++i) {
    GenerateSpec s = Spec(RepeatPrompt(), 120);
    s.ignore_eos = true;
    auto key = w->Submit(s, std::make_shared<CollectingSink>());
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    // Cancel every third request once it has run a step or two.
    if (i % 3 == 2) {
      ASSERT_TRUE(WaitForNextStep(*w));
      w->Cancel(keys[i - 2]);
    }
  }
  for (uint64_t k : keys) w->Cancel(k);
  ASSERT_TRUE(w->WaitIdle(loop::Clock::now() + std::chrono::seconds(30)));
  EXPECT_TRUE(WaitForLoad(*w, [](const loop::WorkerLoad& l) {
    return l.engine.scheduler.running_requests == 0 && l.engine.scheduler.kv_blocks_used == 0;
  }));
  EXPECT_EQ(w->Load().engine.scheduler.free_slots, 8);
  // And the runner still gives the plain run's ids.
  auto plain = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(Generate(*w, Spec(RepeatPrompt(), 40)), Generate(*plain, Spec(RepeatPrompt(), 40)));
}

}  // namespace
}  // namespace llm::runner::cuda::testing
