#include "worker/runner/cpu_weights.h"

#include <map>

#include "common/status_macros.h"
#include "worker/model/llama_tensors.h"

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
  Loader(const model::ModelConfig& c, const TensorStore& s) : c_(c), store_(s) {
    for (auto& spec : model::LlamaTensorSpecs(c)) specs_.emplace(spec.name, std::move(spec));
  }

  // Appends tensor `name` as fp32 to `out`.
  absl::Status Append(const std::string& name, std::vector<float>& out) {
    LLM_ASSIGN_OR_RETURN(const TensorView* v, model::GetChecked(store_, specs_.at(name)));
    AppendF32(*v, out);
    return absl::OkStatus();
  }

  // Loads the tensors `names` (stacked along the output dimension) and packs them.
  absl::StatusOr<PackedWeights> Matrix(std::initializer_list<std::string> names) {
    std::vector<float> rows;
    size_t out = 0, in = 0;
    for (const std::string& name : names) {
      LLM_RETURN_IF_ERROR(Append(name, rows));
      const auto& shape = specs_.at(name).shape;
      out += static_cast<size_t>(shape[0]);
      in = static_cast<size_t>(shape[1]);
    }
    return PackWeights(rows.data(), out, in);
  }

  absl::StatusOr<CpuLayerWeights> Layer(int l) {
    const model::LayerTensorNames n = model::LlamaLayerTensorNames(l);
    CpuLayerWeights w;
    LLM_RETURN_IF_ERROR(Append(n.input_norm, w.input_norm));
    LLM_ASSIGN_OR_RETURN(w.qkv, Matrix({n.q, n.k, n.v}));
    if (c_.qkv_bias) {
      LLM_RETURN_IF_ERROR(Append(n.q_bias, w.qkv_bias));
      LLM_RETURN_IF_ERROR(Append(n.k_bias, w.qkv_bias));
      LLM_RETURN_IF_ERROR(Append(n.v_bias, w.qkv_bias));
    }
    LLM_ASSIGN_OR_RETURN(w.o, Matrix({n.o}));
    if (c_.o_bias) LLM_RETURN_IF_ERROR(Append(n.o_bias, w.o_bias));
    LLM_RETURN_IF_ERROR(Append(n.post_norm, w.post_norm));
    LLM_ASSIGN_OR_RETURN(w.gate_up, Matrix({n.gate, n.up}));
    LLM_ASSIGN_OR_RETURN(w.down, Matrix({n.down}));
    if (c_.mlp_bias) {
      LLM_RETURN_IF_ERROR(Append(n.gate_bias, w.gate_up_bias));
      LLM_RETURN_IF_ERROR(Append(n.up_bias, w.gate_up_bias));
      LLM_RETURN_IF_ERROR(Append(n.down_bias, w.down_bias));
    }
    return w;
  }

 private:
  const model::ModelConfig& c_;
  const TensorStore& store_;
  std::map<std::string, TensorSpec> specs_;
};

}  // namespace

absl::StatusOr<CpuWeights> LoadCpuWeights(const model::ModelConfig& c, const TensorStore& store) {
  CpuWeights w;
  Loader loader(c, store);
  LLM_ASSIGN_OR_RETURN(const TensorView* embed, model::FindEmbedding(store, c));
  AppendF32(*embed, w.embedding);
  LLM_ASSIGN_OR_RETURN(const TensorView* head, model::FindLmHead(store, c));
  if (head == embed) {
    w.head = PackWeights(w.embedding.data(), c.vocab_size, c.hidden_size);
  } else {
    std::vector<float> rows;
    AppendF32(*head, rows);
    w.head = PackWeights(rows.data(), c.vocab_size, c.hidden_size);
  }
  LLM_RETURN_IF_ERROR(loader.Append(model::kFinalNormName, w.final_norm));
  for (int l = 0; l < c.num_layers; ++l) {
    LLM_ASSIGN_OR_RETURN(CpuLayerWeights layer, loader.Layer(l));
    w.layers.push_back(std::move(layer));
  }
  return w;
}

}  // namespace llm::runner
