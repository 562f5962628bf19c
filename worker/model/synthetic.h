// Synthetic checkpoints: the weights of a named shape (shapes.h) generated from a seed, with
// the fill rule of SyntheticFillFor, so a random:<shape> model on any backend and a checkpoint
// written by `llm-cli make-model` with the same seed hold the same numbers.
#ifndef LLM_WORKER_MODEL_SYNTHETIC_H_
#define LLM_WORKER_MODEL_SYNTHETIC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/dtype.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"

namespace llm {
class ThreadPool;
}

namespace llm::model {

// Where a model comes from: a Hugging Face checkpoint directory, a GGUF file (gguf_model.h), or
// random:<shape>[:<seed>].
struct ModelSource {
  std::string dir;    // the checkpoint directory or GGUF file; empty for a synthetic model
  std::string shape;  // the shape of a synthetic model
  uint64_t seed = 0;

  bool synthetic() const { return !shape.empty(); }
  bool gguf() const;  // `dir` names a .gguf file
  // The model's name in load reports: the directory's last component (a GGUF file's name without
  // .gguf), or "random:<shape>".
  std::string name() const;
};

// Parses "random:<shape>[:<seed>]" (the shape checked against ShapeNames) or takes `spec` as a
// directory or GGUF file. INVALID_ARGUMENT naming the spec for an unknown shape or a bad seed.
absl::StatusOr<ModelSource> ParseModelSource(const std::string& spec);

// The model's configuration: config.json and generation_config.json of the directory, a GGUF
// file's metadata, or the shape's.
absl::StatusOr<ModelConfig> LoadSourceConfig(const ModelSource& source);

// Writes elements [begin, begin + count) of the synthetic tensor `spec` as `dtype` (a weight
// dtype) to `out`, in parallel on `pool` when given.
void FillSynthetic(const TensorSpec& spec, uint64_t seed, uint64_t begin, uint64_t count,
                   DType dtype, std::byte* out, ThreadPool* pool);

// Every tensor of LlamaTensorSpecs(config), generated in memory as `dtype`.
absl::StatusOr<std::unique_ptr<TensorStore>> MakeSyntheticStore(const ModelConfig& config,
                                                                uint64_t seed, DType dtype,
                                                                ThreadPool* pool);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_SYNTHETIC_H_
