#include "worker/runner/cpu_linear.h"

#include <algorithm>
#include <cstring>

#include "common/status_macros.h"

namespace llm::runner {

void RunLinear(const float* x, const CpuLinear& l, float* y, size_t rows, ThreadPool* pool,
               std::vector<float>& scratch) {
  const float* bias = l.bias.empty() ? nullptr : l.bias.data();
  if (l.act.scaling == model::ActivationScaling::kNone) {
    MatMulPacked(x, l.w, bias, y, rows, pool);
    return;
  }
  scratch.resize(rows * l.w.in);
  std::memcpy(scratch.data(), x, rows * l.w.in * sizeof(float));
  model::Fp8RoundTripActivations(scratch.data(), rows, l.w.in, l.act);
  MatMulPacked(scratch.data(), l.w, bias, y, rows, pool);
}

absl::StatusOr<CpuLinear> LoadCpuLinear(const model::TensorStore& store,
                                        const model::QuantScheme& scheme,
                                        const std::vector<model::TensorSpec>& specs) {
  std::vector<std::string> modules;
  for (const auto& spec : specs) modules.push_back(model::ModuleOf(spec.name));
  LLM_ASSIGN_OR_RETURN(const bool fp8, model::ProductQuantized(scheme, modules));
  CpuLinear l;
  std::vector<float> rows;
  size_t out = 0, in = 0;
  float static_scale = 0.0f;
  for (const auto& spec : specs) {
    LLM_ASSIGN_OR_RETURN(const model::LinearWeight w, model::GetLinearWeight(store, scheme, spec));
    in = static_cast<size_t>(w.in);
    rows.resize((out + static_cast<size_t>(w.out)) * in);
    float* dst = rows.data() + out * in;
    for (int64_t r = 0; r < w.out; ++r) w.RowToF32(r, dst + static_cast<size_t>(r) * in);
    if (fp8 && scheme.format == model::QuantScheme::Format::kOnline) {
      // Quantised at load: each row through E4M3 with its own scale, and back.
      const model::Fp8Matrix q = model::QuantizeFp8(dst, w.out, w.in, scheme.weights);
      for (int64_t r = 0; r < w.out; ++r) q.DequantizeRow(r, dst + static_cast<size_t>(r) * in);
    }
    static_scale = std::max(static_scale, w.input_scale);
    out += static_cast<size_t>(w.out);
  }
  if (fp8) l.act = {scheme.activations, static_scale};
  l.w = PackWeights(rows.data(), out, in);
  return l;
}

}  // namespace llm::runner
