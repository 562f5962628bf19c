// A linear layer's weight as a typed reference: its dtype (16/32-bit or FP8 E4M3), its scales
// and their layout, and the static input scale of its activations, checked against the
// checkpoint's QuantScheme and the model's shapes. The runners build their products from these
// (the CPU dequantises to fp32; the CUDA runner uploads E4M3 bytes and scales), so a format
// changes types, not the layer wiring.
#ifndef LLM_WORKER_MODEL_LINEAR_WEIGHTS_H_
#define LLM_WORKER_MODEL_LINEAR_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/fp8_quant.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"

namespace llm::model {

// One linear layer of a checkpoint. Valid while its TensorStore lives.
struct LinearWeight {
  std::string module;        // "model.layers.0.self_attn.q_proj"
  const TensorView* weight;  // [out, in]
  int64_t out = 0;
  int64_t in = 0;
  // kNone: the weight is F32/F16/BF16. Otherwise it is F8_E4M3 and `scales` hold the
  // checkpoint's scales in fp32 (Fp8Matrix's layout: [1], [out] or [ceil(out/128), ceil(in/128)]).
  WeightScaling scaling = WeightScaling::kNone;
  std::vector<float> scales;
  float input_scale = 0.0f;  // the static activation scale (ActivationScaling::kStatic), else 0

  // Row r in fp32: converted, or dequantised (e4m3 * scale). `dst` holds `in` floats.
  void RowToF32(int64_t r, float* dst) const;
  // The FP8 matrix it holds (scaling != kNone): the E4M3 bytes and scales, copied.
  Fp8Matrix ToFp8() const;
};

// The linear layer whose weight is `spec` (a kLinear spec of LlamaTensorSpecs): in `scheme`'s
// format when the scheme quantises the module (its E4M3 weight, its `weight_scale_name` tensor
// and, for static activations, its input scale), else a 16/32-bit weight. Errors name the file,
// the tensor and what is wrong with it: a missing scale, a scale of the wrong shape or dtype, a
// scale that is not a finite non-negative number, a weight in a dtype the scheme does not say.
// A checkpoint quantised at load (QuantScheme::Format::kOnline) reads as its 16/32-bit weights.
absl::StatusOr<LinearWeight> GetLinearWeight(const TensorStore& store, const QuantScheme& scheme,
                                             const TensorSpec& spec);

// The module of a weight tensor's name: "x.q_proj.weight" -> "x.q_proj".
std::string ModuleOf(const std::string& weight_name);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_LINEAR_WEIGHTS_H_
