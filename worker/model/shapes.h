// Named model shapes for synthetic checkpoints (make-model, random:<shape>): real
// architectures' dimensions with random weights, so demos and benchmarks need no weight files.
#ifndef LLM_WORKER_MODEL_SHAPES_H_
#define LLM_WORKER_MODEL_SHAPES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"

namespace llm::model {

// "tiny", "small", "llama-3.2-1b", "llama-3-8b", "llama-3.1-8b", "qwen2-0.5b", "mistral-7b". Error
// listing the known names otherwise.
absl::StatusOr<ModelConfig> ShapeConfig(const std::string& name);
std::vector<std::string> ShapeNames();

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_SHAPES_H_
