// Incremental detokenization for streaming: turns generated token ids into text deltas whose
// concatenation is the text of the whole output, never emitting a broken UTF-8 sequence.
#ifndef LLM_WORKER_FRONTEND_DETOKENIZER_H_
#define LLM_WORKER_FRONTEND_DETOKENIZER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/frontend/tokenizer.h"

namespace llm::frontend {

// One per request; not thread-safe. The tokenizer must outlive it.
//
// Each new token is decoded together with a few tokens before it (starting in the prompt), so
// that context-dependent decoders (leading-space stripping, byte fallback runs, byte-level
// characters split across tokens) give the same text as decoding everything at once. Text that
// ends in an incomplete UTF-8 sequence (U+FFFD at the end) is held back until the next token
// completes it, or until Flush.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                         bool skip_special_tokens);

  // Adds one generated token and returns the text it completes (often empty for partial
  // characters and special tokens). Ids outside the vocabulary decode to nothing.
  std::string Add(int32_t token_id);

  // Returns any text still held back (an incomplete character at the very end, rendered as
  // U+FFFD as a full decode would).
  std::string Flush();

  // For each of `token_ids`, the bytes it would add after the tokens added so far
  // (Tokenizer::DecodeBytes, in the same context window, special tokens skipped or kept as in
  // the output; a special token gives its own text): what a logprob entry for it reports, the
  // sampled token's before Add. The context is decoded once for all of them. In
  // context, a word's leading space is kept (decoders strip it only at the start of a text) and a
  // character split over tokens gives each token its own bytes. Empty for an id outside the
  // vocabulary.
  std::vector<std::string> BytesOf(std::span<const int32_t> token_ids) const;

 private:
  // ids_[begin, end) without ids outside the vocabulary.
  std::vector<int32_t> Window(size_t begin, size_t end) const;
  std::string DecodeRange(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // a prompt tail, then the generated tokens
  size_t prefix_offset_;      // start of the decoding window
  size_t read_offset_;        // end of the text already emitted
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_DETOKENIZER_H_
