#include "worker/model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/gguf_quant.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/load_progress.h"

namespace llm::model {
namespace {

constexpr char kRopeFreqs[] = "rope_freqs.weight";

absl::Status KeyError(const GgufFile& f, absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", key, ": ", what));
}

// A positive int32 under `key`, or `fallback` (when >= 0) where the key is absent.
absl::StatusOr<int32_t> PositiveInt(const GgufFile& f, const std::string& key,
                                    int64_t fallback = -1) {
  if (fallback >= 0 && f.Find(key) == nullptr) return static_cast<int32_t>(fallback);
  LLM_ASSIGN_OR_RETURN(const int64_t v, f.GetInt(key));
  if (v < 1 || v > INT32_MAX) return KeyError(f, key, absl::StrCat(v, " is out of range"));
  return static_cast<int32_t>(v);
}

absl::StatusOr<double> FloatOr(const GgufFile& f, const std::string& key, double fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetFloat(key);
}

// The ids that end a turn: EOS, and end-of-turn / end-of-message where the file names others.
absl::StatusOr<std::vector<int32_t>> EosIds(const GgufFile& f) {
  std::vector<int32_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (f.Find(key) == nullptr) continue;
    LLM_ASSIGN_OR_RETURN(const int64_t id, f.GetInt(key));
    if (id < 0 || id > INT32_MAX) return KeyError(f, key, "not a token id");
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// rope_freqs (the divisors of each inverse frequency llama.cpp applies) as rope_scaling: llama3
// with the largest divisor as its factor, when every divisor is what that rule gives.
absl::Status RopeFreqsAsLlama3(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const GgufTensor* t = f.FindTensor(kRopeFreqs);
  if (t == nullptr) return absl::OkStatus();
  std::string bytes;
  LLM_RETURN_IF_ERROR(DequantizeTensor(*t, DType::kF32, &bytes));
  std::vector<float> divisors(bytes.size() / 4);
  std::memcpy(divisors.data(), bytes.data(), bytes.size());
  if (static_cast<int32_t>(divisors.size()) != c.head_dim / 2) {
    return KeyError(f, kRopeFreqs, absl::StrCat(divisors.size(), " values, not head_dim / 2"));
  }
  ModelConfig scaled = c;
  scaled.rope_scaling = {RopeScaling::Kind::kLlama3,
                         *std::max_element(divisors.begin(), divisors.end()), 1.0, 4.0, 8192};
  const std::string orig = arch + ".rope.scaling.original_context_length";
  LLM_ASSIGN_OR_RETURN(scaled.rope_scaling.original_max_position_embeddings,
                       PositiveInt(f, orig, 8192));
  const std::vector<double> plain = RopeInverseFrequencies(c);
  const std::vector<double> llama3 = RopeInverseFrequencies(scaled);
  for (size_t i = 0; i < divisors.size(); ++i) {
    if (std::fabs(plain[i] / llama3[i] - divisors[i]) > 1e-3 * divisors[i]) {
      return KeyError(f, kRopeFreqs,
                      absl::StrCat("value ", i, " (", divisors[i], ") is not the llama3 rule's ",
                                   plain[i] / llama3[i], "; this RoPE scaling is not supported"));
    }
  }
  c.rope_scaling = scaled.rope_scaling;
  return absl::OkStatus();
}

// Granite's multipliers (llama.cpp's names for them), and the epsilon as ModelConfig holds it:
// divided by the embedding multiplier squared.
absl::Status GraniteScales(const GgufFile& f, ModelConfig& c) {
  GraniteMultipliers& g = c.granite;
  const std::pair<const char*, double*> keys[] = {{"granite.embedding_scale", &g.embedding},
                                                  {"granite.residual_scale", &g.residual},
                                                  {"granite.attention.scale", &g.attention},
                                                  {"granite.logit_scale", &g.logits}};
  for (const auto& [key, value] : keys) {
    LLM_ASSIGN_OR_RETURN(*value, FloatOr(f, key, 1.0));
    if (!std::isfinite(*value) || *value <= 0) return KeyError(f, key, "must be > 0");
  }
  c.rms_norm_eps /= g.embedding * g.embedding;
  return absl::OkStatus();
}

// {arch}.rope.scaling.type linear or yarn (factor, original_context_length) as rope_scaling;
// none or absent: none.
absl::Status StretchedRope(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const std::string key = arch + ".rope.scaling.type";
  if (f.Find(key) == nullptr) return absl::OkStatus();
  const absl::StatusOr<std::string> type = f.GetString(key);
  if (!type.ok()) return type.status();
  if (*type == "none") return absl::OkStatus();
  if (*type != "linear" && *type != "yarn") {
    return KeyError(f, key, absl::StrCat("'", *type, "' is not supported (linear, yarn)"));
  }
  RopeScaling& rs = c.rope_scaling;
  rs.kind = *type == "linear" ? RopeScaling::Kind::kLinear : RopeScaling::Kind::kYarn;
  const std::string factor = arch + ".rope.scaling.factor";
  if (f.Find(factor) == nullptr) return KeyError(f, factor, "missing");
  LLM_ASSIGN_OR_RETURN(rs.factor, f.GetFloat(factor));
  if (!std::isfinite(rs.factor) || rs.factor <= 0) return KeyError(f, factor, "must be > 0");
  LLM_ASSIGN_OR_RETURN(
      rs.original_max_position_embeddings,
      PositiveInt(f, arch + ".rope.scaling.original_context_length", c.max_position_embeddings));
  rs.attention_factor = YarnMscale(rs.factor, 1.0);
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ArchitectureConfig(const GgufFile& f, const std::string& arch) {
  const auto key = [&](absl::string_view k) { return absl::StrCat(arch, ".", k); };
  ModelConfig c;
  c.model_type = arch;
  LLM_ASSIGN_OR_RETURN(c.hidden_size, PositiveInt(f, key("embedding_length")));
  LLM_ASSIGN_OR_RETURN(c.intermediate_size, PositiveInt(f, key("feed_forward_length")));
  LLM_ASSIGN_OR_RETURN(c.num_layers, PositiveInt(f, key("block_count")));
  LLM_ASSIGN_OR_RETURN(c.num_heads, PositiveInt(f, key("attention.head_count")));
  LLM_ASSIGN_OR_RETURN(c.num_kv_heads, PositiveInt(f, key("attention.head_count_kv"), c.num_heads));
  LLM_ASSIGN_OR_RETURN(c.head_dim,
                       PositiveInt(f, key("attention.key_length"), c.hidden_size / c.num_heads));
  LLM_ASSIGN_OR_RETURN(const int32_t value_dim,
                       PositiveInt(f, key("attention.value_length"), c.head_dim));
  if (value_dim != c.head_dim) {
    return KeyError(f, key("attention.value_length"), "differs from key_length: not supported");
  }
  LLM_ASSIGN_OR_RETURN(const int32_t rotary,
                       PositiveInt(f, key("rope.dimension_count"), c.head_dim));
  c.rotary_dim = rotary;
  if (rotary != c.head_dim && arch != "phi3") {
    return KeyError(
        f, key("rope.dimension_count"),
        absl::StrCat(rotary, " (partial RoPE) is not supported; head_dim is ", c.head_dim));
  }
  LLM_ASSIGN_OR_RETURN(c.max_position_embeddings, PositiveInt(f, key("context_length")));
  LLM_ASSIGN_OR_RETURN(c.rms_norm_eps, FloatOr(f, key("attention.layer_norm_rms_epsilon"), 1e-6));
  LLM_ASSIGN_OR_RETURN(c.rope_theta, FloatOr(f, key("rope.freq_base"), 10000.0));
  const GgufTensor* embed = f.FindTensor("token_embd.weight");
  if (embed == nullptr) return absl::NotFoundError(f.path() + ": no tensor token_embd.weight");
  LLM_ASSIGN_OR_RETURN(c.vocab_size,
                       PositiveInt(f, key("vocab_size"), embed->RowMajorShape().front()));
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = arch == "qwen3";
  if (arch == "phi3") {
    LLM_ASSIGN_OR_RETURN(c.sliding_window, PositiveInt(f, key("attention.sliding_window"), 0));
  }
  if (arch == "granite") LLM_RETURN_IF_ERROR(GraniteScales(f, c));
  if (f.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    LLM_ASSIGN_OR_RETURN(const int64_t bos, f.GetInt("tokenizer.ggml.bos_token_id"));
    c.bos_token_id = static_cast<int32_t>(bos);
  }
  LLM_ASSIGN_OR_RETURN(c.eos_token_ids, EosIds(f));
  return c;
}

}  // namespace

bool IsGgufPath(std::string_view path) {
  return absl::EndsWithIgnoreCase(absl::string_view(path.data(), path.size()), ".gguf");
}

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& f) {
  LLM_ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "phi3" &&
      arch != "granite") {
    return KeyError(
        f, "general.architecture",
        absl::StrCat("'", arch, "' is not supported (llama, qwen2, qwen3, phi3, granite)"));
  }
  if (f.FindTensor("rope_factors_long.weight") != nullptr) {
    return KeyError(f, "rope_factors_long.weight", "LongRoPE scaling is not supported");
  }
  const std::string experts = arch + ".expert_count";
  if (f.Find(experts) != nullptr && f.GetInt(experts).value_or(0) > 0) {
    return KeyError(f, experts, "mixture-of-experts models are not supported");
  }
  LLM_ASSIGN_OR_RETURN(ModelConfig c, ArchitectureConfig(f, arch));
  LLM_RETURN_IF_ERROR(StretchedRope(f, arch, c));
  LLM_RETURN_IF_ERROR(RopeFreqsAsLlama3(f, arch, c));
  // config.json's own checks (head counts, ids inside the vocabulary, ...), on what it implies.
  const std::string source = absl::StrCat(f.path(), " (its metadata as config.json)");
  LLM_ASSIGN_OR_RETURN(ModelConfig checked, ParseModelConfig(ModelConfigToJson(c), source));
  checked.torch_dtype = "gguf";
  return checked;
}

std::optional<std::string> HfTensorName(std::string_view g) {
  static const std::map<std::string_view, std::string_view> kGlobal = {
      {"token_embd.weight", kEmbedName},
      {"output_norm.weight", kFinalNormName},
      {"output.weight", kLmHeadName}};
  static const std::map<std::string_view, std::string_view> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (const auto it = kGlobal.find(g); it != kGlobal.end()) return std::string(it->second);
  if (g.substr(0, 4) != "blk.") return std::nullopt;
  g.remove_prefix(4);
  const size_t dot = g.find('.');
  int layer = 0;
  if (dot == std::string_view::npos ||
      !absl::SimpleAtoi(absl::string_view(g.data(), dot), &layer) || layer < 0) {
    return std::nullopt;
  }
  const auto it = kLayer.find(g.substr(dot + 1));
  if (it == kLayer.end()) return std::nullopt;
  return absl::StrCat("model.layers.", layer, ".", std::string(it->second));
}

namespace {

// One tensor to dequantise into its place.
struct Job {
  const GgufTensor* tensor;
  const TensorSpec* spec;
  int32_t permuted_heads;  // > 0: a llama q or k in llama.cpp's interleaved order, so many heads
};

// llama.cpp's converter reorders each head's rows of a llama q or k from rotate-half (row
// j * half + i) to interleaved pairs (row 2 * i + j); this puts them back.
void UndoRopePermutation(std::string& bytes, int32_t heads, int64_t rows, int64_t row_bytes) {
  const int64_t head_rows = rows / heads, half = head_rows / 2;
  std::string out(bytes.size(), '\0');
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = h * head_rows + 2 * i + j, to = h * head_rows + j * half + i;
        std::memcpy(&out[to * row_bytes], &bytes[from * row_bytes], row_bytes);
      }
    }
  }
  bytes.swap(out);
}

absl::StatusOr<std::vector<Job>> PlanJobs(const GgufFile& f, const ModelConfig& c,
                                          const std::vector<TensorSpec>& specs) {
  std::set<std::string, std::less<>> wanted;
  for (const TensorSpec& s : specs) wanted.insert(s.name);
  std::map<std::string, const GgufTensor*> by_hf_name;
  for (const GgufTensor& t : f.tensors()) {
    if (t.name == kRopeFreqs) continue;  // taken into the config (GgufModelConfig)
    std::optional<std::string> hf = HfTensorName(t.name);
    if (hf && c.model_type == "phi3" && absl::EndsWith(*hf, "mlp.up_proj.weight")) {
      hf = absl::StrCat(hf->substr(0, hf->size() - 18), "mlp.gate_up_proj.weight");
    }
    if (!hf || !wanted.contains(*hf)) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor '", t.name, "' (",
                                                     GgufTypeName(t.type), ") has no place in a ",
                                                     c.model_type, " model of this configuration"));
    }
    by_hf_name[*hf] = &t;
  }
  // llama.cpp's converter permutes the q and k of llama and its subclasses (granite).
  const bool permuted = c.model_type == "llama" || c.model_type == "granite";
  std::vector<Job> jobs;
  for (const TensorSpec& spec : specs) {
    const auto it = by_hf_name.find(spec.name);
    if (it == by_hf_name.end()) {
      return absl::NotFoundError(absl::StrCat(f.path(), ": no tensor for '", spec.name, "'"));
    }
    const GgufTensor& t = *it->second;
    if (!GgufTypeSupported(t.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": tensor '", t.name, "' has type ", GgufTypeName(t.type),
                       ", which is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                       "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"));
    }
    if (t.RowMajorShape() != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tensor '", t.name, "': shape [", absl::StrJoin(t.RowMajorShape(), ", "),
          "], but the metadata implies [", absl::StrJoin(spec.shape, ", "), "] for ", spec.name));
    }
    int32_t heads = 0;
    if (permuted && absl::EndsWith(spec.name, "q_proj.weight")) heads = c.num_heads;
    if (permuted && absl::EndsWith(spec.name, "k_proj.weight")) heads = c.num_kv_heads;
    jobs.push_back({&t, &spec, heads});
  }
  return jobs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorStore>> LoadGgufTensors(const GgufFile& f,
                                                             const ModelConfig& c,
                                                             const GgufLoadOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16) {
    return absl::InvalidArgumentError("LoadGgufTensors: dtype must be F32 or BF16");
  }
  const std::vector<TensorSpec> specs = CheckpointTensorSpecs(c);
  LLM_ASSIGN_OR_RETURN(const std::vector<Job> jobs, PlanJobs(f, c, specs));
  uint64_t total = 0;
  for (const Job& j : jobs) total += j.tensor->num_bytes;
  LoadProgress progress(f.path(), "dequantised", total, jobs.size(), options.progress);
  std::vector<TensorData> tensors(jobs.size());
  std::vector<absl::Status> errors(jobs.size());
  auto run = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const Job& j = jobs[i];
      TensorData& out = tensors[i];
      out = {j.spec->name, options.dtype, j.spec->shape, {}};
      errors[i] = DequantizeTensor(*j.tensor, options.dtype, &out.bytes);
      if (errors[i].ok() && j.permuted_heads > 0) {
        const int64_t rows = j.spec->shape[0];
        UndoRopePermutation(out.bytes, j.permuted_heads, rows,
                            static_cast<int64_t>(out.bytes.size()) / rows);
      }
      progress.Add(j.tensor->num_bytes, 1);
    }
  };
  if (options.pool != nullptr) {
    options.pool->ParallelFor(jobs.size(), 1, run);
  } else {
    run(0, jobs.size());
  }
  for (const absl::Status& st : errors) LLM_RETURN_IF_ERROR(st);
  return TensorStore::FromTensors(f.path(), std::move(tensors));
}

}  // namespace llm::model
