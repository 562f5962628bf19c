#include "worker/model/checkpoint_layout.h"

#include <cmath>
#include <cstring>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/llama_tensors.h"

namespace llm::model {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// hidden 8, 2 heads of 4 (q 8 rows), 1 KV head (k, v 4 rows each), intermediate 6, one layer.
json FamilyConfig(const std::string& type) {
  json j = json::parse(R"({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 6,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": true})");
  j["model_type"] = type;
  return j;
}

ModelConfig Parse(const json& j) {
  auto c = ParseModelConfig(j, "config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

// A tensor whose element i is `first + i`, in `dtype` (F32 or BF16).
TensorData Counting(const std::string& name, std::vector<int64_t> shape, float first,
                    DType dtype = DType::kF32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TensorData t{name, dtype, std::move(shape), {}};
  for (int64_t i = 0; i < n; ++i) {
    const float x = first + static_cast<float>(i);
    if (dtype == DType::kF32) {
      t.bytes.append(reinterpret_cast<const char*>(&x), 4);
    } else {
      const uint16_t b = F32ToBf16(x);
      t.bytes.append(reinterpret_cast<const char*>(&b), 2);
    }
  }
  return t;
}

std::vector<float> Values(const TensorView& v) {
  std::vector<float> out(v.num_elements());
  ConvertToF32(v.dtype, v.data, out.size(), out.data());
  return out;
}

// Every tensor of a one-layer checkpoint of `c` in the Llama layout, as `dtype`.
std::vector<TensorData> LlamaTensors(const ModelConfig& c, DType dtype = DType::kF32) {
  std::vector<TensorData> out;
  for (const TensorSpec& s : LlamaTensorSpecs(c))
    out.push_back(Counting(s.name, s.shape, 1, dtype));
  return out;
}

std::unique_ptr<TensorStore> Store(std::vector<TensorData> tensors) {
  auto store = TensorStore::FromTensors("ckpt", std::move(tensors));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

TEST(CheckpointLayoutTest, Phi3FusedMatricesBecomeRowViews) {
  const ModelConfig c = Parse(FamilyConfig("phi3"));
  std::vector<TensorData> tensors;
  for (TensorData& t : LlamaTensors(c)) {
    if (t.name.find("q_proj") == std::string::npos && t.name.find("k_proj") == std::string::npos &&
        t.name.find("v_proj") == std::string::npos &&
        t.name.find("gate_proj") == std::string::npos &&
        t.name.find("up_proj") == std::string::npos) {
      tensors.push_back(std::move(t));
    }
  }
  tensors.push_back(Counting("model.layers.0.self_attn.qkv_proj.weight", {16, 8}, 0));
  tensors.push_back(Counting("model.layers.0.mlp.gate_up_proj.weight", {12, 8}, 1000));
  auto store = ToLlamaLayout(c, Store(std::move(tensors)));
  ASSERT_TRUE(store.ok()) << store.status();
  const LayerTensorNames n = LlamaLayerTensorNames(0);
  // Rows q 0-7, k 8-11, v 12-15; gate 0-5, up 6-11: element [r, col] is first + 8r + col.
  const std::vector<std::pair<std::string, float>> starts = {
      {n.q, 0}, {n.k, 64}, {n.v, 96}, {n.gate, 1000}, {n.up, 1048}};
  for (const auto& [name, first] : starts) {
    const TensorView* v = (*store)->Find(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->shape[1], 8);
    const std::vector<float> got = Values(*v);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], first + i) << name << " " << i;
  }
  EXPECT_EQ((*store)->Find("model.layers.0.self_attn.qkv_proj.weight"), nullptr);
  for (const TensorSpec& s : LlamaTensorSpecs(c)) {
    auto v = GetChecked(**store, s);
    EXPECT_TRUE(v.ok()) << v.status();
  }
}

// Half of each head of 4 turns (pair (0, 1) in Hugging Face's order); the runners turn pairs
// (0, 2) and (1, 3), the second with frequency 0: rows 0, 2, 1, 3 of each head, the unturned
// two divided by LongRoPE's attention factor (original 16 of 64: sqrt(1 + ln 4 / ln 16)).
TEST(CheckpointLayoutTest, Phi3PartialRotaryReordersEachHead) {
  json j = FamilyConfig("phi3");
  j["partial_rotary_factor"] = 0.5;
  j["original_max_position_embeddings"] = 16;
  j["rope_scaling"] = {{"type", "longrope"}, {"long_factor", {2.0}}, {"short_factor", {1.5}}};
  const ModelConfig c = Parse(j);
  ASSERT_EQ(c.rotary(), 2);
  const double factor = std::sqrt(1.5);
  EXPECT_NEAR(RopeAttentionFactor(c), factor, 1e-15);
  EXPECT_EQ(RopeInverseFrequencies(c), (std::vector<double>{0.5, 0.0}));
  std::vector<TensorData> tensors;
  for (TensorData& t : LlamaTensors(c)) {
    if (t.name.find("self_attn.") == std::string::npos &&
        t.name.find("mlp.") == std::string::npos) {
      tensors.push_back(std::move(t));
    }
  }
  tensors.push_back(Counting("model.layers.0.self_attn.qkv_proj.weight", {16, 8}, 0));
  tensors.push_back(Counting("model.layers.0.self_attn.o_proj.weight", {8, 8}, 0));
  tensors.push_back(Counting("model.layers.0.mlp.gate_up_proj.weight", {12, 8}, 0));
  tensors.push_back(Counting("model.layers.0.mlp.down_proj.weight", {8, 6}, 0));
  auto store = ToLlamaLayout(c, Store(std::move(tensors)));
  ASSERT_TRUE(store.ok()) << store.status();
  const LayerTensorNames n = LlamaLayerTensorNames(0);
  // q rows 0-7 (heads 0-3, 4-7), k rows 8-11: element [r, col] is 8r + col.
  for (const auto& [name, first_row, heads] : {std::tuple{n.q, 0, 2}, {n.k, 8, 1}}) {
    const std::vector<float> got = Values(*(*store)->Find(name));
    ASSERT_EQ(got.size(), static_cast<size_t>(heads * 4 * 8));
    for (int head = 0; head < heads; ++head) {
      const int order[4] = {0, 2, 1, 3};
      for (int p = 0; p < 4; ++p) {
        const int row = first_row + 4 * head + order[p];
        const double scale = p % 2 == 1 ? 1 / factor : 1.0;
        for (int col = 0; col < 8; ++col) {
          ASSERT_FLOAT_EQ(got[(4 * head + p) * 8 + col],
                          static_cast<float>((8 * row + col) * scale))
              << name << " head " << head << " row " << p;
        }
      }
    }
  }
  // The short factors where the served context is within the original one.
  ModelConfig short_context = c;
  SetServedContext(short_context, 16);
  EXPECT_EQ(RopeInverseFrequencies(short_context), (std::vector<double>{1 / 1.5, 0.0}));
}

TEST(CheckpointLayoutTest, Phi3RefusesAMisshapenOrQuantisedFusedMatrix) {
  const ModelConfig c = Parse(FamilyConfig("phi3"));
  auto store =
      ToLlamaLayout(c, Store({Counting("model.layers.0.self_attn.qkv_proj.weight", {15, 8}, 0)}));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(),
              HasSubstr("ckpt: tensor 'model.layers.0.self_attn.qkv_proj.weight' has shape "
                        "[15, 8], not [16, 8]"));
  TensorData fp8{
      "model.layers.0.self_attn.qkv_proj.weight", DType::kF8E4M3, {16, 8}, std::string(128, '\0')};
  store = ToLlamaLayout(c, Store({std::move(fp8)}));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("is F8_E4M3; only 16/32-bit"));
  store = ToLlamaLayout(c, Store({}));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("qkv_proj.weight"));
}

TEST(CheckpointLayoutTest, GraniteMultipliersFoldIntoTheWeights) {
  json j = FamilyConfig("granite");
  j["embedding_multiplier"] = 4.0;
  j["residual_multiplier"] = 0.5;
  j["attention_multiplier"] = 0.125;
  j["logits_scaling"] = 8.0;
  const ModelConfig c = Parse(j);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5 / 16);
  auto store = ToLlamaLayout(c, Store(LlamaTensors(c, DType::kBF16)));
  ASSERT_TRUE(store.ok()) << store.status();
  const LayerTensorNames n = LlamaLayerTensorNames(0);
  // head_dim 4: q by 0.125 * 2; o and down by 0.5 / 4; the final norm by 1/8; the rest as is.
  const std::vector<std::pair<std::string, double>> factors = {
      {n.q, 0.25},     {n.o, 0.125},      {n.down, 0.125}, {kFinalNormName, 0.125},
      {n.k, 1},        {n.v, 1},          {n.gate, 1},     {n.up, 1},
      {kEmbedName, 1}, {n.input_norm, 1}, {n.post_norm, 1}};
  for (const auto& [name, factor] : factors) {
    const TensorView* v = (*store)->Find(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->dtype, DType::kBF16) << name;
    const std::vector<float> got = Values(*v);
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = Bf16ToF32(F32ToBf16(
          static_cast<float>(Bf16ToF32(F32ToBf16(1.0f + static_cast<float>(i))) * factor)));
      ASSERT_EQ(got[i], want) << name << " " << i;
    }
  }
}

TEST(CheckpointLayoutTest, GraniteRoundTripsItsConfigAndRefusesQuantisedWeights) {
  json j = FamilyConfig("granite");
  j["embedding_multiplier"] = 12.0;
  j["residual_multiplier"] = 0.22;
  const ModelConfig c = Parse(j);
  const ModelConfig again = Parse(ModelConfigToJson(c));
  EXPECT_DOUBLE_EQ(again.rms_norm_eps, c.rms_norm_eps);
  EXPECT_DOUBLE_EQ(again.granite.embedding, 12.0);
  EXPECT_DOUBLE_EQ(again.granite.residual, 0.22);
  EXPECT_DOUBLE_EQ(again.granite.attention, 1.0);
  std::vector<TensorData> tensors = LlamaTensors(c);
  for (TensorData& t : tensors) {
    if (t.name == LlamaLayerTensorNames(0).o) {
      t.dtype = DType::kF8E4M3;
      t.bytes.resize(t.bytes.size() / 4);
    }
  }
  auto store = ToLlamaLayout(c, Store(std::move(tensors)));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(),
              HasSubstr("'model.layers.0.self_attn.o_proj.weight' is F8_E4M3; quantised Granite"));
}

TEST(CheckpointLayoutTest, ConfigsNameWhatTheyRefuse) {
  json j = FamilyConfig("phi3");
  j["partial_rotary_factor"] = 0.3;  // 1.2 of a head of 4
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("config.json: partial_rotary_factor: 0.3 x head_dim 4 is not an even"));
  j = FamilyConfig("phi3");
  j["rope_scaling"] = {{"type", "longrope"}, {"long_factor", {1, 2}}};
  c = ParseModelConfig(j, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("config.json rope_scaling: short_factor: must be a list of 2 numbers"));
  j["rope_scaling"]["short_factor"] = {1, -1};
  c = ParseModelConfig(j, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("short_factor: must hold numbers > 0"));
  c = ParseModelConfig(FamilyConfig("gemma3"), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("'gemma3' is not supported (llama, mistral, qwen2, qwen3, phi3, granite)"));
  j = FamilyConfig("phi3");
  j["sliding_window"] = 32;
  EXPECT_EQ(Parse(j).sliding_window, 32);
}

TEST(CheckpointLayoutTest, OtherFamiliesPassThrough) {
  const ModelConfig c = Parse(FamilyConfig("llama"));
  auto store = ToLlamaLayout(c, Store(LlamaTensors(c)));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->size(), LlamaTensorSpecs(c).size());
}

TEST(TensorStoreDeriveTest, NamesWhatItCannotReplace) {
  auto derived = TensorStore::Derive(Store({Counting("a", {2}, 0)}), {"b"}, {}, {});
  ASSERT_FALSE(derived.ok());
  EXPECT_THAT(derived.status().message(), HasSubstr("ckpt: no tensor 'b' to replace"));
  derived = TensorStore::Derive(Store({Counting("a", {2}, 0)}), {}, {}, {Counting("a", {2}, 5)});
  ASSERT_FALSE(derived.ok());
  EXPECT_THAT(derived.status().message(), HasSubstr("tensor 'a' appears twice"));
  derived = TensorStore::Derive(Store({Counting("a", {2}, 0)}), {"a"}, {}, {Counting("a", {2}, 5)});
  ASSERT_TRUE(derived.ok()) << derived.status();
  EXPECT_EQ(Values(*(*derived)->Find("a")), (std::vector<float>{5, 6}));
}

}  // namespace
}  // namespace llm::model
