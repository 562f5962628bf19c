// The files beside a random-weight checkpoint's weights that its config implies:
// generation_config.json and a synthetic tokenizer (tokenizer.json, tokenizer_config.json).
// llm-cli make-model writes them, llm-cli quantize for a random:<shape> source, and tests that
// write checkpoints of random shapes.
#ifndef LLM_WORKER_BACKEND_SYNTHETIC_SIDE_FILES_H_
#define LLM_WORKER_BACKEND_SYNTHETIC_SIDE_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "worker/model/config.h"

namespace llm::backend {

// Writes the three files into the existing directory `dir`.
absl::Status WriteSyntheticSideFiles(const model::ModelConfig& config, const std::string& dir);

}  // namespace llm::backend

#endif  // LLM_WORKER_BACKEND_SYNTHETIC_SIDE_FILES_H_
