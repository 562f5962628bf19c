// How a checkpoint's linear layers are quantised: read from config.json's quantization_config
// (compressed-tensors "float-quantized"; Hugging Face "fp8", fine-grained 128x128 blocks or
// AutoFP8's per-tensor scales; ModelOpt's "modelopt"), from hf_quant_config.json (ModelOpt), or
// asked for at load (engine.quantization: fp8, which quantises a 16/32-bit checkpoint's weights
// per output channel). Only FP8 E4M3 (common/fp8.h) is served; anything else a checkpoint
// declares is refused with an error naming the file, the field and the value, never loaded
// as something else.
//
// Every scheme keeps the embedding, the norms and the output head in 16 bits (the head is
// dequantised if a checkpoint stores it in FP8), and the attention's arithmetic in bf16. A
// checkpoint may also declare an FP8 KV cache (compressed-tensors' kv_cache_scheme, ModelOpt's
// kv_cache_quant_algo): kv_cache_fp8, which engine.kv_cache_dtype: auto follows
// (kv_cache_spec.h).
#ifndef LLM_WORKER_MODEL_QUANT_SCHEME_H_
#define LLM_WORKER_MODEL_QUANT_SCHEME_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::model {

// How an FP8 weight [out, in] is scaled: value = e4m3 * scale.
enum class WeightScaling {
  kNone,     // not quantised (F32/F16/BF16)
  kTensor,   // one scale for the tensor
  kChannel,  // one per output row
  kBlock,    // one per block_rows x block_cols tile: [ceil(out/128), ceil(in/128)]
};

// How a quantised product's input rows are quantised before the product.
enum class ActivationScaling {
  kNone,    // not quantised
  kToken,   // dynamic: each row's scale is its amax / 448
  kGroup,   // dynamic: each group_size inputs of a row have their own scale, amax / 448
  kStatic,  // one scale from the checkpoint (input_scale) for every row
};

const char* WeightScalingName(WeightScaling s);          // "none", "tensor", ...
const char* ActivationScalingName(ActivationScaling s);  // "none", "token", ...

// A module name pattern of an ignore list: compressed-tensors' exact names and "re:" regexes
// (matched from the name's start), ModelOpt's fnmatch globs, Hugging Face fp8's substrings.
struct ModulePattern {
  enum class Kind { kExact, kRegex, kGlob, kSubstring };
  Kind kind = Kind::kExact;
  std::string text;
  bool Matches(std::string_view module) const;
};

struct QuantScheme {
  enum class Format { kNone, kCompressedTensors, kHfFp8, kModelOpt, kOnline };
  Format format = Format::kNone;
  WeightScaling weights = WeightScaling::kNone;
  ActivationScaling activations = ActivationScaling::kNone;
  int32_t block_rows = 128;  // kBlock: weight tiles
  int32_t block_cols = 128;
  int32_t group_size = 128;  // kGroup: inputs per activation scale
  // The checkpoint's tensor names beside "<module>.weight".
  std::string weight_scale_name = "weight_scale";  // Hugging Face fp8 blocks: weight_scale_inv
  std::string input_scale_name = "input_scale";    // kStatic
  std::vector<ModulePattern> ignore;               // modules left in 16 bits
  std::string source;                              // the file that declared it, for errors
  // The checkpoint declares an FP8 E4M3 KV cache with per-layer K and V scales.
  bool kv_cache_fp8 = false;

  bool quantized() const { return format != Format::kNone; }
  // Whether linear module `module` ("model.layers.0.self_attn.q_proj", "lm_head") is FP8 in
  // this scheme (the head never is: ProductQuantized).
  bool Quantizes(std::string_view module) const;
  // "fp8 weights per channel, activations per token (compressed-tensors, DIR/config.json)".
  std::string Describe() const;
};

// The scheme of checkpoint directory `dir`: config.json's quantization_config, else
// hf_quant_config.json's quantization, else none. Errors name the file, the field and the value.
absl::StatusOr<QuantScheme> LoadQuantScheme(const std::string& dir);

// The same from parsed files: `config` is config.json's object (named `config_source` in errors),
// `hf_quant` hf_quant_config.json's or null (named `hf_quant_source`).
absl::StatusOr<QuantScheme> ParseQuantScheme(const nlohmann::json& config,
                                             const std::string& config_source,
                                             const nlohmann::json* hf_quant,
                                             const std::string& hf_quant_source);

// engine.quantization applied to the checkpoint's scheme: "" or "none" keeps it; "fp8"
// quantises a 16/32-bit checkpoint's linear weights at load, per output channel, with dynamic
// per-token activations (an FP8 checkpoint with "fp8" is an error: it is quantised already).
// INVALID_ARGUMENT naming engine.quantization otherwise.
absl::StatusOr<QuantScheme> ApplyQuantizationOption(const std::string& option,
                                                    QuantScheme checkpoint);

// The settings of engine.quantization, for help texts.
inline constexpr char kQuantizationOptions[] = "none, fp8";

// Whether the product over `modules` (stacked along the output: q, k, v or gate, up) is FP8.
// All of them or none must be quantised (INVALID_ARGUMENT naming them otherwise); the output
// head never is.
absl::StatusOr<bool> ProductQuantized(const QuantScheme& scheme,
                                      const std::vector<std::string>& modules);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_QUANT_SCHEME_H_
