// tokenizer.json normalizers: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip and
// Sequence, with the semantics of the Hugging Face `tokenizers` library.
#ifndef LLM_WORKER_FRONTEND_NORMALIZER_H_
#define LLM_WORKER_FRONTEND_NORMALIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::frontend {

// Immutable and thread-safe after construction.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes valid UTF-8 `text` in place.
  virtual void Normalize(std::string& text) const = 0;
};

// Builds the normalizer a tokenizer.json "normalizer" value describes; nullptr for null. An
// unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const nlohmann::json& j);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_NORMALIZER_H_
