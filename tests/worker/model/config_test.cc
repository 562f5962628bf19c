#include "worker/model/config.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/llama_tensors.h"

namespace llm::model {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json BaseConfig() {
  return json::parse(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "eos_token_id": 2, "bos_token_id": 1})");
}

TEST(ConfigTest, LoadsTheTestModel) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto c = LoadModelConfig(llm::testing::SharedPath("models/tinystories-656k"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 2048);
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{2});
}

TEST(ConfigTest, DerivesHeadDimAndAcceptsExplicitOne) {
  auto c = ParseModelConfig(BaseConfig(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 8);
  json j = BaseConfig();
  j["head_dim"] = 16;
  c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->q_dim(), 128);
}

TEST(ConfigTest, EosMayBeAList) {
  json j = BaseConfig();
  j["eos_token_id"] = {2, 7};
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2, 7}));
}

TEST(ConfigTest, Qwen2HasQkvBias) {
  json j = BaseConfig();
  j["model_type"] = "qwen2";
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
}

TEST(ConfigTest, Qwen3HasQkNormsNoBiasAndItsOwnHeadDim) {
  json j = BaseConfig();
  j["model_type"] = "qwen3";
  j["head_dim"] = 128;
  j["attention_bias"] = false;
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->head_dim, 128);
  // Its tensors carry q_norm and k_norm of head_dim, and it round-trips through config.json.
  int norms = 0;
  for (const auto& spec : LlamaTensorSpecs(*c)) {
    if (spec.name.find("_norm.weight") != std::string::npos &&
        spec.name.find("self_attn") != std::string::npos) {
      EXPECT_EQ(spec.shape, (std::vector<int64_t>{128})) << spec.name;
      ++norms;
    }
  }
  EXPECT_EQ(norms, 2 * c->num_layers);
  auto again = ParseModelConfig(ModelConfigToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->qk_norm);
  EXPECT_EQ(ModelConfigToJson(*c)["architectures"][0], "Qwen3ForCausalLM");
  j["use_sliding_window"] = true;
  EXPECT_THAT(std::string(ParseModelConfig(j, "c").status().message()),
              HasSubstr("not supported for qwen3"));
}

TEST(ConfigTest, RejectsUnsupportedRopeScalingByName) {
  json j = BaseConfig();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  auto c = ParseModelConfig(j, "dir/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("dir/config.json"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("rope_scaling"));
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("'dynamic' is not supported (llama3, linear, yarn, longrope)"));
  j["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 4.0}};
  EXPECT_THAT(std::string(ParseModelConfig(j, "c").status().message()), HasSubstr("'mrope'"));
  j["rope_scaling"] = {{"rope_type", "yarn"}};
  EXPECT_THAT(std::string(ParseModelConfig(j, "c").status().message()),
              HasSubstr("c rope_scaling: factor: missing"));
}

// Qwen3's documented YaRN setting; the values are numpy_reference.py's (transformers' rule).
TEST(ConfigTest, YarnRopeScaling) {
  json j = BaseConfig();
  j["model_type"] = "qwen3";
  j["head_dim"] = 128;
  j["rope_theta"] = 1000000.0;
  j["max_position_embeddings"] = 40960;
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_position_embeddings, 131072);  // 32768 x 4, as vLLM serves it
  EXPECT_NEAR(RopeAttentionFactor(*c), 1.138629436111989, 1e-15);
  const std::vector<double> inv = RopeInverseFrequencies(*c);
  ASSERT_EQ(inv.size(), 64u);
  const std::vector<std::pair<int, double>> want = {{0, 1.0},
                                                    {10, 0.11547819846894583},
                                                    {20, 0.01333521432163324},
                                                    {30, 0.0010643609812470017},
                                                    {40, 4.445698525097307e-05},
                                                    {63, 3.102344401879299e-07}};
  for (const auto& [i, v] : want) EXPECT_NEAR(inv[i], v, v * 1e-12) << i;
  // It round-trips, and an explicit attention_factor or DeepSeek's mscale pair wins.
  const auto again = ParseModelConfig(ModelConfigToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(RopeInverseFrequencies(*again), inv);
  EXPECT_EQ(again->max_position_embeddings, 131072);
  j["rope_scaling"]["mscale"] = 0.707;
  j["rope_scaling"]["mscale_all_dim"] = 0.707;
  EXPECT_DOUBLE_EQ(RopeAttentionFactor(*ParseModelConfig(j, "c")), 1.0);
  j["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_DOUBLE_EQ(RopeAttentionFactor(*ParseModelConfig(j, "c")), 1.5);
}

// Phi-4-mini's shape: 3/4 of a head of 128 turns, LongRoPE from 4,096 to 131,072 positions.
TEST(ConfigTest, LongRopeScaling) {
  json j = BaseConfig();
  j["model_type"] = "phi3";
  j["head_dim"] = 128;
  j["partial_rotary_factor"] = 0.75;
  j["max_position_embeddings"] = 131072;
  j["original_max_position_embeddings"] = 4096;
  std::vector<double> long_factor, short_factor;
  for (int i = 0; i < 48; ++i) {
    long_factor.push_back(1 + i);
    short_factor.push_back(1 + 0.01 * i);
  }
  j["rope_scaling"] = {
      {"type", "longrope"}, {"long_factor", long_factor}, {"short_factor", short_factor}};
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rotary(), 96);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_NEAR(RopeAttentionFactor(*c), std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-15);
  std::vector<double> inv = RopeInverseFrequencies(*c);
  ASSERT_EQ(inv.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const double want = i < 48 ? 1 / (long_factor[i] * std::pow(10000.0, 2.0 * i / 96)) : 0.0;
    EXPECT_NEAR(inv[i], want, want * 1e-14) << i;
  }
  SetServedContext(*c, 4096);
  inv = RopeInverseFrequencies(*c);
  EXPECT_NEAR(inv[47], 1 / (short_factor[47] * std::pow(10000.0, 94.0 / 96)), 1e-18);
  const auto again = ParseModelConfig(ModelConfigToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rotary(), 96);
  EXPECT_DOUBLE_EQ(RopeAttentionFactor(*again), RopeAttentionFactor(*c));
  EXPECT_EQ(again->rope_scaling.long_factor, long_factor);
}

TEST(ConfigTest, DescribesItsRope) {
  json j = BaseConfig();
  EXPECT_EQ(DescribeRope(*ParseModelConfig(j, "c")), "");
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  EXPECT_EQ(DescribeRope(*ParseModelConfig(j, "c")),
            "yarn, factor 4 over 64 positions, attention x1.1386");
  j = BaseConfig();
  j["model_type"] = "phi3";
  j["partial_rotary_factor"] = 0.5;
  j["original_max_position_embeddings"] = 64;
  j["rope_scaling"] = {
      {"type", "longrope"}, {"long_factor", {1.0, 2.0}}, {"short_factor", {1.0, 1.5}}};
  ModelConfig c = *ParseModelConfig(j, "c");
  EXPECT_EQ(DescribeRope(c),
            "longrope, the long factors (context past 64), 4 of 8 dimensions turned, "
            "attention x1.1547");
  SetServedContext(c, 64);
  EXPECT_THAT(DescribeRope(c), HasSubstr("the short factors (context within 64)"));
}

TEST(ConfigTest, LinearRopeScaling) {
  json j = BaseConfig();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(RopeAttentionFactor(*c), 1.0);
  const std::vector<double> inv = RopeInverseFrequencies(*c);
  EXPECT_DOUBLE_EQ(inv[0], 0.5);
  EXPECT_DOUBLE_EQ(inv[1], 1.0 / std::pow(10000.0, 2.0 / 8) / 2);
}

TEST(ConfigTest, Llama3RopeScaling) {
  json j = BaseConfig();
  j["head_dim"] = 64;
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<double> inv = RopeInverseFrequencies(*c);
  ASSERT_EQ(inv.size(), 32u);
  // Short wavelengths are untouched; the longest is divided by the factor.
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  const double unscaled_last = 1.0 / std::pow(500000.0, 62.0 / 64.0);
  EXPECT_NEAR(inv[31], unscaled_last / 32.0, 1e-15);
  for (size_t i = 1; i < inv.size(); ++i) EXPECT_LT(inv[i], inv[i - 1]);
}

TEST(ConfigTest, ErrorsNameTheField) {
  struct Case {
    const char* field;
    json value;
  };
  for (const Case& bad : std::vector<Case>{{"model_type", "gpt2"},
                                           {"hidden_size", -3},
                                           {"num_key_value_heads", 3},
                                           {"hidden_act", "gelu"},
                                           {"vocab_size", "many"},
                                           {"eos_token_id", 5000},
                                           {"rms_norm_eps", 0}}) {
    json j = BaseConfig();
    j[bad.field] = bad.value;
    auto c = ParseModelConfig(j, "x/config.json");
    ASSERT_FALSE(c.ok()) << bad.field;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(bad.field));
  }
  json j = BaseConfig();
  j.erase("intermediate_size");
  EXPECT_THAT(std::string(ParseModelConfig(j, "c").status().message()),
              HasSubstr("intermediate_size: missing"));
}

TEST(ConfigTest, RoundTripsThroughJson) {
  json j = BaseConfig();
  j["tie_word_embeddings"] = true;
  auto c = ParseModelConfig(j, "c");
  ASSERT_TRUE(c.ok());
  auto again = ParseModelConfig(ModelConfigToJson(*c), "c2");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->vocab_size, c->vocab_size);
  EXPECT_EQ(again->head_dim, c->head_dim);
  EXPECT_EQ(again->tie_word_embeddings, true);
  EXPECT_EQ(again->eos_token_ids, c->eos_token_ids);
}

}  // namespace
}  // namespace llm::model
