// The tokenizer of a synthetic model (random:<shape>, make-model): byte-level BPE of exactly the
// model's vocabulary size, its first merges learned from kSampleText, with the model's BOS and
// EOS as special tokens.
#ifndef LLM_WORKER_FRONTEND_SYNTHETIC_TOKENIZER_H_
#define LLM_WORKER_FRONTEND_SYNTHETIC_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/frontend/bpe_trainer.h"
#include "worker/frontend/tokenizer.h"

namespace llm::frontend {

absl::StatusOr<TokenizerFiles> SyntheticTokenizerFiles(int32_t vocab_size, int32_t bos_id,
                                                       const std::vector<int32_t>& eos_ids);

absl::StatusOr<std::unique_ptr<Tokenizer>> SyntheticTokenizer(int32_t vocab_size, int32_t bos_id,
                                                              const std::vector<int32_t>& eos_ids);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_SYNTHETIC_TOKENIZER_H_
