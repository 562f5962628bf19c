#include "worker/model/llama_tensors.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace llm::model {
namespace {

using ::testing::HasSubstr;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 10;
  c.hidden_size = 4;
  c.intermediate_size = 6;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.max_position_embeddings = 16;
  return c;
}

TEST(LlamaTensorsTest, SpecsFollowTheConfig) {
  ModelConfig c = SmallConfig();
  EXPECT_EQ(LlamaTensorSpecs(c).size(), 1u + 9u + 1u + 1u);  // embed, layer, norm, head
  c.tie_word_embeddings = true;
  EXPECT_EQ(LlamaTensorSpecs(c).size(), 11u);
  c.qkv_bias = true;
  EXPECT_EQ(LlamaTensorSpecs(c).size(), 14u);
  const auto specs = LlamaTensorSpecs(c);
  EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(specs[3].shape, (std::vector<int64_t>{2, 4}));  // k_proj: kv_dim x hidden
}

TEST(LlamaTensorsTest, WrongShapeNamesFileTensorAndShapes) {
  const std::string dir = llm::testing::MakeTempDir("lt");
  ASSERT_TRUE(
      WriteSafetensors(
          dir + "/model.safetensors",
          {{"model.layers.0.self_attn.q_proj.weight", DType::kF32, {4, 3}, std::string(48, '\0')}})
          .ok());
  auto store = TensorStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const TensorSpec spec = LlamaTensorSpecs(SmallConfig())[2];
  auto v = GetChecked(**store, spec);
  ASSERT_FALSE(v.ok());
  const std::string err(v.status().message());
  EXPECT_THAT(err, HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(err, HasSubstr("q_proj.weight"));
  EXPECT_THAT(err, HasSubstr("[4, 3]"));
  EXPECT_THAT(err, HasSubstr("[4, 4]"));
}

TEST(LlamaTensorsTest, NonFloatWeightIsRejectedByName) {
  const std::string dir = llm::testing::MakeTempDir("lt");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"model.norm.weight", DType::kI64, {4}, std::string(32, '\0')}})
                  .ok());
  auto store = TensorStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto v = GetChecked(**store, TensorSpec{"model.norm.weight", {4}, TensorKind::kNorm});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("model.norm.weight"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("I64"));
}

TEST(LlamaTensorsTest, TiedHeadStoredEitherWay) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  LLM_REQUIRE_SHARED("models/tinystories-656k-f32");
  for (const char* name : {"models/tinystories-656k", "models/tinystories-656k-f32"}) {
    const std::string dir = llm::testing::SharedPath(name);
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    auto store = TensorStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    auto embed = FindEmbedding(**store, *config);
    auto head = FindLmHead(**store, *config);
    ASSERT_TRUE(embed.ok()) << name << ": " << embed.status();
    ASSERT_TRUE(head.ok()) << name << ": " << head.status();
    EXPECT_EQ(*embed, *head) << name;  // one matrix serves both
    for (const TensorSpec& spec : LlamaTensorSpecs(*config)) {
      if (spec.kind == TensorKind::kEmbedding) continue;
      EXPECT_TRUE(GetChecked(**store, spec).ok()) << name << " " << spec.name;
    }
  }
}

TEST(LlamaTensorsTest, UntiedModelWithoutHeadIsAnError) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::string dir = llm::testing::SharedPath("models/tinystories-656k");
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  config->tie_word_embeddings = false;
  auto store = TensorStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto head = FindLmHead(**store, *config);
  ASSERT_FALSE(head.ok());
  EXPECT_THAT(std::string(head.status().message()), HasSubstr("lm_head.weight"));
}

}  // namespace
}  // namespace llm::model
