// A matrix product of the CPU reference with its type: fp32 weights (converted, or dequantised
// from the checkpoint's FP8 E4M3 and scales), its bias, and what an FP8 product does to its
// input first (the round trip through E4M3 per token, per 1x128 group or with a static scale),
// so every FP8 kernel has this as its reference. The one dispatch point of the CPU model's
// products: the layer wiring names products, not formats.
#ifndef LLM_WORKER_RUNNER_CPU_LINEAR_H_
#define LLM_WORKER_RUNNER_CPU_LINEAR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/fp8_quant.h"
#include "worker/model/linear_weights.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_ops.h"

namespace llm {
class ThreadPool;
}

namespace llm::runner {

struct CpuLinear {
  PackedWeights w;             // [out, in], logical
  std::vector<float> bias;     // [out] or empty
  model::ActivationQuant act;  // kNone: a 16/32-bit product
};

// y = act(x) . w^T (+ bias) for x [rows, in] and y [rows, out]. x is not modified: the round
// trip of an FP8 product's input goes through `scratch` (resized).
void RunLinear(const float* x, const CpuLinear& l, float* y, size_t rows, ThreadPool* pool,
               std::vector<float>& scratch);

// The product of the linear modules whose weight specs are `specs`, stacked along the output
// (q, k, v or gate, up), in `scheme`'s format: every module FP8 or none (ProductQuantized). An
// FP8 checkpoint's weights are dequantised and its activation scheme kept (a static input scale
// is the largest of the modules': they share the input); engine.quantization: fp8 quantises
// each row here (QuantizeFp8 per channel, then back). Errors name the file and the tensor.
absl::StatusOr<CpuLinear> LoadCpuLinear(const model::TensorStore& store,
                                        const model::QuantScheme& scheme,
                                        const std::vector<model::TensorSpec>& specs);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_LINEAR_H_
