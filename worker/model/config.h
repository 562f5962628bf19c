// The model configuration of a Hugging Face Llama-family checkpoint (config.json and
// generation_config.json).
#ifndef LLM_WORKER_MODEL_CONFIG_H_
#define LLM_WORKER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::model {

// rope_scaling: absent/null, "llama3" (Llama 3.1/3.2 frequency-dependent scaling), "linear"
// (every frequency divided by `factor`), "yarn" (YaRN, as Qwen 2.5/3 ask for past 32k: the
// frequencies ramped between interpolation and extrapolation, and the attention scaled by
// `attention_factor`) or "longrope" (Phi-3.5, Phi-4-mini: each frequency divided by its own
// factor, from long_factor or short_factor, and the attention scaled). Anything else is rejected
// by name when the config is loaded. With linear and yarn the context is
// original_max_position_embeddings x factor (at least max_position_embeddings), as vLLM serves it.
struct RopeScaling {
  enum class Kind { kNone, kLlama3, kLinear, kYarn, kLongRope };
  Kind kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;
  double beta_fast = 32.0;        // yarn: rotations past which a pair extrapolates
  double beta_slow = 1.0;         // yarn: rotations below which it interpolates
  bool truncate = true;           // yarn: the ramp's ends rounded to whole pairs
  double attention_factor = 1.0;  // yarn, longrope: q and k each scaled by it (cos and sin are)
  // longrope: one divisor per rotated pair. Hugging Face switches to the long ones while a
  // sequence is past original_max_position_embeddings, which makes a cached key's rotation depend
  // on when it was cached; we take one set for the whole deployment, as llama.cpp does: the long
  // one when the served context is past the original (SetServedContext), the short one otherwise.
  std::vector<double> long_factor, short_factor;
  bool long_context = true;
};

// Granite's scalars, as config.json gives them (1 for every other family). No runner reads
// them: the loader folds them into the weights (checkpoint_layout.h), and ModelConfig's
// rms_norm_eps is already the folded one.
struct GraniteMultipliers {
  double embedding = 1.0;  // embedding_multiplier: the token embedding is scaled by it
  double residual = 1.0;   // residual_multiplier: each block's output, before the residual add
  double attention = 1.0;  // attention_multiplier: the attention's score scale (not 1/sqrt(d))
  double logits = 1.0;     // logits_scaling: the logits are divided by it
};

struct ModelConfig {
  // "llama", "mistral", "qwen2", "qwen3", "phi3" (the Llama layout with q/k/v and gate/up each
  // fused in one matrix) or "granite" (Llama with GraniteMultipliers).
  std::string model_type;
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;     // query heads
  int32_t num_kv_heads = 0;  // key/value heads (GQA when < num_heads)
  int32_t head_dim = 0;
  // The dimensions of each q/k head that RoPE turns: head_dim, or head_dim x partial_rotary_factor
  // (phi3: Phi-4-mini turns 3/4). The runners always turn whole heads: the loader moves a partial
  // head's turned dimensions to the pairs that turn (checkpoint_layout.h), and the other pairs'
  // frequency is 0. 0 stands for head_dim: read it through rotary().
  int32_t rotary_dim = 0;
  int32_t max_position_embeddings = 0;
  // The RMSNorm epsilon the runners use. For granite it is config.json's divided by
  // embedding_multiplier squared: the loader keeps the residual stream divided by that multiplier,
  // and RMSNorm(x / m) with eps / m^2 equals RMSNorm(x) with eps.
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q_proj/k_proj/v_proj carry biases (qwen2; llama attention_bias)
  bool o_bias = false;    // o_proj carries a bias (llama attention_bias)
  bool mlp_bias = false;  // gate/up/down carry biases (llama mlp_bias)
  // Each head's q and k pass through an RMSNorm of head_dim weights (q_norm, k_norm) after the
  // projection and before RoPE (qwen3).
  bool qk_norm = false;
  int32_t sliding_window = 0;  // attend to at most this many past positions; 0 = unlimited
  int32_t bos_token_id = -1;   // -1 when the model has none
  std::vector<int32_t> eos_token_ids;
  std::string torch_dtype;  // informational ("bfloat16", ...)
  GraniteMultipliers granite;

  int32_t rotary() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Parses and validates config.json (and the optional generation_config.json whose EOS/BOS
// ids take precedence) in `dir`. Errors name the file and the field.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

// Parses a config.json object; `source` names it in errors.
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j, const std::string& source);

// config.json / generation_config.json contents for `config` (used by make-model).
nlohmann::json ModelConfigToJson(const ModelConfig& config);
nlohmann::json GenerationConfigToJson(const ModelConfig& config);

// RoPE inverse frequencies, one per pair of a head: [head_dim / 2]; with a partial rotary_dim,
// the first rotary_dim / 2 pairs turn and the others have 0. Applies rope_scaling.
std::vector<double> RopeInverseFrequencies(const ModelConfig& config);

// YaRN's attention factor (its mscale) for `scale` and a weight `m`: 0.1 * m * ln(scale) + 1 past a
// scale of 1, else 1. The default factor is YarnMscale(factor, 1).
double YarnMscale(double scale, double m);

// What RoPE's cos and sin are multiplied by: yarn's and longrope's attention_factor, else 1.
double RopeAttentionFactor(const ModelConfig& config);

// Picks longrope's factors for a deployment serving `context` positions (RopeScaling).
void SetServedContext(ModelConfig& config, int64_t context);

// What the start log says of the model's RoPE where it is not plain whole-head RoPE, for example
// "yarn, factor 4 over 32768 positions, attention x1.1386" or "longrope, the long factors
// (context past 4096), 96 of 128 dimensions turned, attention x1.1902"; empty where it is plain.
std::string DescribeRope(const ModelConfig& config);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_CONFIG_H_
