#include "worker/model/quant_scheme.h"

#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace llm::model {
namespace {

using nlohmann::json;

// A field of a quantisation config, for errors: "DIR/config.json: quantization_config.fmt".
struct Field {
  const std::string& source;
  std::string path;

  Field operator/(const std::string& key) const { return {source, absl::StrCat(path, ".", key)}; }
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", path, ": ", what));
  }
  // "'block' is not served (tensor, channel)".
  absl::Status NotServed(const json& value, const std::string& served) const {
    return Error(absl::StrCat(value.dump(), " is not served (", served, ")"));
  }
};

const json* Find(const json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A string field: `fallback` when absent; an error when of another type.
absl::StatusOr<std::string> GetString(const json& j, const Field& f, const std::string& key,
                                      const std::string& fallback) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::string(fallback);
  if (!v->is_string()) return (f / key).Error(absl::StrCat(v->dump(), " is not a string"));
  return v->get<std::string>();
}

// A field that must equal `expected` where present.
absl::Status Expect(const json& j, const Field& f, const std::string& key, const json& expected,
                    bool required) {
  const json* v = Find(j, key);
  if (v == nullptr) {
    return required ? (f / key).Error(absl::StrCat("missing (", expected.dump(), ")"))
                    : absl::OkStatus();
  }
  if (*v != expected) return (f / key).NotServed(*v, expected.dump());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModulePattern>> Patterns(const json& j, const Field& f,
                                                    const std::string& key,
                                                    ModulePattern::Kind kind) {
  std::vector<ModulePattern> out;
  const json* list = Find(j, key);
  if (list == nullptr) return out;
  if (!list->is_array()) return (f / key).Error("must be a list of module names");
  for (const json& item : *list) {
    if (!item.is_string()) return (f / key).Error(absl::StrCat(item.dump(), " is not a string"));
    ModulePattern p{kind, item.get<std::string>()};
    if (kind == ModulePattern::Kind::kExact && p.text.rfind("re:", 0) == 0) {
      p.kind = ModulePattern::Kind::kRegex;
      p.text = p.text.substr(3);
      try {
        std::regex check(p.text);
      } catch (const std::regex_error&) {
        return (f / key).Error(absl::StrCat(item.dump(), " is not a valid regular expression"));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// compressed-tensors "weights" of a config group.
absl::Status ParseCtWeights(const json& w, const Field& f, QuantScheme& s) {
  LLM_RETURN_IF_ERROR(Expect(w, f, "num_bits", 8, true));
  LLM_RETURN_IF_ERROR(Expect(w, f, "type", "float", true));
  LLM_RETURN_IF_ERROR(Expect(w, f, "symmetric", true, false));
  LLM_RETURN_IF_ERROR(Expect(w, f, "dynamic", false, false));
  LLM_ASSIGN_OR_RETURN(const std::string strategy, GetString(w, f, "strategy", ""));
  if (strategy == "tensor") {
    s.weights = WeightScaling::kTensor;
  } else if (strategy == "channel") {
    s.weights = WeightScaling::kChannel;
  } else if (strategy == "block") {
    s.weights = WeightScaling::kBlock;
    LLM_RETURN_IF_ERROR(Expect(w, f, "block_structure", json::array({128, 128}), true));
  } else {
    return (f / "strategy").NotServed(strategy, "tensor, channel, block");
  }
  return absl::OkStatus();
}

// compressed-tensors "input_activations" of a config group.
absl::Status ParseCtActivations(const json* a, const Field& f, QuantScheme& s) {
  if (a == nullptr) {
    return f.Error("null (FP8 weights with 16-bit activations) is not served; W8A8 only");
  }
  LLM_RETURN_IF_ERROR(Expect(*a, f, "num_bits", 8, true));
  LLM_RETURN_IF_ERROR(Expect(*a, f, "type", "float", true));
  LLM_RETURN_IF_ERROR(Expect(*a, f, "symmetric", true, false));
  LLM_ASSIGN_OR_RETURN(const std::string strategy, GetString(*a, f, "strategy", ""));
  const json* dynamic = Find(*a, "dynamic");
  const bool is_dynamic = dynamic != nullptr && *dynamic == true;
  if (dynamic != nullptr && !dynamic->is_boolean()) {
    return (f / "dynamic").NotServed(*dynamic, "true, false");
  }
  if (strategy == "token" && is_dynamic) {
    s.activations = ActivationScaling::kToken;
  } else if (strategy == "tensor" && !is_dynamic) {
    s.activations = ActivationScaling::kStatic;
  } else if (strategy == "group" && is_dynamic) {
    s.activations = ActivationScaling::kGroup;
    LLM_RETURN_IF_ERROR(Expect(*a, f, "group_size", 128, true));
  } else {
    return f.Error(absl::StrCat("strategy ", json(strategy).dump(), " with dynamic ",
                                is_dynamic ? "true" : "false",
                                " is not served (token dynamic, tensor static, group dynamic)"));
  }
  return absl::OkStatus();
}

// A kv_cache_scheme (compressed-tensors; ModelOpt's config.json form): null, or FP8 E4M3 with
// one K and one V scale a layer.
absl::Status ParseKvCacheScheme(const json* kv, const Field& f, QuantScheme& s) {
  if (kv == nullptr) return absl::OkStatus();
  LLM_RETURN_IF_ERROR(Expect(*kv, f, "num_bits", 8, true));
  LLM_RETURN_IF_ERROR(Expect(*kv, f, "type", "float", true));
  LLM_RETURN_IF_ERROR(Expect(*kv, f, "strategy", "tensor", false));
  LLM_RETURN_IF_ERROR(Expect(*kv, f, "dynamic", false, false));
  LLM_RETURN_IF_ERROR(Expect(*kv, f, "symmetric", true, false));
  s.kv_cache_fp8 = true;
  return absl::OkStatus();
}

absl::Status ParseCompressedTensors(const json& qc, const Field& f, QuantScheme& s) {
  s.format = QuantScheme::Format::kCompressedTensors;
  LLM_ASSIGN_OR_RETURN(const std::string format, GetString(qc, f, "format", "float-quantized"));
  if (format != "float-quantized") return (f / "format").NotServed(format, "float-quantized");
  LLM_RETURN_IF_ERROR(Expect(qc, f, "quantization_status", "compressed", false));
  const json* groups = Find(qc, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->size() != 1) {
    return (f / "config_groups")
        .Error(absl::StrCat(groups == nullptr ? 0 : groups->size(),
                            " groups; one group (targets [\"Linear\"]) is served"));
  }
  const std::string group_name = groups->begin().key();
  const json& g = groups->begin().value();
  const Field gf = f / "config_groups" / group_name;
  LLM_RETURN_IF_ERROR(Expect(g, gf, "targets", json::array({"Linear"}), true));
  LLM_ASSIGN_OR_RETURN(const std::string group_format, GetString(g, gf, "format", format));
  if (group_format != "float-quantized") {
    return (gf / "format").NotServed(group_format, "float-quantized");
  }
  if (Find(g, "output_activations") != nullptr) {
    return (gf / "output_activations").NotServed(g["output_activations"], "null");
  }
  const json* weights = Find(g, "weights");
  if (weights == nullptr) return (gf / "weights").Error("missing");
  LLM_RETURN_IF_ERROR(ParseCtWeights(*weights, gf / "weights", s));
  LLM_RETURN_IF_ERROR(
      ParseCtActivations(Find(g, "input_activations"), gf / "input_activations", s));
  const bool block = s.weights == WeightScaling::kBlock;
  if (block != (s.activations == ActivationScaling::kGroup)) {
    return gf.Error(absl::StrCat("weights strategy ", WeightScalingName(s.weights),
                                 " with input_activations strategy ",
                                 ActivationScalingName(s.activations),
                                 " is not served (block weights go with group activations)"));
  }
  LLM_ASSIGN_OR_RETURN(s.ignore, Patterns(qc, f, "ignore", ModulePattern::Kind::kExact));
  return ParseKvCacheScheme(Find(qc, "kv_cache_scheme"), f / "kv_cache_scheme", s);
}

// Hugging Face "fp8": fine-grained blocks (weight_block_size) or AutoFP8's per-tensor scales.
absl::Status ParseHfFp8(const json& qc, const Field& f, QuantScheme& s) {
  s.format = QuantScheme::Format::kHfFp8;
  LLM_ASSIGN_OR_RETURN(const std::string fmt, GetString(qc, f, "fmt", "e4m3"));
  if (fmt != "e4m3") return (f / "fmt").NotServed(fmt, "e4m3");
  LLM_ASSIGN_OR_RETURN(const std::string scale_fmt, GetString(qc, f, "scale_fmt", "float"));
  if (scale_fmt != "float") return (f / "scale_fmt").NotServed(scale_fmt, "float");
  LLM_ASSIGN_OR_RETURN(const std::string scheme, GetString(qc, f, "activation_scheme", "dynamic"));
  if (scheme != "dynamic" && scheme != "static") {
    return (f / "activation_scheme").NotServed(scheme, "dynamic, static");
  }
  if (Find(qc, "weight_block_size") != nullptr) {
    LLM_RETURN_IF_ERROR(Expect(qc, f, "weight_block_size", json::array({128, 128}), true));
    if (scheme != "dynamic") {
      return (f / "activation_scheme").NotServed(scheme, "dynamic, with weight_block_size");
    }
    s.weights = WeightScaling::kBlock;
    s.activations = ActivationScaling::kGroup;
    s.weight_scale_name = "weight_scale_inv";
  } else {
    s.weights = WeightScaling::kTensor;
    s.activations = scheme == "static" ? ActivationScaling::kStatic : ActivationScaling::kToken;
  }
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    LLM_ASSIGN_OR_RETURN(auto patterns, Patterns(qc, f, key, ModulePattern::Kind::kSubstring));
    s.ignore.insert(s.ignore.end(), patterns.begin(), patterns.end());
  }
  return absl::OkStatus();
}

// ModelOpt: `q` holds quant_algo and exclude_modules (hf_quant_config.json's "quantization"), or
// quant_algo and ignore (config.json's quantization_config).
absl::Status ParseModelOpt(const json& q, const Field& f, QuantScheme& s) {
  s.format = QuantScheme::Format::kModelOpt;
  LLM_ASSIGN_OR_RETURN(const std::string algo, GetString(q, f, "quant_algo", ""));
  if (algo == "FP8") {
    s.weights = WeightScaling::kTensor;
    s.activations = ActivationScaling::kStatic;
  } else if (algo == "FP8_PER_CHANNEL_PER_TOKEN") {
    s.weights = WeightScaling::kChannel;
    s.activations = ActivationScaling::kToken;
  } else {
    return (f / "quant_algo").NotServed(algo, "FP8, FP8_PER_CHANNEL_PER_TOKEN");
  }
  for (const char* key : {"exclude_modules", "ignore"}) {
    LLM_ASSIGN_OR_RETURN(auto patterns, Patterns(q, f, key, ModulePattern::Kind::kGlob));
    s.ignore.insert(s.ignore.end(), patterns.begin(), patterns.end());
  }
  LLM_ASSIGN_OR_RETURN(const std::string kv_algo, GetString(q, f, "kv_cache_quant_algo", ""));
  if (!kv_algo.empty() && kv_algo != "FP8") {
    return (f / "kv_cache_quant_algo").NotServed(kv_algo, "FP8, null");
  }
  s.kv_cache_fp8 = kv_algo == "FP8";
  return ParseKvCacheScheme(Find(q, "kv_cache_scheme"), f / "kv_cache_scheme", s);
}

// fnmatch's * and ? (ModelOpt's exclude_modules); other characters match themselves.
bool GlobMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  LLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(path + ": not a JSON object");
  return j;
}

}  // namespace

const char* WeightScalingName(WeightScaling s) {
  switch (s) {
    case WeightScaling::kTensor:
      return "tensor";
    case WeightScaling::kChannel:
      return "channel";
    case WeightScaling::kBlock:
      return "block";
    default:
      return "none";
  }
}

const char* ActivationScalingName(ActivationScaling s) {
  switch (s) {
    case ActivationScaling::kToken:
      return "token";
    case ActivationScaling::kGroup:
      return "group";
    case ActivationScaling::kStatic:
      return "static";
    default:
      return "none";
  }
}

bool ModulePattern::Matches(std::string_view module) const {
  switch (kind) {
    case Kind::kExact:
      return module == text;
    case Kind::kSubstring:
      return module.find(text) != std::string_view::npos;
    case Kind::kGlob:
      return GlobMatch(text, module);
    case Kind::kRegex: {
      const std::regex re(text);
      const std::string m(module);
      return std::regex_search(m, re, std::regex_constants::match_continuous);
    }
  }
  return false;
}

bool QuantScheme::Quantizes(std::string_view module) const {
  if (!quantized()) return false;
  for (const ModulePattern& p : ignore) {
    if (p.Matches(module)) return false;
  }
  return true;
}

std::string QuantScheme::Describe() const {
  if (!quantized()) return "none (16/32-bit weights)";
  const std::string format_name = format == Format::kCompressedTensors ? "compressed-tensors, "
                                  : format == Format::kHfFp8           ? "fp8, "
                                  : format == Format::kModelOpt        ? "modelopt, "
                                                                       : "quantised at load: ";
  return absl::StrCat("fp8 e4m3 weights per ", WeightScalingName(weights),
                      weights == WeightScaling::kBlock ? " (128x128)" : "", ", activations ",
                      activations == ActivationScaling::kStatic ? "static per tensor"
                      : activations == ActivationScaling::kGroup
                          ? "dynamic per token and 128 inputs"
                          : "dynamic per token",
                      " (", format_name, source, ")");
}

absl::StatusOr<QuantScheme> ParseQuantScheme(const json& config, const std::string& config_source,
                                             const json* hf_quant,
                                             const std::string& hf_quant_source) {
  QuantScheme s;
  if (const json* qc = Find(config, "quantization_config"); qc != nullptr) {
    s.source = config_source;
    const Field f{config_source, "quantization_config"};
    if (!qc->is_object()) return f.Error("must be an object");
    LLM_ASSIGN_OR_RETURN(const std::string method, GetString(*qc, f, "quant_method", ""));
    if (method == "compressed-tensors") {
      LLM_RETURN_IF_ERROR(ParseCompressedTensors(*qc, f, s));
    } else if (method == "fp8") {
      LLM_RETURN_IF_ERROR(ParseHfFp8(*qc, f, s));
    } else if (method == "modelopt") {
      const json* nested = Find(*qc, "quantization");
      LLM_RETURN_IF_ERROR(nested != nullptr ? ParseModelOpt(*nested, f / "quantization", s)
                                            : ParseModelOpt(*qc, f, s));
    } else {
      return (f / "quant_method").NotServed(method, "compressed-tensors, fp8, modelopt");
    }
    return s;
  }
  if (hf_quant != nullptr) {
    s.source = hf_quant_source;
    const Field f{hf_quant_source, "quantization"};
    const json* q = Find(*hf_quant, "quantization");
    if (q == nullptr || !q->is_object()) return f.Error("missing");
    LLM_RETURN_IF_ERROR(ParseModelOpt(*q, f, s));
  }
  return s;
}

absl::StatusOr<QuantScheme> LoadQuantScheme(const std::string& dir) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  LLM_ASSIGN_OR_RETURN(const json config, ReadJson(config_path));
  const std::string hf_path = (std::filesystem::path(dir) / "hf_quant_config.json").string();
  if (!std::filesystem::exists(hf_path)) return ParseQuantScheme(config, config_path, nullptr, "");
  LLM_ASSIGN_OR_RETURN(const json hf_quant, ReadJson(hf_path));
  return ParseQuantScheme(config, config_path, &hf_quant, hf_path);
}

absl::StatusOr<QuantScheme> ApplyQuantizationOption(const std::string& option,
                                                    QuantScheme checkpoint) {
  if (option.empty() || option == "none") return checkpoint;
  if (option != "fp8") {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.quantization: '", option, "' is not one of ", kQuantizationOptions));
  }
  if (checkpoint.quantized()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.quantization: fp8 asks to quantise the checkpoint, but it is quantised already: ",
        checkpoint.Describe(), "; leave engine.quantization at none"));
  }
  QuantScheme s;
  s.format = QuantScheme::Format::kOnline;
  s.weights = WeightScaling::kChannel;
  s.activations = ActivationScaling::kToken;
  s.ignore = {{ModulePattern::Kind::kExact, "lm_head"}};
  s.source = "engine.quantization";
  return s;
}

absl::StatusOr<bool> ProductQuantized(const QuantScheme& scheme,
                                      const std::vector<std::string>& modules) {
  int quantized = 0;
  for (const std::string& m : modules) quantized += scheme.Quantizes(m) ? 1 : 0;
  if (quantized != 0 && quantized != static_cast<int>(modules.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(scheme.source, ": ", absl::StrJoin(modules, ", "),
                     " make one product, so all or none of them must be quantised; the ignore "
                     "list leaves ",
                     static_cast<int>(modules.size()) - quantized, " of them in 16 bits"));
  }
  return quantized != 0 && !(modules.size() == 1 && modules[0] == "lm_head");
}

}  // namespace llm::model
