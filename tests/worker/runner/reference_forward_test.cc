// Checks the CPU forward pass against an independent, naive double-precision Llama forward
// (reference_forward.h) on random checkpoints that exercise biases, GQA ratios 1/4/8, explicit
// head_dim, Llama 3 RoPE scaling and sliding windows.
#include "tests/worker/runner/reference_forward.h"

#include <cmath>
#include <fstream>
#include <numbers>
#include <random>

#include "common/mapped_file.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/config.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_model.h"

namespace llm::runner {
namespace {

using model::ModelConfig;
using testing::CpuLastLogits;
using testing::Mat;
using testing::Reference;
using testing::WriteRandomCheckpoint;

ModelConfig Base() {
  return testing::TinyLlama(
      {.hidden = 48, .intermediate = 80, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 12});
}

void ExpectMatchesReference(const ModelConfig& c, uint32_t seed) {
  const std::string dir = WriteRandomCheckpoint(c, seed);
  ThreadPool pool(2);
  auto cpu = CpuModel::Load(dir, &pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto store = model::TensorStore::Open(dir);
  ASSERT_TRUE(store.ok());
  Reference ref((*cpu)->config(), **store);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(13);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % c.vocab_size);
  const std::vector<float> logits = CpuLastLogits(**cpu, ids);
  const Mat want = ref.LastLogits(ids);
  ASSERT_EQ(logits.size(), want.size());
  // fp32 against fp64 through two layers of unit-scale activations.
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(logits[i], want[i], 2e-4) << "logit " << i;
}

TEST(ReferenceForwardTest, LlamaWithAllBiasesAndGqa4Tied) {
  ModelConfig c = Base();
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 8;  // explicit, not hidden / heads
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.tie_word_embeddings = true;
  ExpectMatchesReference(c, 1);
}

TEST(ReferenceForwardTest, Qwen2QkvBiasUntied) {
  ModelConfig c = Base();
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.head_dim = 16;
  ExpectMatchesReference(c, 2);
}

TEST(ReferenceForwardTest, Qwen3QkNormExplicitHeadDimGqa) {
  ModelConfig c = Base();
  c.model_type = "qwen3";
  c.qk_norm = true;  // q_norm and k_norm: 1 +- 0.5, so the norms' weights matter
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 24;  // wider than hidden / heads, as Qwen3's 128 is
  ExpectMatchesReference(c, 5);
}

TEST(ReferenceForwardTest, MistralSlidingWindowGqa8) {
  ModelConfig c = Base();
  c.model_type = "mistral";
  c.num_heads = 8;
  c.num_kv_heads = 1;
  c.head_dim = 6;
  c.sliding_window = 5;
  ExpectMatchesReference(c, 3);
}

TEST(ReferenceForwardTest, Llama3RopeScaling) {
  ModelConfig c = Base();
  c.rope_theta = 500000.0;
  c.rope_scaling = {model::RopeScaling::Kind::kLlama3, 8.0, 1.0, 4.0, 16};
  ExpectMatchesReference(c, 4);
}

}  // namespace
}  // namespace llm::runner
