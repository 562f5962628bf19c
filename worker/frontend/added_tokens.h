// Added (and special) tokens of tokenizer.json, found in text before the model runs: leftmost
// then longest match, with the lstrip / rstrip / single_word options, as the Hugging Face
// `tokenizers` library does. Tokens marked `normalized` are matched in normalized text (their
// content normalized the same way); the others in the raw input.
#ifndef LLM_WORKER_FRONTEND_ADDED_TOKENS_H_
#define LLM_WORKER_FRONTEND_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llm::frontend {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A segment of the input: either text for the model (id < 0) or one added token.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;  // -1 for plain text
};

// Matches a fixed set of tokens. Immutable and thread-safe after construction.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what to look for (a token's content, normalized or not) and `tokens[i]`
  // the token it stands for.
  AddedTokenMatcher(std::vector<std::string> patterns, std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  // Cuts `text` into plain and token segments covering it; empty plain segments are dropped.
  std::vector<Segment> Split(std::string_view text) const;

 private:
  // Byte trie over the patterns.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // (byte, child), sorted by byte
    int32_t token = -1;                             // index into tokens_ when a pattern ends
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  std::vector<Node> nodes_;
  std::vector<AddedToken> tokens_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_ADDED_TOKENS_H_
