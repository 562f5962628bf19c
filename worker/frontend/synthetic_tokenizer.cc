#include "worker/frontend/synthetic_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/frontend/sample_text.h"

namespace llm::frontend {

absl::StatusOr<TokenizerFiles> SyntheticTokenizerFiles(int32_t vocab_size, int32_t bos_id,
                                                       const std::vector<int32_t>& eos_ids) {
  ByteLevelTokenizerSpec spec;
  spec.vocab_size = vocab_size;
  spec.bos_id = bos_id;
  spec.eos_ids = eos_ids;
  spec.training_text = kSampleText;
  return MakeByteLevelTokenizer(spec);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> SyntheticTokenizer(int32_t vocab_size, int32_t bos_id,
                                                              const std::vector<int32_t>& eos_ids) {
  LLM_ASSIGN_OR_RETURN(TokenizerFiles files, SyntheticTokenizerFiles(vocab_size, bos_id, eos_ids));
  return Tokenizer::FromJson(files.tokenizer_json, files.tokenizer_config_json,
                             absl::StrCat("synthetic tokenizer (", vocab_size, " ids)"));
}

}  // namespace llm::frontend
