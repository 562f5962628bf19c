// The CPU runner through the ModelRunner contract: pipelined steps, the idle gap it reports,
// and plans it must refuse without failing.
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

}  // namespace
}  // namespace llm::runner
