#include "worker/runner/cpu_weights.h"

#include <cstdio>
#include <map>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/linear_weights.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/load_progress.h"

namespace llm::runner {
namespace {

using model::TensorSpec;
using model::TensorStore;
using model::TensorView;

// Appends the tensor's values as fp32 to `out`.
void AppendF32(const TensorView& v, std::vector<float>& out) {
  const size_t old = out.size();
  out.resize(old + static_cast<size_t>(v.num_elements()));
  model::ConvertToF32(v.dtype, v.data, static_cast<size_t>(v.num_elements()), out.data() + old);
}

// Reads tensors by name, checked against the specs that LlamaTensorSpecs gives the config.
class Loader {
 public:
  Loader(const model::ModelConfig& c, const TensorStore& s, const model::QuantScheme& scheme)
      : c_(c), store_(s), scheme_(scheme) {
    for (auto& spec : model::LlamaTensorSpecs(c)) specs_.emplace(spec.name, std::move(spec));
  }

  // Appends tensor `name` as fp32 to `out`.
  absl::Status Append(const std::string& name, std::vector<float>& out) {
    LLM_ASSIGN_OR_RETURN(const TensorView* v, model::GetChecked(store_, specs_.at(name)));
    AppendF32(*v, out);
    return absl::OkStatus();
  }

  // The product of the linear modules `names` (stacked along the output) with `biases` (the
  // same modules' biases, or none).
  absl::StatusOr<CpuLinear> Product(std::initializer_list<std::string> names,
                                    std::initializer_list<std::string> biases) {
    std::vector<TensorSpec> specs;
    for (const std::string& name : names) specs.push_back(specs_.at(name));
    LLM_ASSIGN_OR_RETURN(CpuLinear l, LoadCpuLinear(store_, scheme_, specs));
    for (const std::string& name : biases) LLM_RETURN_IF_ERROR(Append(name, l.bias));
    return l;
  }

  absl::StatusOr<CpuLayerWeights> Layer(int l) {
    const model::LayerTensorNames n = model::LlamaLayerTensorNames(l);
    using Names = std::initializer_list<std::string>;
    CpuLayerWeights w;
    LLM_RETURN_IF_ERROR(Append(n.input_norm, w.input_norm));
    LLM_ASSIGN_OR_RETURN(
        w.qkv,
        Product({n.q, n.k, n.v}, c_.qkv_bias ? Names{n.q_bias, n.k_bias, n.v_bias} : Names{}));
    if (c_.qk_norm) {
      LLM_RETURN_IF_ERROR(Append(n.q_norm, w.q_norm));
      LLM_RETURN_IF_ERROR(Append(n.k_norm, w.k_norm));
    }
    LLM_ASSIGN_OR_RETURN(w.o, Product({n.o}, c_.o_bias ? Names{n.o_bias} : Names{}));
    LLM_RETURN_IF_ERROR(Append(n.post_norm, w.post_norm));
    LLM_ASSIGN_OR_RETURN(
        w.gate_up, Product({n.gate, n.up}, c_.mlp_bias ? Names{n.gate_bias, n.up_bias} : Names{}));
    LLM_ASSIGN_OR_RETURN(w.down, Product({n.down}, c_.mlp_bias ? Names{n.down_bias} : Names{}));
    return w;
  }

 private:
  const model::ModelConfig& c_;
  const TensorStore& store_;
  const model::QuantScheme& scheme_;
  std::map<std::string, TensorSpec> specs_;
};

}  // namespace

absl::StatusOr<CpuWeights> LoadCpuWeights(const model::ModelConfig& c, const TensorStore& store,
                                          const model::QuantScheme& scheme) {
  CpuWeights w;
  Loader loader(c, store, scheme);
  LLM_ASSIGN_OR_RETURN(const TensorView* embed, model::FindEmbedding(store, c));
  AppendF32(*embed, w.embedding);
  if (store.Find(model::kLmHeadName) != nullptr) {
    // The head as stored (dequantised if a checkpoint quantised it); its product stays 16-bit.
    const TensorSpec spec{model::kLmHeadName,
                          {c.vocab_size, c.hidden_size},
                          model::TensorKind::kLinear,
                          c.hidden_size};
    LLM_ASSIGN_OR_RETURN(w.head, LoadCpuLinear(store, scheme, {spec}));
  } else if (c.tie_word_embeddings) {
    w.head.w = PackWeights(w.embedding.data(), c.vocab_size, c.hidden_size);
  } else {
    return absl::NotFoundError(
        absl::StrCat(store.dir(), ": missing tensor '", model::kLmHeadName, "'"));
  }
  LLM_RETURN_IF_ERROR(loader.Append(model::kFinalNormName, w.final_norm));
  // Progress by layer (the checkpoint's bytes of each), once the load has taken a second.
  std::vector<uint64_t> layer_bytes(c.num_layers);
  uint64_t total = 0;
  for (const std::string& name : store.Names()) {
    const uint64_t bytes = store.Find(name)->num_bytes;
    total += bytes;
    int layer = -1;
    if (std::sscanf(name.c_str(), "model.layers.%d.", &layer) == 1 && layer >= 0 &&
        layer < c.num_layers) {
      layer_bytes[layer] += bytes;
    }
  }
  model::LoadProgress progress(store.dir(), "converted", total, 0);
  progress.Add(total - std::accumulate(layer_bytes.begin(), layer_bytes.end(), uint64_t{0}), 0);
  for (int l = 0; l < c.num_layers; ++l) {
    LLM_ASSIGN_OR_RETURN(CpuLayerWeights layer, loader.Layer(l));
    w.layers.push_back(std::move(layer));
    progress.Add(layer_bytes[l], 0);
  }
  return w;
}

}  // namespace llm::runner
