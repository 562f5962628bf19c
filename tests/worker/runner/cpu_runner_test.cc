// The CPU runner through the ModelRunner contract: pipelined steps, the idle gap it reports,
// plans it must refuse without failing, and prompt logprobs (a prompt token's is what a decode
// of the same token reported, chunked or not).
#include "worker/runner/cpu_runner.h"

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "worker/model/shapes.h"
#include "worker/model/synthetic.h"

namespace llm::runner {
namespace {

std::unique_ptr<CpuRunner> MakeRunner(ThreadPool* pool) {
  auto config = model::ShapeConfig("tiny");
  EXPECT_TRUE(config.ok());
  auto store = model::MakeSyntheticStore(*config, 1, model::DType::kBF16, nullptr);
  EXPECT_TRUE(store.ok());
  auto m = CpuModel::FromStore(*config, **store, pool);
  EXPECT_TRUE(m.ok()) << m.status();
  CpuRunnerOptions o;
  o.sizes.max_slots = 2;
  o.sizes.kv_blocks = 16;
  return std::make_unique<CpuRunner>(*std::move(m), o);
}

engine::RequestPtr Request(uint64_t key) {
  auto r = std::make_shared<engine::EngineRequest>();
  r->key = key;
  r->prompt_ids = {1, 300, 301, 302};
  r->max_tokens = 8;
  r->sampling.temperature = 0;
  return r;
}

TEST(CpuRunnerTest, PipelinedStepsReportTheGapAndIdleStepsDoNot) {
  ThreadPool pool(1);
  auto runner = MakeRunner(&pool);
  engine::StepPlan first;
  first.step_id = 1;
  first.admissions.push_back({0, Request(7), {0}});
  first.prefills.push_back({0, 0, 4, true});
  ASSERT_TRUE(runner->Launch(first).ok());
  engine::StepPlan second;
  second.step_id = 2;
  second.decodes = {{0}};
  ASSERT_TRUE(runner->Launch(second).ok());  // while the first runs
  EXPECT_EQ(runner->in_flight(), 2);
  auto r1 = runner->Collect();
  auto r2 = runner->Collect();
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_LT(r1->gap_seconds, 0);  // launched into an idle runner: no gap to report
  EXPECT_GE(r2->gap_seconds, 0);
  EXPECT_GT(r1->device_seconds, 0);
  ASSERT_EQ(r1->outputs.size(), 1u);
  ASSERT_EQ(r2->outputs.size(), 1u);
  EXPECT_EQ(r2->outputs[0].request_key, 7u);

  // After the pipeline drained, the next step starts from idle again.
  engine::StepPlan third;
  third.step_id = 3;
  third.decodes = {{0}};
  ASSERT_TRUE(runner->Launch(third).ok());
  auto r3 = runner->Collect();
  ASSERT_TRUE(r3.ok());
  EXPECT_LT(r3->gap_seconds, 0);
  EXPECT_EQ(runner->Collect().status().code(), absl::StatusCode::kFailedPrecondition);
}

// Runs `plans` one after another; their outputs in order.
std::vector<engine::SlotOutput> RunPlans(CpuRunner& runner, std::vector<engine::StepPlan> plans) {
  std::vector<engine::SlotOutput> out;
  for (engine::StepPlan& plan : plans) {
    EXPECT_TRUE(runner.Launch(std::move(plan)).ok());
    auto result = runner.Collect();
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) break;
    for (auto& o : result->outputs) out.push_back(std::move(o));
  }
  return out;
}

// Greedy, a request's generated tokens report their logprobs (raw at temperature 0). The same
// tokens inside a longer prompt, with prompt_logprobs, report the same logprobs, whether the
// prompt is computed in one chunk or two; the first token has none.
TEST(CpuRunnerTest, PromptLogprobsAreTheDecodesOfTheSameTokens) {
  ThreadPool pool(1);
  auto runner = MakeRunner(&pool);
  auto first = std::make_shared<engine::EngineRequest>(*Request(1));
  first->want_logprobs = true;
  std::vector<engine::StepPlan> plans(4);
  plans[0].admissions.push_back({0, first, {0}});
  plans[0].prefills.push_back({0, 0, 4, true});
  for (size_t i = 1; i < plans.size(); ++i) plans[i].decodes = {{0}};
  for (size_t i = 0; i < plans.size(); ++i) plans[i].step_id = i + 1;
  const std::vector<engine::SlotOutput> generated = RunPlans(*runner, plans);
  ASSERT_EQ(generated.size(), 4u);

  for (const int32_t split : {7, 3}) {  // one chunk; two, the second sampling
    auto echo = std::make_shared<engine::EngineRequest>(*Request(2 + split));
    for (int i = 0; i < 3; ++i) echo->prompt_ids.push_back(generated[i].sampled.token_id);
    echo->prompt_logprobs = 2;
    echo->max_tokens = 1;
    std::vector<engine::StepPlan> steps(split == 7 ? 1 : 2);
    steps[0].step_id = 10 + split;
    steps[0].releases = {1};
    steps[0].admissions.push_back({1, echo, {1}});
    steps[0].prefills.push_back({1, 0, split, split == 7});
    if (split != 7) {
      steps[1].step_id = 11 + split;
      steps[1].prefills.push_back({1, split, 7 - split, true});
    }
    const std::vector<engine::SlotOutput> out = RunPlans(*runner, steps);
    ASSERT_EQ(out.size(), 1u);
    const auto& prompt = out[0].prompt_logprobs;
    ASSERT_EQ(prompt.size(), 7u) << "split " << split;
    EXPECT_EQ(prompt[0].token_id, 1);
    EXPECT_EQ(prompt[0].logprob, 0.0f);
    EXPECT_TRUE(prompt[0].top.empty());
    for (size_t i = 1; i < prompt.size(); ++i) {
      EXPECT_EQ(prompt[i].token_id, echo->prompt_ids[i]);
      EXPECT_LE(prompt[i].logprob, 0.0f);
      ASSERT_EQ(prompt[i].top.size(), 2u);
      EXPECT_GE(prompt[i].top[0].logprob, prompt[i].top[1].logprob);
      EXPECT_GE(prompt[i].top[0].logprob, prompt[i].logprob);
    }
    for (int i = 0; i < 3; ++i) {
      const sampling::SampledToken& p = prompt[4 + i];
      EXPECT_NEAR(p.logprob, generated[i].sampled.logprob, 1e-4) << "split " << split << " " << i;
      EXPECT_EQ(p.top[0].token_id, p.token_id);  // greedy: the token was the most likely
    }
    // The prompt's sampled output is the token a decode gave after the same tokens.
    EXPECT_EQ(out[0].sampled.token_id, generated[3].sampled.token_id);
  }
}

}  // namespace
}  // namespace llm::runner
