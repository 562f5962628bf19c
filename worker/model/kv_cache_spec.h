// The KV cache's dtype: bf16 (the CPU reference keeps fp32), or FP8 E4M3 with one K and one V
// scale per layer: a cached value is e4m3 * scale, written as the value divided by the scale,
// rounded to nearest even and saturating (common/fp8.h). The scales are the checkpoint's
// (compressed-tensors' self_attn.k_scale / v_scale, older files' k_proj.output_scale /
// v_proj.output_scale, ModelOpt's k_proj.k_scale / v_proj.v_scale) where it has them, else
// 1.0, as vLLM does.
#ifndef LLM_WORKER_MODEL_KV_CACHE_SPEC_H_
#define LLM_WORKER_MODEL_KV_CACHE_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"

namespace llm::model {

enum class KvCacheDtype { kBf16, kFp8 };

struct KvCacheSpec {
  KvCacheDtype dtype = KvCacheDtype::kBf16;
  std::vector<float> k_scale;  // [layers], FP8 only
  std::vector<float> v_scale;
  std::string source;  // what decided it: "engine.kv_cache_dtype", or the checkpoint's file

  bool fp8() const { return dtype == KvCacheDtype::kFp8; }
  // "fp8 e4m3, per-layer scales from the checkpoint (DIR/config.json)", "bf16".
  std::string Describe() const;
};

// The settings of engine.kv_cache_dtype, for help texts.
inline constexpr char kKvCacheDtypes[] = "auto, bf16, fp8";

// engine.kv_cache_dtype for the model: "auto" follows the checkpoint (`scheme.kv_cache_fp8`),
// "bf16" and "fp8" choose. FP8 takes each layer's scales from `store` (null: a synthetic model,
// scales 1.0), checked: a scale that is not one finite positive number (shape [] or [1], F32,
// BF16 or F16) is an error naming the tensor. INVALID_ARGUMENT naming engine.kv_cache_dtype for
// another setting.
absl::StatusOr<KvCacheSpec> ResolveKvCache(const std::string& option, const QuantScheme& scheme,
                                           const ModelConfig& config, const TensorStore* store);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_KV_CACHE_SPEC_H_
