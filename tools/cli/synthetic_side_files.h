// The files beside a random-weight checkpoint's weights that its config implies:
// generation_config.json and a synthetic tokenizer (tokenizer.json, tokenizer_config.json).
// llm-cli make-model writes them, and llm-cli quantize for a random:<shape> source.
#ifndef LLM_TOOLS_CLI_SYNTHETIC_SIDE_FILES_H_
#define LLM_TOOLS_CLI_SYNTHETIC_SIDE_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "worker/model/config.h"

namespace llm::cli {

// Writes the three files into the existing directory `dir`.
absl::Status WriteSyntheticSideFiles(const model::ModelConfig& config, const std::string& dir);

}  // namespace llm::cli

#endif  // LLM_TOOLS_CLI_SYNTHETIC_SIDE_FILES_H_
