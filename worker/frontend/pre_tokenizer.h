// tokenizer.json pre-tokenizers: Split, ByteLevel, Metaspace, Digits and Sequence, with the
// semantics of the Hugging Face `tokenizers` library. A pre-tokenizer turns each piece of
// normalized text into the words the model tokenizes one by one.
#ifndef LLM_WORKER_FRONTEND_PRE_TOKENIZER_H_
#define LLM_WORKER_FRONTEND_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::frontend {

// A piece of text between added tokens (and, after pre-tokenization, one word).
struct Piece {
  std::string text;
  bool at_text_start = false;  // begins at offset 0 of the original input
};

// How the delimiters a pattern matches are kept (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` at `matches` ([begin, end) byte ranges, sorted, disjoint) as `behavior` says;
// with `invert` the matches are the pieces to keep and the gaps the delimiters. Returns the
// non-empty [begin, end) ranges of the pieces.
std::vector<std::pair<size_t, size_t>> SplitByMatches(
    size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
    bool invert);

// Immutable and thread-safe after construction.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their pre-tokenized words (empty words dropped).
  virtual void Apply(std::vector<Piece>& pieces) const = 0;
};

// Builds the pre-tokenizer a tokenizer.json "pre_tokenizer" value describes; nullptr for null.
// An unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const nlohmann::json& j);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_PRE_TOKENIZER_H_
