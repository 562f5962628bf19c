#include "worker/model/shapes.h"

#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llm::model {
namespace {

struct Shape {
  const char* name;
  ModelConfig config;
};

ModelConfig Llama(int32_t vocab, int32_t hidden, int32_t inter, int32_t layers, int32_t heads,
                  int32_t kv_heads, int32_t max_pos, double theta, bool tied) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_pos;
  c.rope_theta = theta;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = tied;
  c.torch_dtype = "bfloat16";
  return c;
}

std::vector<Shape> Shapes() {
  std::vector<Shape> s;
  {
    ModelConfig c = Llama(512, 64, 192, 2, 4, 2, 2048, 10000.0, true);
    c.bos_token_id = 510;
    c.eos_token_ids = {511};
    s.push_back({"tiny", c});
  }
  {
    // ~30M parameters (118 MB in fp32): too big for the CPU caches, so one sequence's decode is
    // bound by memory bandwidth, as real models are; small enough for CPU benchmarks.
    ModelConfig c = Llama(8192, 512, 1536, 8, 8, 4, 2048, 10000.0, true);
    c.bos_token_id = 8190;
    c.eos_token_ids = {8191};
    s.push_back({"small", c});
  }
  {
    ModelConfig c = Llama(128256, 2048, 8192, 16, 32, 8, 131072, 500000.0, true);
    c.rope_scaling = {RopeScaling::Kind::kLlama3, 32.0, 1.0, 4.0, 8192};
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128008, 128009};
    s.push_back({"llama-3.2-1b", c});
  }
  {
    ModelConfig c = Llama(128256, 4096, 14336, 32, 32, 8, 8192, 500000.0, false);
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128009};
    s.push_back({"llama-3-8b", c});
  }
  {
    // The same 8B with Llama 3.1's 128k context (RoPE scaled as in 3.2): long-prompt runs.
    ModelConfig c = Llama(128256, 4096, 14336, 32, 32, 8, 131072, 500000.0, false);
    c.rope_scaling = {RopeScaling::Kind::kLlama3, 8.0, 1.0, 4.0, 8192};
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128008, 128009};
    s.push_back({"llama-3.1-8b", c});
  }
  {
    ModelConfig c = Llama(151936, 896, 4864, 24, 14, 2, 32768, 1000000.0, true);
    c.model_type = "qwen2";
    c.qkv_bias = true;
    c.rms_norm_eps = 1e-6;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151643, 151645};
    s.push_back({"qwen2-0.5b", c});
  }
  for (const auto& [name, hidden, inter, layers, heads, tied] :
       {std::tuple{"qwen3-0.6b", 1024, 3072, 28, 16, true},
        std::tuple{"qwen3-8b", 4096, 12288, 36, 32, false}}) {
    // Qwen3: head_dim 128 whatever the width, no q/k/v biases, an RMSNorm on each head's q and k.
    ModelConfig c = Llama(151936, hidden, inter, layers, heads, 8, 40960, 1000000.0, tied);
    c.model_type = "qwen3";
    c.head_dim = 128;
    c.qk_norm = true;
    c.rms_norm_eps = 1e-6;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645, 151643};
    s.push_back({name, c});
  }
  {
    ModelConfig c = Llama(32000, 4096, 14336, 32, 32, 8, 32768, 1000000.0, false);
    c.model_type = "mistral";
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    s.push_back({"mistral-7b", c});
  }
  return s;
}

}  // namespace

std::vector<std::string> ShapeNames() {
  std::vector<std::string> names;
  for (const auto& s : Shapes()) names.push_back(s.name);
  return names;
}

absl::StatusOr<ModelConfig> ShapeConfig(const std::string& name) {
  for (const auto& s : Shapes()) {
    if (name == s.name) return s.config;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model shape '", name, "' (known: ", absl::StrJoin(ShapeNames(), ", "), ")"));
}

}  // namespace llm::model
