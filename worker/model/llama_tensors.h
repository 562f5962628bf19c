// The tensors of a Llama-family checkpoint, named and shaped as Hugging Face stores them. One
// list serves the loaders (which check every shape against it) and make-model (which writes it).
#ifndef LLM_WORKER_MODEL_LLAMA_TENSORS_H_
#define LLM_WORKER_MODEL_LLAMA_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"

namespace llm::model {

enum class TensorKind { kEmbedding, kNorm, kLinear, kBias };

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorKind kind;
  int64_t fan_in = 0;  // input features of a linear layer (for random initialisation)
};

// Names of one decoder layer's tensors.
struct LayerTensorNames {
  std::string input_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
  std::string post_norm, gate, up, down, gate_bias, up_bias, down_bias;
};
LayerTensorNames LlamaLayerTensorNames(int layer);

inline constexpr char kEmbedName[] = "model.embed_tokens.weight";
inline constexpr char kLmHeadName[] = "lm_head.weight";
inline constexpr char kFinalNormName[] = "model.norm.weight";

// Every tensor a checkpoint of `config` holds. With tied embeddings the head is not listed (a
// checkpoint may store the shared matrix under either name; see FindEmbedding).
std::vector<TensorSpec> LlamaTensorSpecs(const ModelConfig& config);

// Looks up `spec` in `store` and checks its dtype can hold weights and its shape matches the
// config. The error names the file, the tensor and both shapes.
absl::StatusOr<const TensorView*> GetChecked(const TensorStore& store, const TensorSpec& spec);

// How a synthetic (random:<shape>, make-model) checkpoint fills a tensor: element i is
// SyntheticValue(TensorStream(seed, name), i, bound, constant) of random_weights.h. Norms are
// ones, biases uniform in +-0.1, matrices uniform with a standard deviation of 1/sqrt(fan_in).
struct SyntheticFill {
  float bound;  // 0: every element is `constant`
  float constant;
};
SyntheticFill SyntheticFillFor(const TensorSpec& spec);

// The token embedding: model.embed_tokens.weight, or lm_head.weight when the embeddings are
// tied and only the head was stored.
absl::StatusOr<const TensorView*> FindEmbedding(const TensorStore& store,
                                                const ModelConfig& config);
// The output head: lm_head.weight, or the embedding when tied.
absl::StatusOr<const TensorView*> FindLmHead(const TensorStore& store, const ModelConfig& config);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_LLAMA_TENSORS_H_
