#include "worker/model/checkpoint_layout.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/llama_tensors.h"

namespace llm::model {
namespace {

absl::Status TensorError(const TensorView& v, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(*v.file, ": tensor '", v.name, "' ", what));
}

// The fused tensor `name`, a 16/32-bit matrix of `rows` rows.
absl::StatusOr<const TensorView*> Fused(const TensorStore& store, const std::string& name,
                                        int64_t rows, int64_t cols) {
  LLM_ASSIGN_OR_RETURN(const TensorView* v, store.Get(name));
  if (!IsWeightDType(v->dtype)) {
    return TensorError(*v, absl::StrCat("is ", std::string(DTypeName(v->dtype)),
                                        "; only 16/32-bit fused matrices are split"));
  }
  if (v->shape != std::vector<int64_t>{rows, cols}) {
    return TensorError(
        *v, absl::StrCat("has shape ", v->ShapeString(), ", not [", rows, ", ", cols, "]"));
  }
  return v;
}

// Splits `fused` by rows into tensors named `names`, of `rows[i]` rows each.
void SplitRows(const TensorView& fused, const std::vector<std::string>& names,
               const std::vector<int64_t>& rows, std::vector<TensorView>* out) {
  const size_t row_bytes = fused.num_bytes / fused.shape[0];
  int64_t first = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    out->push_back({names[i],
                    fused.dtype,
                    {rows[i], fused.shape[1]},
                    fused.data + first * row_bytes,
                    rows[i] * row_bytes,
                    fused.file});
    first += rows[i];
  }
}

std::string QkvName(int layer) {
  return absl::StrCat("model.layers.", layer, ".self_attn.qkv_proj.weight");
}
std::string GateUpName(int layer) {
  return absl::StrCat("model.layers.", layer, ".mlp.gate_up_proj.weight");
}

absl::StatusOr<std::unique_ptr<TensorStore>> SplitPhi3(const ModelConfig& c,
                                                       std::unique_ptr<TensorStore> store) {
  std::vector<std::string> removed;
  std::vector<TensorView> views;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerTensorNames n = LlamaLayerTensorNames(l);
    const std::string qkv = QkvName(l), gate_up = GateUpName(l);
    LLM_ASSIGN_OR_RETURN(const TensorView* a,
                         Fused(*store, qkv, c.q_dim() + 2 * c.kv_dim(), c.hidden_size));
    SplitRows(*a, {n.q, n.k, n.v}, {c.q_dim(), c.kv_dim(), c.kv_dim()}, &views);
    LLM_ASSIGN_OR_RETURN(const TensorView* m,
                         Fused(*store, gate_up, 2 * c.intermediate_size, c.hidden_size));
    SplitRows(*m, {n.gate, n.up}, {c.intermediate_size, c.intermediate_size}, &views);
    removed.insert(removed.end(), {qkv, gate_up});
  }
  return TensorStore::Derive(std::move(store), removed, std::move(views), {});
}

// Writes `x` as `dtype` (F32, F16 or BF16) at `at`.
void Put(DType dtype, float x, char* at) {
  if (dtype == DType::kF32) {
    std::memcpy(at, &x, 4);
    return;
  }
  const uint16_t bits = dtype == DType::kBF16 ? F32ToBf16(x) : F32ToF16(x);
  std::memcpy(at, &bits, 2);
}

// `v`'s rows in another order, row i of the copy being row from[i] times scale[i], in v's dtype.
absl::StatusOr<TensorData> Reordered(const TensorView& v, const std::vector<int64_t>& from,
                                     const std::vector<double>& scale) {
  if (!IsWeightDType(v.dtype)) {
    return TensorError(v, absl::StrCat("is ", std::string(DTypeName(v.dtype)),
                                       "; only 16/32-bit weights are reordered"));
  }
  const size_t cols = static_cast<size_t>(v.shape[1]), item = DTypeSize(v.dtype);
  std::vector<float> row(cols);
  TensorData out{v.name, v.dtype, v.shape, std::string(v.num_bytes, '\0')};
  for (size_t i = 0; i < from.size(); ++i) {
    ConvertToF32(v.dtype, v.data + from[i] * cols * item, cols, row.data());
    for (size_t k = 0; k < cols; ++k) {
      Put(v.dtype, static_cast<float>(row[k] * scale[i]), out.bytes.data() + (i * cols + k) * item);
    }
  }
  return out;
}

// Partial RoPE: Hugging Face turns pairs (i, i + r/2) of a head's first r = rotary_dim
// dimensions and leaves the rest; the runners turn pairs (j, j + h/2) of whole heads, with
// frequency 0 (no turn) past the first r/2 pairs. Each q and k head's rows are reordered so
// that the turned dimensions land on the turning pairs and the rest on the others (q.k is the
// same under one reordering of both), and the unturned rows divided by the attention factor,
// which the runners' tables multiply every pair by.
absl::StatusOr<std::unique_ptr<TensorStore>> ReorderPartialRotary(
    const ModelConfig& c, std::unique_ptr<TensorStore> store) {
  const int64_t h = c.head_dim, r = c.rotary(), pass = (h - r) / 2;
  const double unturned = 1.0 / RopeAttentionFactor(c);
  std::vector<int64_t> head_from(h);
  std::vector<double> head_scale(h, 1.0);
  for (int64_t p = 0; p < h / 2; ++p) {
    const bool turns = p < r / 2;
    head_from[p] = turns ? p : r + (p - r / 2);
    head_from[h / 2 + p] = turns ? r / 2 + p : r + pass + (p - r / 2);
    if (!turns) head_scale[p] = head_scale[h / 2 + p] = unturned;
  }
  std::vector<std::string> removed;
  std::vector<TensorData> owned;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerTensorNames n = LlamaLayerTensorNames(l);
    for (const auto& [name, heads] : {std::pair{n.q, c.num_heads}, {n.k, c.num_kv_heads}}) {
      std::vector<int64_t> from;
      std::vector<double> scale;
      for (int32_t head = 0; head < heads; ++head) {
        for (int64_t p = 0; p < h; ++p) {
          from.push_back(head * h + head_from[p]);
          scale.push_back(head_scale[p]);
        }
      }
      LLM_ASSIGN_OR_RETURN(const TensorView* v, store->Get(name));
      LLM_ASSIGN_OR_RETURN(TensorData t, Reordered(*v, from, scale));
      owned.push_back(std::move(t));
      removed.push_back(name);
    }
  }
  return TensorStore::Derive(std::move(store), removed, {}, std::move(owned));
}

// A copy of `v` with every element multiplied by `factor`, in v's dtype.
absl::StatusOr<TensorData> Scaled(const TensorView& v, double factor) {
  if (!IsWeightDType(v.dtype)) {
    return TensorError(v, absl::StrCat("is ", std::string(DTypeName(v.dtype)),
                                       "; quantised Granite checkpoints are not served"));
  }
  const size_t n = static_cast<size_t>(v.num_elements());
  std::vector<float> f(n);
  ConvertToF32(v.dtype, v.data, n, f.data());
  TensorData out{v.name, v.dtype, v.shape, std::string(v.num_bytes, '\0')};
  const size_t item = DTypeSize(v.dtype);
  for (size_t i = 0; i < n; ++i) {
    Put(v.dtype, static_cast<float>(f[i] * factor), out.bytes.data() + i * item);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TensorStore>> FoldGranite(const ModelConfig& c,
                                                         std::unique_ptr<TensorStore> store) {
  const GraniteMultipliers& g = c.granite;
  const double residual = g.residual / g.embedding;
  const double query = g.attention * std::sqrt(static_cast<double>(c.head_dim));
  std::vector<std::pair<std::string, double>> folds = {{kFinalNormName, 1.0 / g.logits}};
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerTensorNames n = LlamaLayerTensorNames(l);
    folds.insert(folds.end(), {{n.q, query}, {n.o, residual}, {n.down, residual}});
    if (c.qkv_bias) folds.emplace_back(n.q_bias, query);
    if (c.o_bias) folds.emplace_back(n.o_bias, residual);
    if (c.mlp_bias) folds.emplace_back(n.down_bias, residual);
  }
  std::vector<std::string> removed;
  std::vector<TensorData> owned;
  for (const auto& [name, factor] : folds) {
    if (factor == 1.0) continue;
    LLM_ASSIGN_OR_RETURN(const TensorView* v, store->Get(name));
    LLM_ASSIGN_OR_RETURN(TensorData t, Scaled(*v, factor));
    owned.push_back(std::move(t));
    removed.push_back(name);
  }
  return TensorStore::Derive(std::move(store), removed, {}, std::move(owned));
}

}  // namespace

std::vector<TensorSpec> CheckpointTensorSpecs(const ModelConfig& c) {
  std::vector<TensorSpec> specs = LlamaTensorSpecs(c);
  if (c.model_type != "phi3") return specs;
  std::vector<TensorSpec> out;
  for (TensorSpec& s : specs) {
    const auto ends = [&](const char* suffix) { return absl::EndsWith(s.name, suffix); };
    if (ends("self_attn.k_proj.weight") || ends("self_attn.v_proj.weight") ||
        ends("mlp.up_proj.weight")) {
      continue;
    }
    // What is left to change is a layer's: "model.layers.<layer>.".
    const int layer = static_cast<int>(std::strtol(s.name.c_str() + 13, nullptr, 10));
    if (ends("self_attn.q_proj.weight")) {
      s = {QkvName(layer),
           {c.q_dim() + 2 * c.kv_dim(), c.hidden_size},
           TensorKind::kLinear,
           c.hidden_size};
    } else if (ends("mlp.gate_proj.weight")) {
      s = {GateUpName(layer),
           {2 * c.intermediate_size, c.hidden_size},
           TensorKind::kLinear,
           c.hidden_size};
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TensorStore>> ToLlamaLayout(const ModelConfig& config,
                                                           std::unique_ptr<TensorStore> store) {
  if (config.model_type == "phi3") {
    LLM_ASSIGN_OR_RETURN(store, SplitPhi3(config, std::move(store)));
    if (config.rotary() == config.head_dim) return store;
    return ReorderPartialRotary(config, std::move(store));
  }
  if (config.model_type == "granite") return FoldGranite(config, std::move(store));
  return store;
}

}  // namespace llm::model
