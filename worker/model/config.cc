#include "worker/model/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace llm::model {
namespace {

using nlohmann::json;

absl::Status FieldError(const std::string& source, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, ": ", what));
}

// Reads an integer field; `required` fields must be present and non-null.
absl::StatusOr<int64_t> GetInt(const json& j, const std::string& source, const std::string& field,
                               bool required, int64_t fallback, int64_t min_value) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return FieldError(source, field, "missing");
    return fallback;
  }
  if (!it->is_number_integer()) return FieldError(source, field, "must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < min_value || v > (int64_t{1} << 31) - 1) {
    return FieldError(source, field, absl::StrCat("out of range: ", v));
  }
  return v;
}

absl::StatusOr<double> GetDouble(const json& j, const std::string& source, const std::string& field,
                                 double fallback) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return FieldError(source, field, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v <= 0) return FieldError(source, field, absl::StrCat("must be > 0"));
  return v;
}

absl::StatusOr<bool> GetBool(const json& j, const std::string& source, const std::string& field,
                             bool fallback) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FieldError(source, field, "must be true or false");
  return it->get<bool>();
}

// eos_token_id: an integer or a list of integers.
absl::StatusOr<std::vector<int32_t>> GetIdList(const json& j, const std::string& source,
                                               const std::string& field) {
  std::vector<int32_t> ids;
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return ids;
  auto add = [&](const json& v) -> absl::Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return FieldError(source, field, "must be a non-negative integer or a list of them");
    }
    ids.push_back(v.get<int32_t>());
    return absl::OkStatus();
  };
  if (it->is_array()) {
    for (const auto& v : *it) LLM_RETURN_IF_ERROR(add(v));
  } else {
    LLM_RETURN_IF_ERROR(add(*it));
  }
  return ids;
}

// "linear" and "yarn": `factor` and the context they were trained at
// (original_max_position_embeddings, else config.json's max_position_embeddings); yarn's ramp and
// attention factor (attention_factor, else from mscale and mscale_all_dim as DeepSeek's configs
// give them, else 0.1 ln(factor) + 1).
absl::StatusOr<RopeScaling> ParseStretchedRope(const json& r, const std::string& type,
                                               const std::string& source, const ModelConfig& c) {
  const std::string where = source + " rope_scaling";
  RopeScaling rs;
  rs.kind = type == "linear" ? RopeScaling::Kind::kLinear : RopeScaling::Kind::kYarn;
  if (!r.contains("factor")) return FieldError(where, "factor", "missing");
  LLM_ASSIGN_OR_RETURN(rs.factor, GetDouble(r, where, "factor", 1.0));
  LLM_ASSIGN_OR_RETURN(
      rs.original_max_position_embeddings,
      GetInt(r, where, "original_max_position_embeddings", false, c.max_position_embeddings, 1));
  if (rs.kind == RopeScaling::Kind::kLinear) return rs;
  LLM_ASSIGN_OR_RETURN(rs.beta_fast, GetDouble(r, where, "beta_fast", 32.0));
  LLM_ASSIGN_OR_RETURN(rs.beta_slow, GetDouble(r, where, "beta_slow", 1.0));
  LLM_ASSIGN_OR_RETURN(rs.truncate, GetBool(r, where, "truncate", true));
  // Hugging Face's rule: mscale and mscale_all_dim count only when both are set and non-zero.
  const auto set = [&](const char* key) {
    return r.contains(key) && r[key].is_number() && r[key].get<double>() != 0;
  };
  rs.attention_factor = YarnMscale(rs.factor, 1.0);
  if (set("mscale") && set("mscale_all_dim")) {
    LLM_ASSIGN_OR_RETURN(const double m, GetDouble(r, where, "mscale", 1.0));
    LLM_ASSIGN_OR_RETURN(const double all, GetDouble(r, where, "mscale_all_dim", 1.0));
    rs.attention_factor = YarnMscale(rs.factor, m) / YarnMscale(rs.factor, all);
  }
  LLM_ASSIGN_OR_RETURN(rs.attention_factor,
                       GetDouble(r, where, "attention_factor", rs.attention_factor));
  return rs;
}

// One divisor a rotated pair, each finite and > 0.
absl::StatusOr<std::vector<double>> GetFactors(const json& r, const std::string& where,
                                               const char* key, int32_t pairs) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_array() || static_cast<int32_t>(it->size()) != pairs) {
    return FieldError(
        where, key, absl::StrCat("must be a list of ", pairs, " numbers (one a ", "rotated pair)"));
  }
  std::vector<double> out;
  for (const json& v : *it) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0) {
      return FieldError(where, key, "must hold numbers > 0");
    }
    out.push_back(v.get<double>());
  }
  return out;
}

// "longrope" (or its first name, "su"): Phi-3.5's and Phi-4-mini's. The scale is
// max_position_embeddings over config.json's original_max_position_embeddings where it has one
// (transformers' rule), else `factor`; the attention factor sqrt(1 + ln(scale) / ln(original)).
absl::StatusOr<RopeScaling> ParseLongRope(const json& r, const std::string& source, const json& j,
                                          const ModelConfig& c) {
  const std::string where = source + " rope_scaling";
  RopeScaling rs;
  rs.kind = RopeScaling::Kind::kLongRope;
  LLM_ASSIGN_OR_RETURN(rs.long_factor, GetFactors(r, where, "long_factor", c.rotary() / 2));
  LLM_ASSIGN_OR_RETURN(rs.short_factor, GetFactors(r, where, "short_factor", c.rotary() / 2));
  const int64_t max_pos = c.max_position_embeddings;
  if (j.contains("original_max_position_embeddings")) {
    LLM_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                         GetInt(j, source, "original_max_position_embeddings", true, 0, 1));
    rs.factor = static_cast<double>(max_pos) / rs.original_max_position_embeddings;
  } else {
    LLM_ASSIGN_OR_RETURN(rs.factor, GetDouble(r, where, "factor", 1.0));
    rs.original_max_position_embeddings = max_pos;
  }
  rs.attention_factor =
      rs.factor <= 1 || rs.original_max_position_embeddings < 2
          ? 1.0
          : std::sqrt(1 + std::log(rs.factor) / std::log(rs.original_max_position_embeddings));
  LLM_ASSIGN_OR_RETURN(rs.attention_factor,
                       GetDouble(r, where, "attention_factor", rs.attention_factor));
  rs.long_context = max_pos > rs.original_max_position_embeddings;
  return rs;
}

absl::StatusOr<RopeScaling> ParseRopeScaling(const json& j, const std::string& source,
                                             const ModelConfig& c) {
  RopeScaling rs;
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return rs;
  if (!it->is_object()) return FieldError(source, "rope_scaling", "must be an object or null");
  const json& r = *it;
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (r.contains(key) && r[key].is_string()) {
      type = r[key].get<std::string>();
      break;
    }
  }
  if (type == "default") return rs;
  if (type == "linear" || type == "yarn") return ParseStretchedRope(r, type, source, c);
  if (type == "longrope" || type == "su") return ParseLongRope(r, source, j, c);
  if (type != "llama3") {
    return FieldError(
        source, "rope_scaling",
        absl::StrCat("type '", type, "' is not supported (llama3, linear, yarn, longrope)"));
  }
  rs.kind = RopeScaling::Kind::kLlama3;
  LLM_ASSIGN_OR_RETURN(rs.factor, GetDouble(r, source + " rope_scaling", "factor", 8.0));
  LLM_ASSIGN_OR_RETURN(rs.low_freq_factor,
                       GetDouble(r, source + " rope_scaling", "low_freq_factor", 1.0));
  LLM_ASSIGN_OR_RETURN(rs.high_freq_factor,
                       GetDouble(r, source + " rope_scaling", "high_freq_factor", 4.0));
  LLM_ASSIGN_OR_RETURN(
      rs.original_max_position_embeddings,
      GetInt(r, source + " rope_scaling", "original_max_position_embeddings", false, 8192, 1));
  if (rs.high_freq_factor <= rs.low_freq_factor) {
    return FieldError(source, "rope_scaling", "high_freq_factor must exceed low_freq_factor");
  }
  return rs;
}

// The attention's shape: the sizes, the heads (GQA), the head dimension.
absl::Status ParseShape(const json& j, const std::string& source, ModelConfig& c) {
  LLM_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, source, "vocab_size", true, 0, 1));
  LLM_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, source, "hidden_size", true, 0, 1));
  LLM_ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, source, "intermediate_size", true, 0, 1));
  LLM_ASSIGN_OR_RETURN(c.num_layers, GetInt(j, source, "num_hidden_layers", true, 0, 1));
  LLM_ASSIGN_OR_RETURN(c.num_heads, GetInt(j, source, "num_attention_heads", true, 0, 1));
  LLM_ASSIGN_OR_RETURN(c.num_kv_heads,
                       GetInt(j, source, "num_key_value_heads", false, c.num_heads, 1));
  if (c.num_heads % c.num_kv_heads != 0) {
    return FieldError(
        source, "num_key_value_heads",
        absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads ", c.num_heads));
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    LLM_ASSIGN_OR_RETURN(c.head_dim, GetInt(j, source, "head_dim", true, 0, 1));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return FieldError(source, "hidden_size", "not a multiple of num_attention_heads");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) return FieldError(source, "head_dim", "must be even for RoPE");
  c.rotary_dim = c.head_dim;
  if (c.model_type == "phi3") {  // Phi-4-mini turns 3/4 of each head
    LLM_ASSIGN_OR_RETURN(const double part, GetDouble(j, source, "partial_rotary_factor", 1.0));
    c.rotary_dim = static_cast<int32_t>(c.head_dim * part + 1e-9);  // int(), as transformers
    if (part > 1 || c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
      return FieldError(source, "partial_rotary_factor",
                        absl::StrCat(part, " x head_dim ", c.head_dim,
                                     " is not an even number of dimensions up to head_dim"));
    }
  }
  return absl::OkStatus();
}

// Granite's multipliers, and the RMSNorm epsilon they fold into (GraniteMultipliers).
absl::Status ParseGranite(const json& j, const std::string& source, ModelConfig& c) {
  GraniteMultipliers& g = c.granite;
  LLM_ASSIGN_OR_RETURN(g.embedding, GetDouble(j, source, "embedding_multiplier", 1.0));
  LLM_ASSIGN_OR_RETURN(g.residual, GetDouble(j, source, "residual_multiplier", 1.0));
  LLM_ASSIGN_OR_RETURN(g.attention, GetDouble(j, source, "attention_multiplier", 1.0));
  LLM_ASSIGN_OR_RETURN(g.logits, GetDouble(j, source, "logits_scaling", 1.0));
  c.rms_norm_eps /= g.embedding * g.embedding;
  if (!(c.rms_norm_eps > 0)) {
    return FieldError(source, "embedding_multiplier", "too large for rms_norm_eps");
  }
  return absl::OkStatus();
}

// What the model type decides: biases, q/k norms, the sliding window.
absl::Status ParseFamily(const json& j, const std::string& source, ModelConfig& c) {
  if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    // Qwen2 always has q/k/v biases; Qwen3 has none (attention_bias false) and q/k norms.
    if (c.model_type == "qwen3") {
      LLM_ASSIGN_OR_RETURN(c.qkv_bias, GetBool(j, source, "attention_bias", false));
      c.qk_norm = true;
    } else {
      c.qkv_bias = true;
    }
    LLM_ASSIGN_OR_RETURN(bool sliding, GetBool(j, source, "use_sliding_window", false));
    if (sliding) {
      return FieldError(source, "use_sliding_window",
                        absl::StrCat("true is not supported for ", c.model_type));
    }
  } else {
    LLM_ASSIGN_OR_RETURN(bool attention_bias, GetBool(j, source, "attention_bias", false));
    c.qkv_bias = c.o_bias = attention_bias;
    LLM_ASSIGN_OR_RETURN(c.mlp_bias, GetBool(j, source, "mlp_bias", false));
  }
  if (c.model_type == "mistral" || c.model_type == "phi3") {
    LLM_ASSIGN_OR_RETURN(c.sliding_window, GetInt(j, source, "sliding_window", false, 0, 0));
    if (c.sliding_window >= c.max_position_embeddings) c.sliding_window = 0;
  }
  if (c.model_type == "granite") LLM_RETURN_IF_ERROR(ParseGranite(j, source, c));
  return absl::OkStatus();
}

// The special ids, inside the vocabulary.
absl::Status ParseSpecialIds(const json& j, const std::string& source, ModelConfig& c) {
  LLM_ASSIGN_OR_RETURN(c.bos_token_id, GetInt(j, source, "bos_token_id", false, -1, 0));
  LLM_ASSIGN_OR_RETURN(c.eos_token_ids, GetIdList(j, source, "eos_token_id"));
  for (int32_t id : c.eos_token_ids) {
    if (id >= c.vocab_size) {
      return FieldError(source, "eos_token_id", absl::StrCat(id, " is outside the vocabulary"));
    }
  }
  if (c.bos_token_id >= c.vocab_size) {
    return FieldError(source, "bos_token_id", "outside the vocabulary");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const json& j, const std::string& source) {
  if (!j.is_object()) return absl::InvalidArgumentError(source + ": not a JSON object");
  ModelConfig c;
  const auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) return FieldError(source, "model_type", "missing");
  c.model_type = mt->get<std::string>();
  static constexpr std::array<const char*, 6> kTypes = {"llama", "mistral", "qwen2",
                                                        "qwen3", "phi3",    "granite"};
  if (std::find(kTypes.begin(), kTypes.end(), c.model_type) == kTypes.end()) {
    return FieldError(
        source, "model_type",
        absl::StrCat("'", c.model_type, "' is not supported (", absl::StrJoin(kTypes, ", "), ")"));
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    return FieldError(source, "hidden_act",
                      absl::StrCat(j["hidden_act"].dump(), " is not supported (silu)"));
  }
  LLM_RETURN_IF_ERROR(ParseShape(j, source, c));
  LLM_ASSIGN_OR_RETURN(c.max_position_embeddings,
                       GetInt(j, source, "max_position_embeddings", true, 0, 1));
  LLM_ASSIGN_OR_RETURN(c.rms_norm_eps, GetDouble(j, source, "rms_norm_eps", 1e-6));
  LLM_ASSIGN_OR_RETURN(c.rope_theta, GetDouble(j, source, "rope_theta", 10000.0));
  LLM_ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(j, source, c));
  if (c.rope_scaling.kind == RopeScaling::Kind::kLinear ||
      c.rope_scaling.kind == RopeScaling::Kind::kYarn) {
    const double stretched = static_cast<double>(c.rope_scaling.original_max_position_embeddings) *
                             c.rope_scaling.factor;
    c.max_position_embeddings = static_cast<int32_t>(std::clamp<double>(
        std::floor(stretched), c.max_position_embeddings, (int64_t{1} << 31) - 1));
  }
  LLM_ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBool(j, source, "tie_word_embeddings", false));
  LLM_RETURN_IF_ERROR(ParseFamily(j, source, c));
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) {
    c.torch_dtype = j["torch_dtype"].get<std::string>();
  }
  LLM_RETURN_IF_ERROR(ParseSpecialIds(j, source, c));
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  LLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(path + ": not valid JSON");
  LLM_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(j, path));

  const std::string gen_path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (std::filesystem::exists(gen_path)) {
    LLM_ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen_path));
    json g = json::parse(gen_text, nullptr, false);
    if (g.is_discarded() || !g.is_object()) {
      return absl::InvalidArgumentError(gen_path + ": not a valid JSON object");
    }
    LLM_ASSIGN_OR_RETURN(std::vector<int32_t> eos, GetIdList(g, gen_path, "eos_token_id"));
    for (int32_t id : eos) {
      if (id >= c.vocab_size) {
        return FieldError(gen_path, "eos_token_id", absl::StrCat(id, " is outside the vocabulary"));
      }
    }
    if (!eos.empty()) c.eos_token_ids = eos;
    LLM_ASSIGN_OR_RETURN(int64_t bos, GetInt(g, gen_path, "bos_token_id", false, -1, 0));
    if (bos >= c.vocab_size) return FieldError(gen_path, "bos_token_id", "outside the vocabulary");
    if (bos >= 0) c.bos_token_id = static_cast<int32_t>(bos);
  }
  return c;
}

json ModelConfigToJson(const ModelConfig& c) {
  json j;
  j["architectures"] = {c.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                        : c.model_type == "qwen3"   ? "Qwen3ForCausalLM"
                        : c.model_type == "mistral" ? "MistralForCausalLM"
                        : c.model_type == "phi3"    ? "Phi3ForCausalLM"
                        : c.model_type == "granite" ? "GraniteForCausalLM"
                                                    : "LlamaForCausalLM"};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps * c.granite.embedding * c.granite.embedding;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.kind == RopeScaling::Kind::kLlama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else if (c.rope_scaling.kind == RopeScaling::Kind::kLongRope) {
    const RopeScaling& rs = c.rope_scaling;
    j["original_max_position_embeddings"] = rs.original_max_position_embeddings;
    j["rope_scaling"] = {{"rope_type", "longrope"},
                         {"long_factor", rs.long_factor},
                         {"short_factor", rs.short_factor},
                         {"attention_factor", rs.attention_factor}};
  } else if (c.rope_scaling.kind == RopeScaling::Kind::kLinear) {
    j["rope_scaling"] = {
        {"rope_type", "linear"},
        {"factor", c.rope_scaling.factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else if (c.rope_scaling.kind == RopeScaling::Kind::kYarn) {
    const RopeScaling& rs = c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", rs.factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings},
                         {"beta_fast", rs.beta_fast},
                         {"beta_slow", rs.beta_slow},
                         {"truncate", rs.truncate},
                         {"attention_factor", rs.attention_factor}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type != "qwen2" && c.model_type != "mistral") {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  }
  if (c.model_type == "mistral" || c.model_type == "phi3") {
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  }
  if (c.rotary() != c.head_dim) {
    j["partial_rotary_factor"] = static_cast<double>(c.rotary()) / c.head_dim;
  }
  if (c.model_type == "granite") {
    j["embedding_multiplier"] = c.granite.embedding;
    j["residual_multiplier"] = c.granite.residual;
    j["attention_multiplier"] = c.granite.attention;
    j["logits_scaling"] = c.granite.logits;
  }
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["torch_dtype"] = c.torch_dtype.empty() ? "bfloat16" : c.torch_dtype;
  return j;
}

json GenerationConfigToJson(const ModelConfig& c) {
  json j;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  return j;
}

namespace {

// YaRN: the pairs that turn more than beta_fast times over the original context keep their
// frequency, those that turn fewer than beta_slow times are divided by the factor, and a linear
// ramp over the pairs' index mixes the two between.
void YarnFrequencies(const ModelConfig& c, std::vector<double>& inv) {
  const RopeScaling& rs = c.rope_scaling;
  const double dim = c.rotary(), base = c.rope_theta;
  const double length = static_cast<double>(rs.original_max_position_embeddings);
  const auto pair_of = [&](double rotations) {
    return dim * std::log(length / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = pair_of(rs.beta_fast), high = pair_of(rs.beta_slow);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    inv[i] = inv[i] / rs.factor * ramp + inv[i] * (1 - ramp);
  }
}

}  // namespace

double YarnMscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1;
}

double RopeAttentionFactor(const ModelConfig& c) {
  const RopeScaling::Kind kind = c.rope_scaling.kind;
  return kind == RopeScaling::Kind::kYarn || kind == RopeScaling::Kind::kLongRope
             ? c.rope_scaling.attention_factor
             : 1.0;
}

void SetServedContext(ModelConfig& c, int64_t context) {
  c.rope_scaling.long_context = context > c.rope_scaling.original_max_position_embeddings;
}

std::string DescribeRope(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  std::vector<std::string> parts;
  switch (rs.kind) {
    case RopeScaling::Kind::kNone:
      break;
    case RopeScaling::Kind::kLlama3:
    case RopeScaling::Kind::kLinear:
    case RopeScaling::Kind::kYarn:
      parts.push_back(absl::StrCat(rs.kind == RopeScaling::Kind::kLlama3   ? "llama3"
                                   : rs.kind == RopeScaling::Kind::kLinear ? "linear"
                                                                           : "yarn",
                                   ", factor ", rs.factor, " over ",
                                   rs.original_max_position_embeddings, " positions"));
      break;
    case RopeScaling::Kind::kLongRope:
      parts.push_back(absl::StrCat("longrope, the ", rs.long_context ? "long" : "short",
                                   " factors (context ", rs.long_context ? "past " : "within ",
                                   rs.original_max_position_embeddings, ")"));
      break;
  }
  if (c.rotary() != c.head_dim) {
    parts.push_back(absl::StrCat(c.rotary(), " of ", c.head_dim, " dimensions turned"));
  }
  if (RopeAttentionFactor(c) != 1.0) {
    parts.push_back(absl::StrCat("attention x", absl::StrFormat("%.4f", RopeAttentionFactor(c))));
  }
  return absl::StrJoin(parts, ", ");
}

std::vector<double> RopeInverseFrequencies(const ModelConfig& c) {
  std::vector<double> inv(c.rotary() / 2);
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = 1.0 / std::pow(c.rope_theta, (2.0 * static_cast<double>(i)) / c.rotary());
  }
  if (c.rope_scaling.kind == RopeScaling::Kind::kLongRope) {
    const RopeScaling& rs = c.rope_scaling;
    const std::vector<double>& by = rs.long_context ? rs.long_factor : rs.short_factor;
    for (size_t i = 0; i < inv.size(); ++i) inv[i] /= by[i];
  }
  if (c.rope_scaling.kind == RopeScaling::Kind::kLinear) {
    for (double& f : inv) f /= c.rope_scaling.factor;
  }
  if (c.rope_scaling.kind == RopeScaling::Kind::kYarn) YarnFrequencies(c, inv);
  if (c.rope_scaling.kind == RopeScaling::Kind::kLlama3) {
    // Llama 3.1 scaling: long wavelengths are divided by `factor`, short ones kept, and the
    // band between interpolated smoothly.
    const RopeScaling& rs = c.rope_scaling;
    const double old_len = static_cast<double>(rs.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / rs.low_freq_factor;
    const double high_freq_wavelen = old_len / rs.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;
      if (wavelen > low_freq_wavelen) {
        f /= rs.factor;
        continue;
      }
      const double smooth =
          (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      f = (1.0 - smooth) * f / rs.factor + smooth * f;
    }
  }
  inv.resize(c.head_dim / 2, 0.0);  // the pairs a partial rotary_dim leaves unturned
  return inv;
}

}  // namespace llm::model
