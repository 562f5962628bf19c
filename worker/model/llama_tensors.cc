#include "worker/model/llama_tensors.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random_weights.h"

namespace llm::model {

LayerTensorNames LlamaLayerTensorNames(int layer) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  LayerTensorNames n;
  n.input_norm = p + "input_layernorm.weight";
  n.q = p + "self_attn.q_proj.weight";
  n.k = p + "self_attn.k_proj.weight";
  n.v = p + "self_attn.v_proj.weight";
  n.o = p + "self_attn.o_proj.weight";
  n.q_bias = p + "self_attn.q_proj.bias";
  n.k_bias = p + "self_attn.k_proj.bias";
  n.v_bias = p + "self_attn.v_proj.bias";
  n.o_bias = p + "self_attn.o_proj.bias";
  n.q_norm = p + "self_attn.q_norm.weight";
  n.k_norm = p + "self_attn.k_norm.weight";
  n.post_norm = p + "post_attention_layernorm.weight";
  n.gate = p + "mlp.gate_proj.weight";
  n.up = p + "mlp.up_proj.weight";
  n.down = p + "mlp.down_proj.weight";
  n.gate_bias = p + "mlp.gate_proj.bias";
  n.up_bias = p + "mlp.up_proj.bias";
  n.down_bias = p + "mlp.down_proj.bias";
  return n;
}

SyntheticFill SyntheticFillFor(const TensorSpec& spec) {
  switch (spec.kind) {
    case TensorKind::kNorm:
      return {0.0f, 1.0f};
    case TensorKind::kBias:
      return {0.1f, 0.0f};
    default:
      return {LinearBound(spec.fan_in), 0.0f};
  }
}

std::vector<TensorSpec> LlamaTensorSpecs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate_size;
  std::vector<TensorSpec> s;
  s.push_back({kEmbedName, {c.vocab_size, h}, TensorKind::kEmbedding, h});
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerTensorNames n = LlamaLayerTensorNames(l);
    s.push_back({n.input_norm, {h}, TensorKind::kNorm});
    s.push_back({n.q, {q, h}, TensorKind::kLinear, h});
    s.push_back({n.k, {kv, h}, TensorKind::kLinear, h});
    s.push_back({n.v, {kv, h}, TensorKind::kLinear, h});
    if (c.qkv_bias) {
      s.push_back({n.q_bias, {q}, TensorKind::kBias, h});
      s.push_back({n.k_bias, {kv}, TensorKind::kBias, h});
      s.push_back({n.v_bias, {kv}, TensorKind::kBias, h});
    }
    if (c.qk_norm) {
      s.push_back({n.q_norm, {c.head_dim}, TensorKind::kNorm});
      s.push_back({n.k_norm, {c.head_dim}, TensorKind::kNorm});
    }
    s.push_back({n.o, {h, q}, TensorKind::kLinear, q});
    if (c.o_bias) s.push_back({n.o_bias, {h}, TensorKind::kBias, q});
    s.push_back({n.post_norm, {h}, TensorKind::kNorm});
    s.push_back({n.gate, {inter, h}, TensorKind::kLinear, h});
    s.push_back({n.up, {inter, h}, TensorKind::kLinear, h});
    s.push_back({n.down, {h, inter}, TensorKind::kLinear, inter});
    if (c.mlp_bias) {
      s.push_back({n.gate_bias, {inter}, TensorKind::kBias, h});
      s.push_back({n.up_bias, {inter}, TensorKind::kBias, h});
      s.push_back({n.down_bias, {h}, TensorKind::kBias, inter});
    }
  }
  s.push_back({kFinalNormName, {h}, TensorKind::kNorm});
  if (!c.tie_word_embeddings) s.push_back({kLmHeadName, {c.vocab_size, h}, TensorKind::kLinear, h});
  return s;
}

namespace {

absl::StatusOr<const TensorView*> Check(const TensorView* v, const TensorSpec& spec) {
  if (!IsWeightDType(v->dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(*v->file, ": tensor '", v->name, "': dtype ", std::string(DTypeName(v->dtype)),
                     " is not supported for weights (F32, F16, BF16)"));
  }
  if (v->shape != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat(*v->file, ": tensor '", v->name, "': shape ",
                                                   v->ShapeString(), ", but config.json implies [",
                                                   absl::StrJoin(spec.shape, ", "), "]"));
  }
  return v;
}

}  // namespace

absl::StatusOr<const TensorView*> GetChecked(const TensorStore& store, const TensorSpec& spec) {
  const TensorView* v = store.Find(spec.name);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(store.dir(), ": missing tensor '", spec.name, "'"));
  }
  return Check(v, spec);
}

absl::StatusOr<const TensorView*> FindEmbedding(const TensorStore& store, const ModelConfig& c) {
  TensorSpec spec{kEmbedName, {c.vocab_size, c.hidden_size}, TensorKind::kEmbedding};
  if (store.Find(kEmbedName) == nullptr && c.tie_word_embeddings && store.Find(kLmHeadName)) {
    spec.name = kLmHeadName;
  }
  return GetChecked(store, spec);
}

absl::StatusOr<const TensorView*> FindLmHead(const TensorStore& store, const ModelConfig& c) {
  TensorSpec spec{kLmHeadName, {c.vocab_size, c.hidden_size}, TensorKind::kLinear};
  if (c.tie_word_embeddings) {
    if (store.Find(kLmHeadName) == nullptr) return FindEmbedding(store, c);
    return GetChecked(store, spec);
  }
  return GetChecked(store, spec);
}

}  // namespace llm::model
