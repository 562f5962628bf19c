#include "worker/model/kv_cache_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace llm::model {
namespace {

// A layer's scale for `which` ("k" or "v"): the first of the names checkpoints use, else 1.
absl::StatusOr<float> LayerScale(const TensorStore* store, int layer, const std::string& which,
                                 bool* found) {
  if (store == nullptr) return 1.0f;
  const std::string p = absl::StrCat("model.layers.", layer, ".self_attn.");
  for (const std::string& name :
       {absl::StrCat(p, which, "_scale"), absl::StrCat(p, which, "_proj.", which, "_scale"),
        absl::StrCat(p, which, "_proj.output_scale")}) {
    const TensorView* v = store->Find(name);
    if (v == nullptr) continue;
    const std::string where = absl::StrCat(*v->file, ": tensor '", name, "'");
    if (!IsWeightDType(v->dtype) || v->num_elements() != 1 || v->shape.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       ": a KV cache scale is one F32, BF16 or F16 number (shape [] or "
                       "[1]), not ",
                       std::string(DTypeName(v->dtype)), " ", v->ShapeString()));
    }
    float s = 0.0f;
    ConvertToF32(v->dtype, v->data, 1, &s);
    if (!std::isfinite(s) || s <= 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a KV cache scale must be a finite positive number, not ", s));
    }
    *found = true;
    return s;
  }
  return 1.0f;
}

}  // namespace

std::string KvCacheSpec::Describe() const {
  if (!fp8()) return "bf16";
  return absl::StrCat("fp8 e4m3, per-layer K and V scales (", source, ")");
}

absl::StatusOr<KvCacheSpec> ResolveKvCache(const std::string& option, const QuantScheme& scheme,
                                           const ModelConfig& config, const TensorStore* store) {
  KvCacheSpec spec;
  if (option == "auto") {
    spec.dtype = scheme.kv_cache_fp8 ? KvCacheDtype::kFp8 : KvCacheDtype::kBf16;
    spec.source = scheme.kv_cache_fp8 ? scheme.source : "engine.kv_cache_dtype: auto";
  } else if (option == "bf16" || option == "fp8") {
    spec.dtype = option == "fp8" ? KvCacheDtype::kFp8 : KvCacheDtype::kBf16;
    spec.source = "engine.kv_cache_dtype";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.kv_cache_dtype: '", option, "' is not one of ", kKvCacheDtypes));
  }
  if (!spec.fp8()) return spec;
  bool found = false;
  for (int l = 0; l < config.num_layers; ++l) {
    LLM_ASSIGN_OR_RETURN(const float k, LayerScale(store, l, "k", &found));
    LLM_ASSIGN_OR_RETURN(const float v, LayerScale(store, l, "v", &found));
    spec.k_scale.push_back(k);
    spec.v_scale.push_back(v);
  }
  spec.source = absl::StrCat(spec.source, found ? ", scales from the checkpoint" : ", scales 1.0");
  return spec;
}

}  // namespace llm::model
