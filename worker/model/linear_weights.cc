#include "worker/model/linear_weights.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp8.h"
#include "common/status_macros.h"

namespace llm::model {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The shapes a checkpoint may store `scaling`'s scales of a [out, in] weight in.
std::vector<std::vector<int64_t>> ScaleShapes(WeightScaling scaling, int64_t out, int64_t in) {
  switch (scaling) {
    case WeightScaling::kTensor:
      return {{}, {1}};
    case WeightScaling::kChannel:
      return {{out}, {out, 1}};
    default:
      return {{CeilDiv(out, kFp8Block), CeilDiv(in, kFp8Block)}};
  }
}

// A scale tensor as fp32, checked: present, F32/BF16/F16, one of `shapes`, every value finite
// and not negative.
absl::StatusOr<std::vector<float>> LoadScales(const TensorStore& store, const std::string& name,
                                              const std::vector<std::vector<int64_t>>& shapes,
                                              const std::string& what) {
  const TensorView* v = store.Find(name);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(store.dir(), ": missing tensor '", name, "' (", what, ")"));
  }
  const std::string where = absl::StrCat(*v->file, ": tensor '", name, "'");
  if (!IsWeightDType(v->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dtype ",
                                                   std::string(DTypeName(v->dtype)),
                                                   " is not served for scales (F32, BF16, F16)"));
  }
  bool shape_ok = false;
  std::vector<std::string> expected;
  for (const auto& s : shapes) {
    shape_ok = shape_ok || v->shape == s;
    expected.push_back(Shape(s));
  }
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", v->ShapeString(), ", but ",
                                                   what, " take ",
                                                   absl::StrJoin(expected, " or ")));
  }
  std::vector<float> out(static_cast<size_t>(v->num_elements()));
  ConvertToF32(v->dtype, v->data, out.size(), out.data());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) || out[i] < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": value ", out[i], " at ", i,
                                                     " is not a finite non-negative scale"));
    }
  }
  return out;
}

absl::Status CheckFp8Weight(const TensorView& v, const TensorSpec& spec,
                            const QuantScheme& scheme) {
  const std::string where = absl::StrCat(*v.file, ": tensor '", v.name, "'");
  if (v.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype ", std::string(DTypeName(v.dtype)), ", but ", scheme.source,
                     " declares its module FP8 (F8_E4M3)",
                     v.dtype == DType::kF8E5M2 ? "; F8_E5M2 weights are not served" : ""));
  }
  if (v.shape != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": shape ", v.ShapeString(), ", but config.json implies ", Shape(spec.shape)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ModuleOf(const std::string& weight_name) {
  constexpr std::string_view kSuffix = ".weight";
  if (weight_name.size() > kSuffix.size() &&
      weight_name.compare(weight_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
    return weight_name.substr(0, weight_name.size() - kSuffix.size());
  }
  return weight_name;
}

void LinearWeight::RowToF32(int64_t r, float* dst) const {
  if (scaling == WeightScaling::kNone) {
    const size_t elem = DTypeSize(weight->dtype);
    ConvertToF32(weight->dtype, weight->data + static_cast<size_t>(r * in) * elem,
                 static_cast<size_t>(in), dst);
    return;
  }
  const auto* row = reinterpret_cast<const uint8_t*>(weight->data) + r * in;
  for (int64_t c = 0; c < in; ++c) {
    dst[c] = Fp8E4M3ToFloat(row[c]) * scales[Fp8ScaleIndex(scaling, in, r, c)];
  }
}

Fp8Matrix LinearWeight::ToFp8() const {
  Fp8Matrix m;
  m.out = out;
  m.in = in;
  m.scaling = scaling;
  const auto* bytes = reinterpret_cast<const uint8_t*>(weight->data);
  m.e4m3.assign(bytes, bytes + out * in);
  m.scales = scales;
  return m;
}

absl::StatusOr<LinearWeight> GetLinearWeight(const TensorStore& store, const QuantScheme& scheme,
                                             const TensorSpec& spec) {
  LinearWeight w;
  w.module = ModuleOf(spec.name);
  w.out = spec.shape.at(0);
  w.in = spec.shape.at(1);
  const bool fp8 = scheme.format != QuantScheme::Format::kOnline && scheme.Quantizes(w.module);
  if (!fp8) {
    LLM_ASSIGN_OR_RETURN(w.weight, GetChecked(store, spec));
    return w;
  }
  w.weight = store.Find(spec.name);
  if (w.weight == nullptr) {
    return absl::NotFoundError(absl::StrCat(store.dir(), ": missing tensor '", spec.name, "'"));
  }
  LLM_RETURN_IF_ERROR(CheckFp8Weight(*w.weight, spec, scheme));
  w.scaling = scheme.weights;
  LLM_ASSIGN_OR_RETURN(
      w.scales,
      LoadScales(store, absl::StrCat(w.module, ".", scheme.weight_scale_name),
                 ScaleShapes(w.scaling, w.out, w.in),
                 absl::StrCat("per-", WeightScalingName(w.scaling), " FP8 weight scales")));
  if (scheme.activations == ActivationScaling::kStatic) {
    LLM_ASSIGN_OR_RETURN(const std::vector<float> input,
                         LoadScales(store, absl::StrCat(w.module, ".", scheme.input_scale_name),
                                    {{}, {1}}, "static per-tensor activation scales"));
    if (input[0] <= 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(store.dir(), ": tensor '", w.module, ".",
                                                     scheme.input_scale_name,
                                                     "': a static activation scale must be "
                                                     "positive, not 0"));
    }
    w.input_scale = input[0];
  }
  return w;
}

}  // namespace llm::model
