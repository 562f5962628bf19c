#include "worker/model/fp8_writer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "worker/model/fp8_quant.h"
#include "worker/model/linear_weights.h"
#include "worker/model/llama_tensors.h"

namespace llm::model {
namespace {

using nlohmann::json;

// The scales' tensor name and shape as the format stores them.
struct ScaleTensor {
  std::string name;
  std::vector<int64_t> shape;
};

ScaleTensor ScaleTensorOf(const TensorSpec& spec, WeightScaling scaling) {
  const std::string module = ModuleOf(spec.name);
  const int64_t out = spec.shape[0], in = spec.shape[1];
  switch (scaling) {
    case WeightScaling::kTensor:
      return {module + ".weight_scale", {1}};
    case WeightScaling::kChannel:
      return {module + ".weight_scale", {out, 1}};
    default:
      return {module + ".weight_scale_inv", {CeilDiv(out, kFp8Block), CeilDiv(in, kFp8Block)}};
  }
}

bool Quantized(const TensorSpec& spec) {
  return spec.kind == TensorKind::kLinear && spec.name != kLmHeadName;
}

std::string_view Bytes(const void* data, size_t n) {
  return std::string_view(static_cast<const char*>(data), n);
}

}  // namespace

json Fp8QuantizationConfig(WeightScaling scaling) {
  if (scaling == WeightScaling::kBlock) {
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {kFp8Block, kFp8Block}},
            {"modules_to_not_convert", {"lm_head"}}};
  }
  const json number8 = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}};
  json weights = number8, inputs = number8;
  weights["strategy"] = WeightScalingName(scaling);
  weights["dynamic"] = false;
  inputs["strategy"] = "token";
  inputs["dynamic"] = true;
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}}};
}

absl::Status WriteFp8Checkpoint(const ModelConfig& config, const TensorStore& store,
                                WeightScaling scaling, const std::string& out_dir,
                                ThreadPool* pool) {
  if (scaling == WeightScaling::kNone) {
    return absl::InvalidArgumentError("--fp8: a scaling (tensor, channel, block) is needed");
  }
  std::vector<TensorSpec> specs = LlamaTensorSpecs(config);
  std::vector<SafetensorsWriter::Entry> entries;
  std::vector<const TensorView*> views;
  for (const TensorSpec& spec : specs) {
    const TensorView* v = nullptr;
    if (spec.name == kEmbedName) {
      LLM_ASSIGN_OR_RETURN(v, FindEmbedding(store, config));
    } else {
      LLM_ASSIGN_OR_RETURN(v, GetChecked(store, spec));
    }
    views.push_back(v);
    if (!Quantized(spec)) {
      entries.push_back({spec.name, v->dtype, spec.shape});
      continue;
    }
    entries.push_back({spec.name, DType::kF8E4M3, spec.shape});
    const ScaleTensor scale = ScaleTensorOf(spec, scaling);
    entries.push_back({scale.name, DType::kF32, scale.shape});
  }
  const std::string weights_path = (std::filesystem::path(out_dir) / "model.safetensors").string();
  LLM_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(weights_path, std::move(entries)));
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorView& v = *views[i];
    if (!Quantized(specs[i])) {
      LLM_RETURN_IF_ERROR(writer->Append(Bytes(v.data, v.num_bytes)));
      continue;
    }
    std::vector<float> w(static_cast<size_t>(v.num_elements()));
    ConvertToF32(v.dtype, v.data, w.size(), w.data());
    const Fp8Matrix q = QuantizeFp8(w.data(), v.shape[0], v.shape[1], scaling, pool);
    LLM_RETURN_IF_ERROR(writer->Append(Bytes(q.e4m3.data(), q.e4m3.size())));
    LLM_RETURN_IF_ERROR(writer->Append(Bytes(q.scales.data(), q.scales.size() * sizeof(float))));
  }
  LLM_RETURN_IF_ERROR(writer->Close());
  json j = ModelConfigToJson(config);
  j["quantization_config"] = Fp8QuantizationConfig(scaling);
  return WriteStringToFile((std::filesystem::path(out_dir) / "config.json").string(), j.dump(2));
}

}  // namespace llm::model
