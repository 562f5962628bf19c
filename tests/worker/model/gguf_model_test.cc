// A GGUF file as a Hugging Face model: the config from the metadata, tensors under Hugging Face
// names with llama.cpp's q/k row order undone (checked against the rows as written before
// llama.cpp's permutation, here written out by hand), Qwen3 unpermuted, rope_freqs as llama3
// scaling, and every refusal naming the key or tensor.
#include "worker/model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/llama_tensors.h"

namespace llm::model {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0;

// A tiny model's metadata for `arch`: 2 layers, hidden 16, 4 heads of 8 (2 KV heads).
std::vector<std::pair<std::string, GgufValue>> Metadata(const std::string& arch) {
  return {{"general.architecture", GgufValue::String(arch)},
          {arch + ".block_count", GgufValue::Uint32(2)},
          {arch + ".embedding_length", GgufValue::Uint32(16)},
          {arch + ".feed_forward_length", GgufValue::Uint32(24)},
          {arch + ".attention.head_count", GgufValue::Uint32(4)},
          {arch + ".attention.head_count_kv", GgufValue::Uint32(2)},
          {arch + ".attention.key_length", GgufValue::Uint32(8)},
          {arch + ".context_length", GgufValue::Uint32(64)},
          {arch + ".attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-5f)},
          {arch + ".rope.freq_base", GgufValue::Float32(10000.0f)},
          {"tokenizer.ggml.bos_token_id", GgufValue::Uint32(1)},
          {"tokenizer.ggml.eos_token_id", GgufValue::Uint32(2)},
          {"tokenizer.ggml.eot_token_id", GgufValue::Uint32(3)}};
}

// What llama.cpp's converter does to a llama q or k: each head's rows j * half + i moved to
// 2 * i + j.
std::vector<float> Permute(const std::vector<float>& w, int heads, int64_t rows, int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t head_rows = rows / heads, half = head_rows / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        std::memcpy(&out[(h * head_rows + 2 * i + j) * cols],
                    &w[(h * head_rows + j * half + i) * cols], cols * sizeof(float));
      }
    }
  }
  return out;
}

struct Written {
  std::string path;
  std::map<std::string, std::vector<float>> hf;  // the Hugging Face tensors, in HF row order
};

// Every tensor of the config, random f32, under GGUF names (q/k permuted for llama).
Written WriteModel(const std::string& arch, const std::vector<std::string>& skip = {},
                   std::vector<std::pair<std::string, GgufValue>> extra = {}) {
  Written w;
  w.path = llm::testing::MakeTempDir("gguf_model") + "/m.gguf";
  auto metadata = Metadata(arch);
  for (auto& [key, value] : extra) {  // replaces a key Metadata has, or adds one
    auto it = std::find_if(metadata.begin(), metadata.end(),
                           [&](const auto& kv) { return kv.first == key; });
    if (it != metadata.end()) {
      it->second = value;
    } else {
      metadata.emplace_back(key, value);
    }
  }
  std::vector<GgufTensorData> tensors;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  const std::map<std::string, std::string> names = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  auto add = [&](const std::string& gguf, const std::string& hf, std::vector<int64_t> shape,
                 int permute_heads) {
    if (std::find(skip.begin(), skip.end(), gguf) != skip.end()) return;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    w.hf[hf] = v;
    if (permute_heads > 0 && arch == "llama") v = Permute(v, permute_heads, shape[0], shape[1]);
    tensors.push_back({gguf,
                       kF32,
                       {shape.rbegin(), shape.rend()},
                       std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  };
  add("token_embd.weight", kEmbedName, {32, 16}, 0);
  add("output_norm.weight", kFinalNormName, {16}, 0);
  for (int l = 0; l < 2; ++l) {
    const std::string g = absl::StrCat("blk.", l, "."), h = absl::StrCat("model.layers.", l, ".");
    auto both = [&](const std::string& part, std::vector<int64_t> shape, int heads = 0) {
      add(g + part + ".weight", h + names.at(part) + ".weight", shape, heads);
    };
    both("attn_norm", {16});
    both("attn_q", {32, 16}, 4);
    both("attn_k", {16, 16}, 2);
    both("attn_v", {16, 16});
    if (arch == "qwen2") {  // Qwen2's q/k/v biases
      for (const char* part : {"attn_q", "attn_k", "attn_v"}) {
        add(g + part + ".bias", h + names.at(part) + ".bias", {part[5] == 'q' ? 32 : 16}, 0);
      }
    }
    if (arch == "qwen3") {
      both("attn_q_norm", {8});
      both("attn_k_norm", {8});
    }
    both("attn_output", {16, 32});
    both("ffn_norm", {16});
    both("ffn_gate", {24, 16});
    both("ffn_up", {24, 16});
    both("ffn_down", {16, 24});
  }
  EXPECT_TRUE(WriteGguf(w.path, metadata, tensors).ok());
  return w;
}

void ExpectTensorsAre(const Written& w, DType dtype) {
  auto file = GgufFile::Open(w.path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = GgufModelConfig(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  ThreadPool pool(2);
  auto store = LoadGgufTensors(**file, *config, {dtype, &pool, false});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), w.hf.size());
  for (const auto& [name, want] : w.hf) {
    const TensorView* v = (*store)->Find(name);
    ASSERT_NE(v, nullptr) << name;
    std::vector<float> got(v->num_elements());
    ConvertToF32(v->dtype, v->data, got.size(), got.data());
    for (size_t i = 0; i < want.size(); ++i) {
      const float expected = dtype == DType::kF32 ? want[i] : Bf16ToF32(F32ToBf16(want[i]));
      ASSERT_EQ(got[i], expected) << name << " element " << i;
    }
  }
}

TEST(GgufModelTest, LlamaConfigFromMetadata) {
  const Written w = WriteModel("llama");
  auto file = GgufFile::Open(w.path);
  ASSERT_TRUE(file.ok());
  auto c = GgufModelConfig(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 32);  // from token_embd: no llama.vocab_size key
  EXPECT_EQ(c->hidden_size, 16);
  EXPECT_EQ(c->intermediate_size, 24);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->max_position_embeddings, 64);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5, 1e-12);
  EXPECT_TRUE(c->tie_word_embeddings);  // no output.weight
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kNone);
}

TEST(GgufModelTest, LlamaQAndKRowsBackInHuggingFaceOrder) {
  const Written w = WriteModel("llama");
  ExpectTensorsAre(w, DType::kF32);
  ExpectTensorsAre(w, DType::kBF16);
}

TEST(GgufModelTest, Qwen3HasQkNormsAndIsNotPermuted) {
  const Written w = WriteModel("qwen3");
  auto file = GgufFile::Open(w.path);
  ASSERT_TRUE(file.ok());
  auto c = GgufModelConfig(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_TRUE(c->qk_norm);
  ExpectTensorsAre(w, DType::kF32);
}

TEST(GgufModelTest, Qwen2HasQkvBiasesAndIsNotPermuted) {
  const Written w = WriteModel("qwen2");
  auto file = GgufFile::Open(w.path);
  ASSERT_TRUE(file.ok());
  auto c = GgufModelConfig(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  ExpectTensorsAre(w, DType::kF32);
}

TEST(GgufModelTest, HfTensorNames) {
  EXPECT_EQ(HfTensorName("blk.12.ffn_down.weight"), "model.layers.12.mlp.down_proj.weight");
  EXPECT_EQ(HfTensorName("blk.0.attn_k_norm.weight"), "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(HfTensorName("output.weight"), "lm_head.weight");
  EXPECT_EQ(HfTensorName("blk.x.attn_q.weight"), std::nullopt);
  EXPECT_EQ(HfTensorName("blk.0.ffn_gate_exps.weight"), std::nullopt);
  EXPECT_EQ(HfTensorName("rope_freqs.weight"), std::nullopt);
}

TEST(GgufModelTest, RefusalsNameTheKeyOrTensor) {
  auto config_error = [](const std::string& path) {
    auto file = GgufFile::Open(path);
    EXPECT_TRUE(file.ok());
    return std::string(GgufModelConfig(**file).status().message());
  };
  EXPECT_THAT(config_error(WriteModel("gemma2").path),
              HasSubstr("general.architecture: 'gemma2' is not supported"));
  EXPECT_THAT(
      config_error(WriteModel("llama", {}, {{"llama.expert_count", GgufValue::Uint32(8)}}).path),
      HasSubstr("llama.expert_count: mixture-of-experts"));
  EXPECT_THAT(config_error(WriteModel("llama", {},
                                      {{"llama.rope.scaling.type", GgufValue::String("longrope")}})
                               .path),
              HasSubstr("llama.rope.scaling.type: 'longrope' is not supported (linear, yarn)"));
  EXPECT_THAT(
      config_error(
          WriteModel("llama", {}, {{"llama.rope.scaling.type", GgufValue::String("yarn")}}).path),
      HasSubstr("llama.rope.scaling.factor: missing"));
  EXPECT_THAT(
      config_error(
          WriteModel("llama", {}, {{"llama.rope.dimension_count", GgufValue::Uint32(4)}}).path),
      HasSubstr("partial RoPE"));

  const Written missing = WriteModel("llama", {"blk.1.ffn_up.weight"});
  auto file = GgufFile::Open(missing.path);
  ASSERT_TRUE(file.ok());
  auto c = GgufModelConfig(**file);
  ASSERT_TRUE(c.ok());
  auto store = LoadGgufTensors(**file, *c, {});
  EXPECT_TRUE(absl::IsNotFound(store.status()));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("model.layers.1.mlp.up_proj"));
}

TEST(GgufModelTest, UnplacedTensorsAndUnsupportedTypesAreRefused) {
  // A tensor with no place (an expert's) next to a complete model.
  Written w = WriteModel("llama");
  auto read = GgufFile::Open(w.path);
  ASSERT_TRUE(read.ok());
  std::vector<std::pair<std::string, GgufValue>> metadata;
  for (const std::string& k : (*read)->Keys()) metadata.emplace_back(k, *(*read)->Find(k));
  std::vector<GgufTensorData> tensors;
  for (const GgufTensor& t : (*read)->tensors()) {
    tensors.push_back(
        {t.name, t.type, t.dims, std::string(reinterpret_cast<const char*>(t.data), t.num_bytes)});
  }
  auto load_error = [&](const std::vector<GgufTensorData>& ts) {
    const std::string path = llm::testing::MakeTempDir("gguf_bad") + "/b.gguf";
    EXPECT_TRUE(WriteGguf(path, metadata, ts).ok());
    auto file = GgufFile::Open(path);
    EXPECT_TRUE(file.ok());
    auto c = GgufModelConfig(**file);
    EXPECT_TRUE(c.ok());
    return std::string(LoadGgufTensors(**file, *c, {}).status().message());
  };
  auto extra = tensors;
  extra.push_back({"blk.0.ffn_gate_exps.weight", kF32, {16}, std::string(64, '\0')});
  EXPECT_THAT(load_error(extra), HasSubstr("'blk.0.ffn_gate_exps.weight' (F32) has no place"));
  // An IQ4_NL (id 20: 32 elements in 18 bytes) o projection: known, not dequantised.
  auto iq = tensors;
  for (GgufTensorData& t : iq) {
    if (t.name == "blk.0.attn_output.weight") {
      t.type = 20;
      t.bytes.assign(16 * 18, '\0');
    }
  }
  EXPECT_THAT(load_error(iq), HasSubstr("'blk.0.attn_output.weight' has type IQ4_NL"));
  auto wrong = tensors;
  for (GgufTensorData& t : wrong) {
    if (t.name == "blk.1.ffn_up.weight") {
      t.dims = {16, 16};
      t.bytes.resize(16 * 16 * 4);
    }
  }
  EXPECT_THAT(load_error(wrong), HasSubstr("shape [16, 16], but the metadata implies [24, 16]"));
}

// Llama 3.1's rope_freqs (the llama3 rule's divisors for factor 8) becomes rope_scaling; other
// values are refused.
TEST(GgufModelTest, RopeFreqsAsLlama3Scaling) {
  ModelConfig plain;
  plain.head_dim = 8;
  plain.rope_theta = 500000.0;
  ModelConfig scaled = plain;
  scaled.rope_scaling = {RopeScaling::Kind::kLlama3, 8.0, 1.0, 4.0, 16};
  const std::vector<double> a = RopeInverseFrequencies(plain), b = RopeInverseFrequencies(scaled);
  std::vector<float> divisors;
  for (size_t i = 0; i < a.size(); ++i) divisors.push_back(static_cast<float>(a[i] / b[i]));
  for (const bool bogus : {false, true}) {
    if (bogus) divisors[1] *= 1.5f;
    Written w = WriteModel("llama", {},
                           {{"llama.rope.freq_base", GgufValue::Float32(500000.0f)},
                            {"llama.rope.scaling.original_context_length", GgufValue::Uint32(16)}});
    auto read = GgufFile::Open(w.path);
    ASSERT_TRUE(read.ok());
    std::vector<std::pair<std::string, GgufValue>> metadata;
    for (const std::string& k : (*read)->Keys()) metadata.emplace_back(k, *(*read)->Find(k));
    std::vector<GgufTensorData> tensors = {
        {"rope_freqs.weight",
         kF32,
         {4},
         std::string(reinterpret_cast<const char*>(divisors.data()), 16)}};
    for (const GgufTensor& t : (*read)->tensors()) {
      tensors.push_back({t.name, t.type, t.dims,
                         std::string(reinterpret_cast<const char*>(t.data), t.num_bytes)});
    }
    const std::string path = llm::testing::MakeTempDir("gguf_rope") + "/r.gguf";
    ASSERT_TRUE(WriteGguf(path, metadata, tensors).ok());
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok());
    auto c = GgufModelConfig(**file);
    if (bogus) {
      EXPECT_THAT(std::string(c.status().message()),
                  HasSubstr("rope_freqs.weight: value 0 (1.73594) is not the llama3 rule"));
      continue;
    }
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
    EXPECT_NEAR(c->rope_scaling.factor, 8.0, 1e-5);
    EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 16);
    EXPECT_TRUE(LoadGgufTensors(**file, *c, {}).ok());  // rope_freqs is not a stray tensor
  }
}

}  // namespace
}  // namespace llm::model
