// KV blocks on demand through a whole worker over the real tinystories-656k checkpoint: more
// slots run than reservations would allow, a pool too small for the running set preempts and
// resumes requests with the tokens (greedy and seeded), logprobs, stop strings and usage of an
// unpreempted run, and random traffic with cancels leaves every block accounted for.
#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/loop/worker.h"
#include "worker/runner/cpu_runner.h"

namespace llm::loop {
namespace {

constexpr char kModel[] = "models/tinystories-656k";

// The most decoding sequences any step had.
struct MaxDecodes : StepObserver {
  std::atomic<int32_t> max{0};
  void OnStep(double, double, int32_t, int32_t num_decodes, int32_t) override {
    int32_t seen = max.load();
    while (num_decodes > seen && !max.compare_exchange_weak(seen, num_decodes)) {
    }
  }
};

struct PoolShape {
  int32_t slots;
  int32_t kv_blocks;
  bool on_demand = true;
};

class PreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override { LLM_REQUIRE_SHARED(kModel); }

  std::unique_ptr<Worker> MakeWorker(const PoolShape& shape, StepObserver* steps = nullptr) {
    auto model = runner::CpuModel::Load(llm::testing::SharedPath(kModel), &pool_);
    EXPECT_TRUE(model.ok()) << model.status();
    auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
    EXPECT_TRUE(tok.ok());
    if (!model.ok() || !tok.ok()) return nullptr;
    runner::CpuRunnerOptions ro;
    ro.sizes = {.max_slots = shape.slots, .kv_blocks = shape.kv_blocks, .block_tokens = 16};
    WorkerOptions wo;
    wo.scheduler.max_batch_tokens = 0;
    wo.scheduler.max_prefill_tokens = 256;
    wo.scheduler.kv_on_demand = shape.on_demand;
    wo.max_queued_requests = 4096;
    auto w = Worker::Create(wo, std::make_unique<runner::CpuRunner>(*std::move(model), ro),
                            *std::move(tok), {2}, nullptr, steps);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *std::move(w) : nullptr;
  }

  // Waits until nothing is queued, running or held.
  static void ExpectDrained(const Worker& w) {
    EXPECT_TRUE(WaitForLoad(
        w,
        [](const WorkerLoad& l) {
          const auto& s = l.engine.scheduler;
          return l.in_flight == 0 && s.running_requests == 0 && s.queued_requests == 0 &&
                 s.kv_blocks_used == 0;
        },
        std::chrono::seconds(60)));
    const auto s = w.Load().engine.scheduler;
    EXPECT_EQ(s.running_requests, 0);
    EXPECT_EQ(s.queued_requests, 0);
    EXPECT_EQ(s.preempted_requests, 0);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_evictable, s.kv_blocks_total);
  }

  // Submits every spec, waits for every end; the results in order.
  static std::vector<StreamUpdate> RunAll(Worker& w, const std::vector<GenerateSpec>& specs) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (const GenerateSpec& s : specs) {
      sinks.push_back(std::make_shared<CollectingSink>());
      const auto key = w.Submit(s, sinks.back());
      EXPECT_TRUE(key.ok()) << key.status();
    }
    std::vector<StreamUpdate> out;
    for (const auto& sink : sinks) {
      EXPECT_TRUE(sink->Wait(std::chrono::seconds(300)));
      EXPECT_TRUE(sink->error().ok()) << sink->error();
      out.push_back(sink->result());
    }
    return out;
  }

  ThreadPool pool_{2};
};

// The experiment: 128 sampled "Once upon a time" requests that may run to the context
// (max_tokens 480) but stop at EOS after about 150 tokens, on 64 slots and 512 blocks. Reserving
// prompt + max_tokens let 16 run at once; on demand, at least 48 do.
TEST_F(PreemptionTest, SlotsFillWithWhatRequestsUseNotWhatTheyMightUse) {
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 128; ++i) {
    GenerateSpec s;
    s.text = "Once upon a time";
    s.max_tokens = 480;
    s.sampling.temperature = 1.0f;
    s.sampling.seed = static_cast<uint64_t>(1000 + i);
    specs.push_back(s);
  }
  int32_t most[2] = {0, 0};  // reserving, on demand
  for (const bool on_demand : {false, true}) {
    MaxDecodes steps;
    auto w = MakeWorker({.slots = 64, .kv_blocks = 512, .on_demand = on_demand}, &steps);
    ASSERT_NE(w, nullptr);
    const std::vector<StreamUpdate> out = RunAll(*w, specs);
    for (const StreamUpdate& u : out) {
      EXPECT_TRUE(u.finished);
      EXPECT_TRUE(u.reason == sampling::FinishReason::kStopToken ||
                  u.reason == sampling::FinishReason::kLength);
    }
    ExpectDrained(*w);
    most[on_demand ? 1 : 0] = steps.max.load();
  }
  RecordProperty("most_decoding_reserved", most[0]);
  RecordProperty("most_decoding_on_demand", most[1]);
  EXPECT_LE(most[0], 16);  // 512 blocks / 31 (prompt + 480 tokens)
  EXPECT_GE(most[1], 48);
}

// A pool too small for the running set to finish: 96 requests of 400 tokens each (ignore_eos)
// on 64 slots and 256 blocks (4,096 tokens: about 10 such requests). Every request completes
// with the ids, logprobs, stop string and usage of a run on a pool large enough for no
// preemption: greedy, seeded sampled with penalties, and stop strings alike.
TEST_F(PreemptionTest, PreemptedRequestsGiveTheOutputOfAnUnpreemptedRun) {
  const std::vector<std::string> prompts = StoryPrompts();
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 96; ++i) {
    GenerateSpec s;
    s.text = prompts[static_cast<size_t>(i) % prompts.size()];
    s.max_tokens = 400;
    s.ignore_eos = true;
    if (i % 2 == 1) {
      s.sampling.temperature = 0.9f;
      s.sampling.seed = static_cast<uint64_t>(i);
      if (i % 6 == 1) s.sampling.frequency_penalty = 0.5f;
    }
    if (i % 4 == 0) s.logprobs = 3;
    if (i % 10 == 3) s.stop = {" the park"};
    specs.push_back(s);
  }
  auto big = MakeWorker({.slots = 64, .kv_blocks = 2048});
  ASSERT_NE(big, nullptr);
  const std::vector<StreamUpdate> expected = RunAll(*big, specs);
  EXPECT_EQ(big->Load().engine.scheduler.preemptions, 0u);
  big.reset();

  auto tight = MakeWorker({.slots = 64, .kv_blocks = 256});
  ASSERT_NE(tight, nullptr);
  const std::vector<StreamUpdate> got = RunAll(*tight, specs);
  EXPECT_GT(tight->Load().engine.scheduler.preemptions, 0u);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    EXPECT_EQ(got[i].token_ids, expected[i].token_ids);
    EXPECT_EQ(got[i].text, expected[i].text);
    EXPECT_EQ(got[i].reason, expected[i].reason);
    EXPECT_EQ(got[i].stop_string, expected[i].stop_string);
    EXPECT_EQ(got[i].usage.completion_tokens, expected[i].usage.completion_tokens);
    ASSERT_EQ(got[i].logprobs.size(), expected[i].logprobs.size());
    for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
      EXPECT_EQ(got[i].logprobs[t].sampled.logprob, expected[i].logprobs[t].sampled.logprob);
    }
    if (specs[i].stop.empty()) {
      EXPECT_EQ(got[i].token_ids.size(), 400u);
    }
  }
  ExpectDrained(*tight);
}

// 1,000 random requests over shared prefixes on a tight pool, with stop strings and cancels at
// random moments (queued, running or preempted): nothing is left running, queued or held, and
// every block is free or cached.
TEST_F(PreemptionTest, RandomTrafficWithCancelsLeavesEveryBlockAccounted) {
  auto w = MakeWorker({.slots = 16, .kv_blocks = 64});
  ASSERT_NE(w, nullptr);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prefixes;
  for (int g = 0; g < 12; ++g) {
    std::vector<int32_t> p;
    for (int i = 0; i < 16 * (1 + g % 4); ++i) p.push_back(3 + (g * 37 + i * 11) % 500);
    prefixes.push_back(p);
  }
  std::vector<uint64_t> keys;
  std::set<uint64_t> cancelled;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 1000; ++i) {
    GenerateSpec s;
    s.has_text = false;
    s.token_ids = prefixes[rng() % prefixes.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 12); k < n; ++k) {
      s.token_ids.push_back(3 + static_cast<int32_t>(rng() % 500));
    }
    s.max_tokens = 1 + static_cast<int32_t>(rng() % 200);
    s.ignore_eos = rng() % 4 != 0;
    if (rng() % 5 == 0) s.stop = {"the", "."};
    s.sampling.temperature = rng() % 2 == 0 ? 0.0f : 0.8f;
    s.sampling.seed = i;
    sinks.push_back(std::make_shared<CollectingSink>());
    const auto key = w->Submit(s, sinks.back());
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    if (rng() % 6 == 0) {
      const uint64_t victim = keys[rng() % keys.size()];
      w->Cancel(victim);
      cancelled.insert(victim);
    }
    if (rng() % 50 == 0) {
      ASSERT_TRUE(WaitForNextStep(*w));
    }
  }
  // A cancelled request's stream just stops (its client went away); every other one ends.
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(120)));
  int ended = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    if (cancelled.count(keys[i])) continue;
    ASSERT_TRUE(sinks[i]->done()) << "request " << i;
    EXPECT_TRUE(sinks[i]->error().ok()) << sinks[i]->error();
    EXPECT_TRUE(sinks[i]->result().finished);
    ++ended;
  }
  EXPECT_GT(ended, 700);
  EXPECT_GT(w->Load().engine.scheduler.preemptions, 0u);
  ExpectDrained(*w);
}

}  // namespace
}  // namespace llm::loop
