#include "worker/backend/synthetic_side_files.h"

#include <filesystem>

#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "worker/frontend/synthetic_tokenizer.h"

namespace llm::backend {

absl::Status WriteSyntheticSideFiles(const model::ModelConfig& config, const std::string& dir) {
  auto path = [&](const char* name) { return (std::filesystem::path(dir) / name).string(); };
  LLM_RETURN_IF_ERROR(WriteStringToFile(path("generation_config.json"),
                                        model::GenerationConfigToJson(config).dump(2)));
  LLM_ASSIGN_OR_RETURN(frontend::TokenizerFiles tok,
                       frontend::SyntheticTokenizerFiles(config.vocab_size, config.bos_token_id,
                                                         config.eos_token_ids));
  LLM_RETURN_IF_ERROR(WriteStringToFile(path("tokenizer.json"), tok.tokenizer_json));
  return WriteStringToFile(path("tokenizer_config.json"), tok.tokenizer_config_json);
}

}  // namespace llm::backend
