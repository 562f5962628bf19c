// The engine on the CUDA runner, end to end in process: the golden ids of ../shared/golden up
// to the closest-call index, batch invariance and exact agreement of graph replay with eager
// steps, a cancel storm, plans the runner must refuse, and the device's counters.
#include "worker/runner/cuda/cuda_runner.h"

#include <fstream>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "kernels/device.h"
#include "kernels/launch.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/runner/cuda/runner_test_util.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"
#include "worker/model/shapes.h"
#include "worker/server/device_monitor.h"

namespace llm::runner::cuda {
namespace {

using loop::CollectingSink;
using loop::GenerateSpec;
using loop::Worker;
using namespace testing;

// bf16 weights and activations on the GPU against the fp32 reference: the ids agree up to the
// token whose top two logits are closest (closest_call_index), where rounding may flip them.
// With graphs and without; prompt attention through the tiled kernel and one block per row.
TEST(CudaRunnerTest, GoldenIdsUpToTheClosestCall) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  const Golden golden = LoadGolden();
  for (const char* model : {"models/tinystories-656k", "models/tinystories-656k-f32"}) {
    LLM_REQUIRE_SHARED(model);
    for (bool graphs : {true, false}) {
      for (bool tiled : {true, false}) {
        WorkerSetup s;
        s.model = model;
        s.graphs = graphs;
        s.tiled_prefill = tiled;
        auto w = MakeWorker(s);
        ASSERT_NE(w, nullptr);
        const auto ids = Generate(*w, Spec(golden.prompt, static_cast<int32_t>(golden.ids.size())));
        const size_t common = CommonPrefix(ids, golden.ids);
        std::printf("%s, graphs %d, tiled prefill %d: %zu of %zu golden ids agree\n", model, graphs,
                    tiled, common, golden.ids.size());
        EXPECT_GE(common, static_cast<size_t>(golden.closest_call_index)) << model;
      }
    }
  }
}

// Programmatic dependent launch (engine.cuda_pdl) changes when a kernel is scheduled, not what it
// computes: the same ids as without it, from graphs and eagerly — the golden alone (decode
// steps of one row: the GEMV path with its weight prefetch) and six seeded requests at once
// with batch_invariant (several rows per step whatever the timing, so the split decode
// attention's and the sampler's last-block steps run under it). Workers made afterwards turn it
// off again (CudaModel::Load sets it for the process).
TEST(CudaRunnerTest, ProgrammaticLaunchGivesTheSameIds) {
  LLM_REQUIRE_GPU();
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (!kernels::ProgrammaticLaunchAvailable()) {
    GTEST_SKIP() << "programmatic dependent launch needs an sm_90 device running sm_90 code "
                    "(this is sm_"
                 << major << "x)";
  }
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const Golden golden = LoadGolden();
  const auto golden_len = static_cast<int32_t>(golden.ids.size());
  for (bool graphs : {true, false}) {
    std::vector<std::vector<int32_t>> ids[2];
    for (bool pdl : {false, true}) {
      WorkerSetup s;
      s.graphs = graphs;
      s.pdl = pdl;
      auto w = MakeWorker(s);
      ASSERT_NE(w, nullptr);
      ASSERT_EQ(kernels::ProgrammaticLaunch(), pdl);  // the launches really carry it
      ids[pdl].push_back(Generate(*w, Spec(golden.prompt, golden_len)));
      s.batch_invariant = true;
      w = MakeWorker(s);
      ASSERT_NE(w, nullptr);
      std::vector<std::shared_ptr<CollectingSink>> sinks;
      for (int i = 0; i < 6; ++i) {
        GenerateSpec spec = Spec(golden.prompt.substr(0, 20 + 7 * i), 24, 0.8f);
        spec.sampling.seed = 100 + i;
        sinks.push_back(std::make_shared<CollectingSink>());
        ASSERT_TRUE(w->Submit(spec, sinks.back()).ok());
      }
      for (auto& sink : sinks) {
        ASSERT_TRUE(sink->Wait());
        ASSERT_TRUE(sink->error().ok()) << sink->error();
        ids[pdl].push_back(sink->result().token_ids);
      }
    }
    EXPECT_EQ(ids[1], ids[0]) << "graphs " << graphs;
    EXPECT_GE(CommonPrefix(ids[1][0], golden.ids), static_cast<size_t>(golden.closest_call_index));
  }
  kernels::SetProgrammaticLaunch(false);  // as the other tests' workers expect
}

// The norms inside the products (engine.cuda_fused_norm: at one and two rows the residual add
// is the o and down products' epilogue and each layer's RMSNorm the next product's prologue) leave
// the same bits, so the same ids: the golden request alone (every decode step one row: the first
// layer's norm reads the embedding's row, the final norm the last down product's sum) from graphs
// and eagerly, with and without it; and the golden ids to their closest call.
TEST(CudaRunnerTest, FusedNormGivesTheSameIds) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const Golden golden = LoadGolden();
  const auto golden_len = static_cast<int32_t>(golden.ids.size());
  for (bool graphs : {true, false}) {
    std::vector<int32_t> ids[2];
    for (bool fused : {false, true}) {
      WorkerSetup s;
      s.graphs = graphs;
      s.fused_norm = fused;
      auto w = MakeWorker(s);
      ASSERT_NE(w, nullptr);
      ids[fused] = Generate(*w, Spec(golden.prompt, golden_len));
    }
    EXPECT_EQ(ids[1], ids[0]) << "graphs " << graphs;
    EXPECT_GE(CommonPrefix(ids[1], golden.ids), static_cast<size_t>(golden.closest_call_index))
        << "graphs " << graphs;
  }
}

// The residual add inside cuBLASLt's o and down products (engine.cuda_gemm_residual: beta = 1
// above the GEMV's rows) leaves the bits of the delta buffer and the norm's add in batch-invariant
// mode, so the same ids: the golden request (its prompt's steps many rows) and a crowd of eight
// (decode steps of more than the GEMV's rows), graphs and eager, with and without it.
TEST(CudaRunnerTest, GemmResidualGivesTheSameIds) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const Golden golden = LoadGolden();
  const auto golden_len = static_cast<int32_t>(golden.ids.size());
  const std::vector<GenerateSpec> crowd = CrowdSpecs();
  for (bool graphs : {true, false}) {
    std::vector<std::vector<int32_t>> ids[2];
    for (bool in_gemm : {false, true}) {
      WorkerSetup s;
      s.graphs = graphs;
      s.batch_invariant = true;
      s.slots = 16;
      s.gemm_residual = in_gemm;
      auto w = MakeWorker(s);
      ASSERT_NE(w, nullptr);
      ids[in_gemm].push_back(Generate(*w, Spec(golden.prompt, golden_len)));
      for (auto& r : RunCrowd(*w, crowd)) ids[in_gemm].push_back(std::move(r));
    }
    EXPECT_EQ(ids[1], ids[0]) << "graphs " << graphs;
    EXPECT_GE(CommonPrefix(ids[1][0], golden.ids), static_cast<size_t>(golden.closest_call_index))
        << "graphs " << graphs;
  }
}

// Shared prefix blocks in the CUDA runner: the golden prompt after a long shared prefix gives
// the same greedy ids with the cache cold, warm (the prefix's blocks shared from the first
// request) and off. With batch_invariant each row's arithmetic does not depend on what shares
// its step, so the three agree exactly.
TEST(CudaRunnerTest, PrefixCacheHitsMatchComputingThePrompt) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  ExpectPrefixCacheHitsMatchComputingThePrompt(WorkerSetup(), LoadGolden().prompt);
}

// With batch_invariant on, every request's tokens are what it gives alone, whatever else shares
// its steps (greedy, seeded sampling and penalties alike); graph replay and eager steps agree
// (CrowdSpecs, runner_test_util.h).
TEST(CudaRunnerTest, BatchInvariantAcrossCrowdsGraphsAndEager) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<GenerateSpec> specs = CrowdSpecs();
  WorkerSetup setup;
  setup.slots = 8;
  setup.prefill_tokens = 24;
  setup.batch_invariant = true;
  std::vector<std::vector<int32_t>> crowd_results[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    setup.graphs = graphs == 1;
    auto w = MakeWorker(setup);
    ASSERT_NE(w, nullptr);
    crowd_results[graphs] = RunCrowd(*w, specs);
    ASSERT_EQ(crowd_results[graphs].size(), specs.size());
    if (graphs == 1) {
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(crowd_results[1][i], Generate(*w, specs[i])) << "request " << i << " alone";
      }
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(crowd_results[0][i], crowd_results[1][i]) << "request " << i << ": eager vs graphs";
    EXPECT_EQ(crowd_results[0][i].size(), static_cast<size_t>(specs[i].max_tokens))
        << "request " << i;
  }
}

// The last layer on the sampling rows alone (engine.cuda_last_layer_sampled_rows) leaves every
// sampled row's bits: with batch_invariant, a row's products do not depend on how many rows
// share them, and its prompt attention tile is the same tile. A crowd whose prompts go in
// 24-token chunks beside running decodes (mixed steps, chunks that do not complete a prompt,
// several that do) gives the same ids with it and without; group 1 (tinystories) and group 7
// (random:qwen2-0.5b's 14 query heads over 2, so a token's rows may straddle two tiles).
TEST(CudaRunnerTest, LastLayerOnSampledRowsGivesTheSameIds) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<GenerateSpec> specs = CrowdSpecs();
  for (const char* model : {"models/tinystories-656k", "random:qwen2-0.5b"}) {
    std::vector<std::vector<int32_t>> ids[2];
    for (const bool sampled_only : {false, true}) {
      WorkerSetup setup;
      setup.model = model;
      setup.slots = 8;
      setup.prefill_tokens = 24;
      setup.batch_invariant = true;
      setup.last_layer_sampled_rows = sampled_only;
      auto w = MakeWorker(setup);
      ASSERT_NE(w, nullptr) << model;
      ids[sampled_only] = RunCrowd(*w, specs);
    }
    ASSERT_EQ(ids[0].size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(ids[1][i], ids[0][i]) << model << " request " << i;
      EXPECT_EQ(ids[1][i].size(), static_cast<size_t>(specs[i].max_tokens)) << model;
    }
  }
}

// KV on demand on the device: requests that all outgrow a pool too small for them (greedy and
// sampled, some with penalties) preempt one another, and resume by prefilling their prompt and
// the tokens they had (block grants, SlotAdmit::generated, output counts from the prefill rows).
// With 16 blocks the headroom rule admits at most five two-block prompts, and each needs five
// blocks before its 60th token, so preemption does not depend on the steps' timing. Each request
// gets all its tokens and every block comes back. Unlike on the CPU (loop/preemption_test.cc),
// the ids are not compared with an unpreempted run's: the resume computes the generated
// positions' K/V through the prefill attention kernel, which rounds differently from the decode
// kernel that first computed them, so a greedy request can take another token after a resume
// (on an H200, 2026-11-27: 4 of 12 requests, first differing at tokens 27 to 71). The test
// prints how many agree.
TEST(CudaRunnerTest, PreemptedRequestsGetAllTheirTokensAndGiveBackEveryBlock) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  std::vector<GenerateSpec> specs = CrowdSpecs();
  specs.resize(12);
  for (size_t i = 0; i < specs.size(); ++i) specs[i].max_tokens = 60 + static_cast<int>(i) * 5;
  WorkerSetup setup;
  setup.slots = 8;
  setup.prefill_tokens = 64;
  setup.batch_invariant = true;
  std::vector<std::vector<int32_t>> ids[2];
  uint64_t preemptions[2] = {0, 0};
  for (const int tight : {0, 1}) {
    setup.kv_blocks = tight == 1 ? 16 : 1024;
    auto w = MakeWorker(setup);
    ASSERT_NE(w, nullptr);
    ids[tight] = RunCrowd(*w, specs);
    ASSERT_TRUE(WaitForLoad(*w, [](const loop::WorkerLoad& l) {
      return l.in_flight == 0 && l.engine.scheduler.kv_blocks_used == 0;
    }));
    preemptions[tight] = w->Load().engine.scheduler.preemptions;
  }
  EXPECT_EQ(preemptions[0], 0u);
  EXPECT_GT(preemptions[1], 0u);
  int identical = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(ids[1][i].size(), static_cast<size_t>(specs[i].max_tokens)) << "request " << i;
    if (ids[1][i] == ids[0][i]) {
      ++identical;
    } else {
      std::printf("request %zu: first difference at token %zu of %zu\n", i,
                  CommonPrefix(ids[1][i], ids[0][i]), ids[1][i].size());
    }
  }
  std::printf("%llu preemptions; %d of %zu requests identical to the unpreempted run\n",
              static_cast<unsigned long long>(preemptions[1]), identical, specs.size());
}

TEST(CudaRunnerTest, CancelStormLeavesNothingBehind) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const Golden golden = LoadGolden();
  WorkerSetup setup;
  setup.slots = 8;
  setup.prefill_tokens = 32;
  auto w = MakeWorker(setup);
  ASSERT_NE(w, nullptr);
  std::mt19937 rng(11);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 300; ++i) {
    GenerateSpec s = Spec(golden.prompt, 200);
    s.ignore_eos = true;
    auto key = w->Submit(s, std::make_shared<CollectingSink>());
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    // A deliberate random pause (not a wait): it varies where the cancels land.
    if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    if (rng() % 3 != 0) w->Cancel(keys[rng() % keys.size()]);
  }
  for (uint64_t k : keys) w->Cancel(k);
  ASSERT_TRUE(w->WaitIdle(loop::Clock::now() + std::chrono::seconds(30)));
  EXPECT_TRUE(llm::testing::WaitFor(
      [&] {
        const auto s = w->Load().engine.scheduler;
        return s.running_requests == 0 && s.kv_blocks_used == 0 && s.queued_requests == 0;
      },
      std::chrono::milliseconds(2000)));
  const loop::WorkerLoad load = w->Load();
  EXPECT_EQ(load.in_flight, 0);
  EXPECT_EQ(load.engine.scheduler.running_requests, 0);
  EXPECT_EQ(load.engine.scheduler.kv_blocks_used, 0);
  EXPECT_EQ(load.engine.scheduler.free_slots, 8);
  const auto ids = Generate(*w, Spec(golden.prompt, static_cast<int32_t>(golden.ids.size())));
  EXPECT_GE(CommonPrefix(ids, golden.ids), static_cast<size_t>(golden.closest_call_index));
}

engine::RequestPtr Request(uint64_t key, int32_t max_tokens) {
  auto r = std::make_shared<engine::EngineRequest>();
  r->key = key;
  r->prompt_ids = {1, 300, 301, 302, 303};
  r->max_tokens = max_tokens;
  r->sampling.temperature = 0;
  return r;
}

// A step in which slot 0 decodes.
engine::StepPlan DecodeSlot0(uint64_t step_id) {
  engine::StepPlan d;
  d.step_id = step_id;
  d.decodes = {{0}};
  return d;
}

// A runner of the `tiny` shape with synthetic weights.
absl::StatusOr<std::unique_ptr<CudaRunner>> TinyRunner(int32_t slots, int32_t kv_blocks,
                                                       int32_t max_prefill_tokens = 2048) {
  auto config = model::ShapeConfig("tiny");
  if (!config.ok()) return config.status();
  CudaRunnerOptions o;
  o.sizes.max_slots = slots;
  o.sizes.kv_blocks = kv_blocks;
  o.max_prefill_tokens = max_prefill_tokens;
  o.max_prefill_tokens_alone = max_prefill_tokens;
  return CudaRunner::Create(*config, nullptr, model::QuantScheme(), 1, o);
}

TEST(CudaRunnerTest, BadPlansAreRefusedAndTheRunnerStaysUsable) {
  LLM_REQUIRE_GPU();
  auto runner = TinyRunner(4, 64, 64);
  ASSERT_TRUE(runner.ok()) << runner.status();
  CudaRunner& r = **runner;
  EXPECT_EQ(r.info().sizes.kv_blocks, 64);
  EXPECT_FALSE(r.info().pci_bus_id.empty());

  engine::StepPlan bad;
  bad.step_id = 1;
  bad.decodes = {{2}};  // an empty slot
  EXPECT_EQ(r.Launch(bad).code(), absl::StatusCode::kInvalidArgument);
  bad.decodes = {};
  bad.admissions.push_back({9, Request(1, 4), {0}});  // slot out of range
  EXPECT_EQ(r.Launch(bad).code(), absl::StatusCode::kInvalidArgument);
  // Blocks that do not cover the prompt (with KV on demand, those after it come as grants).
  auto long_prompt = std::make_shared<engine::EngineRequest>(*Request(1, 4));
  long_prompt->prompt_ids.assign(100, 300);
  bad.admissions = {{0, long_prompt, {0}}};
  EXPECT_EQ(r.Launch(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.in_flight(), 0);

  // A request runs to its length, the finished slot's extra pipelined decode gives nothing.
  engine::StepPlan p;
  p.step_id = 2;
  p.admissions = {{0, Request(5, 3), {0}}};
  p.prefills = {{0, 0, 5, true}};
  ASSERT_TRUE(r.Launch(p).ok());
  int outputs = 0;
  sampling::FinishReason last = sampling::FinishReason::kNone;
  for (uint64_t step = 3; step < 7; ++step) {
    ASSERT_TRUE(r.Launch(DecodeSlot0(step)).ok());
    auto res = r.Collect();
    ASSERT_TRUE(res.ok()) << res.status();
    for (const auto& out : res->outputs) {
      EXPECT_EQ(out.request_key, 5u);
      ++outputs;
      last = out.finish;
    }
    if (res->step_id > 2) {
      EXPECT_GE(res->gap_seconds, 0.0);
    }
  }
  auto res = r.Collect();
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE(res->outputs.empty());
  EXPECT_EQ(outputs, 3);
  EXPECT_EQ(last, sampling::FinishReason::kLength);
}

TEST(CudaRunnerTest, KernelTimesSplitEagerDecodeStepsByClass) {
  LLM_REQUIRE_GPU();
  auto runner = TinyRunner(2, 16, 64);
  ASSERT_TRUE(runner.ok()) << runner.status();
  CudaRunner& r = **runner;
  ASSERT_TRUE(r.ProfileSteps(2, CudaRunner::ProfiledSteps::kDecodeOnly).ok());
  engine::StepPlan p;
  p.step_id = 1;
  p.admissions = {{0, Request(7, 6), {0}}};
  p.prefills = {{0, 0, 5, true}};  // not decode-only: not timed
  ASSERT_TRUE(r.Launch(p).ok());
  ASSERT_TRUE(r.Collect().ok());
  std::vector<int32_t> tokens;
  for (uint64_t step = 2; step < 6; ++step) {
    ASSERT_TRUE(r.Launch(DecodeSlot0(step)).ok());
    auto res = r.Collect();
    ASSERT_TRUE(res.ok()) << res.status();
    for (const auto& out : res->outputs) tokens.push_back(out.sampled.token_id);
  }
  const KernelTimes t = r.TakeKernelTimes();
  EXPECT_EQ(t.steps, 2);  // the first two decode steps
  for (KernelClass k : {KernelClass::kAttention, KernelClass::kProducts, KernelClass::kNorms,
                        KernelClass::kSampler, KernelClass::kOther}) {
    EXPECT_GT(t.ms[static_cast<size_t>(k)], 0.0) << KernelClassName(k);
  }
  // RoPE/KV has no time of its own at one row: it is the q/k/v GEMV's epilogue (the tiny model
  // meets every condition of Gemm::FusesEpilogue), so this also shows the fused path ran.
  EXPECT_EQ(t.ms[static_cast<size_t>(KernelClass::kRopeKv)], 0.0);
  EXPECT_EQ(t.ms[static_cast<size_t>(KernelClass::kDraft)], 0.0);  // no draft model here
  EXPECT_EQ(r.TakeKernelTimes().steps, 0);                         // taken
  EXPECT_EQ(tokens.size(), 4u);                                    // timed steps still sample

  // Steps with prompt tokens, when asked for: a second request's 5-token prompt in two chunks,
  // with slot 0's last decode between them (decode-only: not timed). Prompt rows are padded to
  // 64, so RoPE/KV runs as its own kernel there.
  ASSERT_TRUE(r.ProfileSteps(2, CudaRunner::ProfiledSteps::kWithPrompt).ok());
  engine::StepPlan chunk1;
  chunk1.step_id = 6;
  chunk1.admissions = {{1, Request(8, 4), {1}}};
  chunk1.prefills = {{1, 0, 3, false}};
  ASSERT_TRUE(r.Launch(chunk1).ok());
  ASSERT_TRUE(r.Collect().ok());
  ASSERT_TRUE(r.Launch(DecodeSlot0(7)).ok());
  ASSERT_TRUE(r.Collect().ok());
  engine::StepPlan chunk2;
  chunk2.step_id = 8;
  chunk2.prefills = {{1, 3, 2, true}};
  ASSERT_TRUE(r.Launch(chunk2).ok());
  auto last = r.Collect();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->outputs.size(), 1u);  // the prompt's first token
  const KernelTimes prompt = r.TakeKernelTimes();
  EXPECT_EQ(prompt.steps, 2);
  for (KernelClass k : {KernelClass::kAttention, KernelClass::kProducts, KernelClass::kNorms,
                        KernelClass::kRopeKv, KernelClass::kOther}) {
    EXPECT_GT(prompt.ms[static_cast<size_t>(k)], 0.0) << KernelClassName(k) << " (prompt steps)";
  }
}

TEST(CudaRunnerTest, DeviceCountersFromTheDriver) {
  LLM_REQUIRE_GPU();
  auto runner = TinyRunner(2, 8);
  ASSERT_TRUE(runner.ok()) << runner.status();
  server::DeviceMonitor monitor((*runner)->info().pci_bus_id);
  if (!monitor.unavailable_reason().empty()) {
    GTEST_SKIP() << "NVML unavailable here: " << monitor.unavailable_reason();
  }
  const server::DeviceSample s = monitor.Latest();
  EXPECT_TRUE(s.available);
  EXPECT_GT(s.memory_total_bytes, 0u);
  EXPECT_GE(s.memory_used_bytes, (*runner)->weight_bytes());
  EXPECT_GE(s.utilization, 0.0);
  EXPECT_LE(s.utilization, 1.0);
}

}  // namespace
}  // namespace llm::runner::cuda
