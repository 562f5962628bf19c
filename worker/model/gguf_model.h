// A GGUF file (gguf.h) as a Hugging Face Llama-family checkpoint: the ModelConfig its metadata
// describes and its tensors under Hugging Face's names and layouts, dequantised at load to the
// backend's dtype (f32 for the CPU reference, bf16 for CUDA). Running the quantised blocks
// directly (GGUF kernels) is later work: a Q4 file takes the memory of its 16- or 32-bit weights.
//
// Architectures (general.architecture): llama (also what llama.cpp writes for Mistral and
// SmolLM2), qwen2 and qwen3. llama.cpp stores a llama model's q and k rows in the interleaved
// RoPE order; they are put back in Hugging Face's rotate-half order. A rope_freqs tensor (Llama
// 3.1/3.2 RoPE scaling) is taken only when it equals the llama3 rule for some factor, which then
// becomes rope_scaling. Anything else (another architecture, experts, a tensor with no place in
// the model, an unsupported type) is refused at start, naming the key or the tensor and its type.
#ifndef LLM_WORKER_MODEL_GGUF_MODEL_H_
#define LLM_WORKER_MODEL_GGUF_MODEL_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/dtype.h"
#include "worker/model/gguf.h"
#include "worker/model/safetensors.h"

namespace llm {
class ThreadPool;
}

namespace llm::model {

// True for a path that names a GGUF file (ends in ".gguf").
bool IsGgufPath(std::string_view path);

// The configuration of the model in `file` ({arch}.block_count, embedding_length, ...;
// tokenizer.ggml.bos/eos/eot ids). Errors name the file and the key.
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

// The Hugging Face name of a GGUF tensor ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); nullopt for a name that has none.
std::optional<std::string> HfTensorName(std::string_view gguf_name);

struct GgufLoadOptions {
  DType dtype = DType::kF32;   // kF32 or kBF16
  ThreadPool* pool = nullptr;  // tensors dequantised in parallel on it when given
  bool progress = true;        // a line on stderr once a second (bytes, tensors) after the first
};

// Every tensor of CheckpointTensorSpecs(config) (the family's own layout, which ToLlamaLayout
// maps onto Llama's) from `file`, dequantised to options.dtype, in a
// TensorStore labelled with the file's path. NOT_FOUND naming a missing tensor;
// INVALID_ARGUMENT naming a tensor of another shape than the config implies, of an unsupported
// type, or with no place in the model.
absl::StatusOr<std::unique_ptr<TensorStore>> LoadGgufTensors(const GgufFile& file,
                                                             const ModelConfig& config,
                                                             const GgufLoadOptions& options);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_GGUF_MODEL_H_
