// Helpers of the CUDA runner's end-to-end tests: a worker on the CUDA backend from a few
// settings, generation, the golden request, and a crowd of mixed requests.
#ifndef LLM_TESTS_WORKER_RUNNER_CUDA_RUNNER_TEST_UTIL_H_
#define LLM_TESTS_WORKER_RUNNER_CUDA_RUNNER_TEST_UTIL_H_

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/device.h"
#include "nlohmann/json.hpp"
#include "tests/kernels/gpu_test_util.h"  // LLM_REQUIRE_GPU
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"

namespace llm::runner::cuda::testing {

using loop::CollectingSink;
using loop::GenerateSpec;
using loop::StoryPrompts;
using loop::WaitForLoad;
using loop::WaitForNextStep;
using loop::Worker;

struct Golden {
  std::string prompt;
  std::vector<int32_t> ids;
  int closest_call_index;
};

inline Golden LoadGolden() {
  std::ifstream f(llm::testing::SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  std::getline(f, line);
  const auto j = nlohmann::json::parse(line);
  return {j["prompt"], j["generated_ids"].get<std::vector<int32_t>>(),
          j["closest_call_index"].get<int>()};
}

struct WorkerSetup {
  // A folder of ../shared, an absolute path, or random:<shape>.
  std::string model = "models/tinystories-656k";
  std::string backend = "cuda";
  std::string quantization = "none";    // engine.quantization
  std::string kv_cache_dtype = "auto";  // engine.kv_cache_dtype
  int32_t slots = 8;
  int32_t prefill_tokens = 64;
  int32_t prefill_tokens_alone = 0;  // with nothing decoding; 0: prefill_tokens
  bool graphs = true;
  bool batch_invariant = false;
  bool prefix_cache = true;
  int32_t kv_blocks = 1024;
  bool kv_on_demand = true;
  bool tiled_prefill = true;
  bool hopper_prefill = false;  // engine.cuda_hopper_prefill (the tiled kernel off Hopper)
  bool pdl = false;
  bool fused_norm = true;
  bool gemm_residual = true;  // engine.cuda_gemm_residual
  bool last_layer_sampled_rows = true;
  bool speculate_constrained = false;     // engine.cuda_speculate_constrained
  engine::SpeculativeConfig speculative;  // engine.speculative, for the backend and scheduler
};

inline std::unique_ptr<Worker> MakeWorker(const WorkerSetup& s) {
  backend::BackendOptions o;
  o.model = s.model.rfind("random:", 0) == 0 || s.model.rfind("/", 0) == 0
                ? s.model
                : llm::testing::SharedPath(s.model);
  o.backend = s.backend;
  o.quantization = s.quantization;
  o.kv_cache_dtype = s.kv_cache_dtype;
  o.sizes.max_slots = s.slots;
  o.max_prefill_tokens = s.prefill_tokens;
  o.max_prefill_tokens_alone =
      s.prefill_tokens_alone > 0 ? s.prefill_tokens_alone : s.prefill_tokens;
  o.sizes.kv_blocks = s.kv_blocks;
  o.cuda.graphs = s.graphs;
  o.cuda.batch_invariant = s.batch_invariant;
  o.cuda.tiled_prefill = s.tiled_prefill;
  o.cuda.hopper_prefill = s.hopper_prefill;
  o.cuda.speculate_constrained = s.speculate_constrained;
  o.cuda.pdl = s.pdl;
  o.cuda.fused_norm = s.fused_norm;
  o.cuda.gemm_residual = s.gemm_residual;
  o.cuda.last_layer_sampled_rows = s.last_layer_sampled_rows;
  o.speculative = s.speculative;
  auto b = backend::CreateBackend(o);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return nullptr;
  loop::WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 0;  // no cap beyond the slots and the prompt budgets
  wo.scheduler.max_prefill_tokens = s.prefill_tokens;
  wo.scheduler.max_prefill_tokens_alone = o.max_prefill_tokens_alone;
  wo.scheduler.prefix_cache = s.prefix_cache;
  wo.scheduler.kv_on_demand = s.kv_on_demand;
  wo.scheduler.speculative = s.speculative;
  auto w =
      Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer), b->config.eos_token_ids);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

inline GenerateSpec Spec(const std::string& text, int32_t max_tokens, float temperature = 0) {
  GenerateSpec s;
  s.text = text;
  s.max_tokens = max_tokens;
  s.sampling.temperature = temperature;
  return s;
}

inline std::vector<int32_t> Generate(Worker& w, const GenerateSpec& spec) {
  auto sink = std::make_shared<CollectingSink>();
  EXPECT_TRUE(w.Submit(spec, sink).ok());
  EXPECT_TRUE(sink->Wait());
  EXPECT_TRUE(sink->error().ok()) << sink->error();
  return sink->result().token_ids;
}

// Number of leading ids two sequences share.
inline size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// 33 requests of 8 prompts, greedy and drawn, some with penalties, each run to max_tokens.
inline std::vector<GenerateSpec> CrowdSpecs() {
  const std::vector<std::string> prompts = StoryPrompts();
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 33; ++i) {
    GenerateSpec s = Spec(prompts[i % prompts.size()], 5 + (i * 13) % 70);
    if (i % 3 == 1) {
      s.sampling.temperature = 0.9f;
      s.sampling.top_k = 50;
      s.sampling.top_p = 0.95f;
      s.sampling.seed = 1000 + i;
    }
    if (i % 5 == 2) s.sampling.repetition_penalty = 1.3f;
    if (i % 7 == 3) s.sampling.frequency_penalty = 0.5f;
    // Every request runs to max_tokens (a sampled EOS would end some early: the CPU reference
    // stops request 7 after 5 tokens).
    s.ignore_eos = true;
    specs.push_back(s);
  }
  return specs;
}

// Submits every request at once (after every 11th, waits for the engine's next step, so later
// ones join running steps) and returns each one's ids.
inline std::vector<std::vector<int32_t>> RunCrowd(Worker& w,
                                                  const std::vector<GenerateSpec>& specs) {
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < specs.size(); ++i) {
    sinks.push_back(std::make_shared<CollectingSink>());
    EXPECT_TRUE(w.Submit(specs[i], sinks.back()).ok()) << "request " << i;
    if (i % 11 == 10) {
      EXPECT_TRUE(WaitForNextStep(w));
    }
  }
  for (auto& s : sinks) {
    EXPECT_TRUE(s->Wait());
    ids.push_back(s->result().token_ids);
  }
  return ids;
}

// Shared prefix blocks: `suffix` after a long shared prefix gives the same greedy ids with the
// cache cold, warm (the prefix's blocks shared from the first request) and off. With
// batch_invariant (set here) each row's arithmetic does not depend on what shares its step, so
// the three agree exactly.
inline void ExpectPrefixCacheHitsMatchComputingThePrompt(WorkerSetup s, const std::string& suffix) {
  s.batch_invariant = true;
  s.prefix_cache = true;
  auto cached = MakeWorker(s);
  s.prefix_cache = false;
  auto uncached = MakeWorker(s);
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(uncached, nullptr);
  const std::string prompt =
      "Once upon a time there was a little red fox who lived at the edge of a big green forest. "
      "Every morning the fox ran to the river to drink, and every evening it came home tired. " +
      suffix;
  const auto cold = Generate(*cached, Spec(prompt, 40));
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(cached->Submit(Spec(prompt, 40), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_GT(sink->result().usage.cached_prompt_tokens, 0);
  EXPECT_EQ(sink->result().token_ids, cold);
  EXPECT_EQ(Generate(*uncached, Spec(prompt, 40)), cold);
}

}  // namespace llm::runner::cuda::testing

#endif  // LLM_TESTS_WORKER_RUNNER_CUDA_RUNNER_TEST_UTIL_H_
