// The vocabulary as bytes, for token masks: each token's bytes as they stand inside a text
// (a word's leading space kept), arranged in a trie so a mask walks shared prefixes once.
// A special token has bytes no text has (SpecialTokenBytes), so it appears in a constrained
// output only where a pattern the worker builds names it (a tool call's marker, when the
// model's tokenizer has it as a special token); a stop token may end any output (Matcher).
// Immutable once built; one per worker, shared by every constrained request.
#ifndef LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_
#define LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace llm::constraint {

// A special token's bytes in a TokenTable: 0xFF, the id in decimal, 0xFE. No UTF-8 text holds
// 0xFF or 0xFE, and a request's pattern is UTF-8 text whose escapes and classes stand for
// well-formed UTF-8, so only a pattern that embeds these bytes (as a byte regex's literal
// bytes) matches the token. Ordinary tokens holding either byte (a byte-level vocabulary's
// 0xFF token, say) are left out of the table, so the pattern cannot be spelled with them.
std::string SpecialTokenBytes(int32_t id);

class TokenTable {
 public:
  // `bytes[id]`: token id's bytes; empty for ids that may never be generated under a
  // constraint (unused ids; special tokens no pattern names may have SpecialTokenBytes(id)).
  // Other tokens with 0xFE or 0xFF bytes are never generated under a constraint either.
  explicit TokenTable(const std::vector<std::string>& bytes);

  int32_t vocab_size() const { return vocab_size_; }
  // Token id's bytes (empty: never allowed under a constraint).
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Calls `visit(token)` for every token whose bytes `step` accepts byte by byte: `step(state,
  // byte)` returns the next state or a negative value to stop, starting from `state`. Shared
  // prefixes are walked once: the trie is laid out in preorder, so a walk is one pass over an
  // array that skips the subtrees `step` stops at.
  template <typename Step, typename Visit>
  void ForEachAccepted(int32_t state, Step step, Visit visit) const {
    thread_local std::vector<int32_t> path;  // the state after each depth's byte
    path.resize(static_cast<size_t>(max_depth_) + 1);
    path[0] = state;
    // The first bytes from a contiguous list (a walk that stops at most of them touches
    // nothing else), then each accepted first byte's subtree in one pass.
    for (const auto& [byte, first] : first_level_) {
      if (step(state, byte) < 0) continue;
      for (uint32_t i = first; i < nodes_[first].end;) {
        const Node& n = nodes_[i];
        const int32_t next = step(path[n.depth - 1u], n.byte);
        if (next < 0) {
          i = n.end;
          continue;
        }
        path[n.depth] = next;
        for (uint32_t t = n.first_token; t < n.first_token + n.num_tokens; ++t) {
          visit(tokens_[t]);
        }
        ++i;
      }
    }
  }

 private:
  // A trie node in preorder: the byte that leads to it, its depth (bytes from the root), one
  // past its subtree's last node, and the tokens that end here.
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;
    uint32_t end = 0;
    uint32_t first_token = 0, num_tokens = 0;  // into tokens_
  };
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  uint16_t max_depth_ = 0;
  std::vector<std::pair<uint8_t, uint32_t>> first_level_;  // (byte, node) of the root's children
};

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_
