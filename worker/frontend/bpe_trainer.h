// Builds a byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) of an exact
// vocabulary size, for synthetic models: merges learned from a sample text first, then
// systematic merges of printable characters until the vocabulary is full.
#ifndef LLM_WORKER_FRONTEND_BPE_TRAINER_H_
#define LLM_WORKER_FRONTEND_BPE_TRAINER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::frontend {

struct ByteLevelTokenizerSpec {
  int32_t vocab_size = 0;  // > 256 + number of special tokens
  int32_t bos_id = -1;     // or -1 for none
  std::vector<int32_t> eos_ids;
  // More special tokens (id, text), e.g. a chat format's markers.
  std::vector<std::pair<int32_t, std::string>> extra_specials;
  std::string_view training_text;  // UTF-8
};

struct TokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

// BOS/EOS take their given ids as special added tokens; the 256 bytes take the lowest ids left
// (0..255 when every special id is above them); every other id is a merge. Llama 3-style
// pre-tokenization and a BOS template.
absl::StatusOr<TokenizerFiles> MakeByteLevelTokenizer(const ByteLevelTokenizerSpec& spec);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_BPE_TRAINER_H_
