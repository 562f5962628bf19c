// Writes an FP8 checkpoint from a 16/32-bit one, in the formats users bring: per-tensor or
// per-channel weights as compressed-tensors "float-quantized" (activations dynamic per token),
// 128x128 blocks as Hugging Face's fine-grained "fp8" (weight_scale_inv; activations dynamic per
// token and 128 inputs). The output head, the embedding and the norms are copied as they are.
// What `llm-cli quantize --fp8` runs; tests and benchmarks use it on the shared models and on
// random shapes.
#ifndef LLM_WORKER_MODEL_FP8_WRITER_H_
#define LLM_WORKER_MODEL_FP8_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "worker/model/config.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"

namespace llm {
class ThreadPool;
}

namespace llm::model {

// config.json's quantization_config for `scaling` (kTensor, kChannel or kBlock).
nlohmann::json Fp8QuantizationConfig(WeightScaling scaling);

// Writes `out_dir`/model.safetensors (every tensor of LlamaTensorSpecs(config) from `store`, the
// decoder layers' linear weights quantised with `scaling`, their scales beside them in F32) and
// `out_dir`/config.json (`config` with Fp8QuantizationConfig). The directory must exist. A
// store that is quantised already is refused (its weights are not 16/32-bit). Quantisation
// runs on `pool` when given.
absl::Status WriteFp8Checkpoint(const ModelConfig& config, const TensorStore& store,
                                WeightScaling scaling, const std::string& out_dir,
                                ThreadPool* pool);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_FP8_WRITER_H_
