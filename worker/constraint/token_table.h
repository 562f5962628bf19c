// The vocabulary as bytes, for token masks: each token's bytes as they stand inside a text
// (a word's leading space kept), arranged in a trie so a mask walks shared prefixes once.
// Special tokens never appear in a constrained output (a stop token may end it; Matcher).
// Immutable once built; one per worker, shared by every constrained request.
#ifndef LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_
#define LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace llm::constraint {

class TokenTable {
 public:
  // `bytes[id]`: token id's bytes; empty for ids that may never be generated under a
  // constraint (special tokens, unused ids).
  explicit TokenTable(const std::vector<std::string>& bytes);

  int32_t vocab_size() const { return vocab_size_; }
  // Token id's bytes (empty: never allowed under a constraint).
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Calls `visit(token)` for every token whose bytes `step` accepts byte by byte: `step(state,
  // byte)` returns the next state or a negative value to stop, starting from `state`. Shared
  // prefixes are walked once.
  template <typename Step, typename Visit>
  void ForEachAccepted(int32_t state, Step step, Visit visit) const {
    std::vector<std::pair<uint32_t, int32_t>> stack = {{0, state}};
    while (!stack.empty()) {
      const auto [node, s] = stack.back();
      stack.pop_back();
      const Node& n = nodes_[node];
      for (uint32_t e = n.first_child; e < n.first_child + n.num_children; ++e) {
        const int32_t next = step(s, edges_[e].byte);
        if (next < 0) continue;
        const Node& kid = nodes_[edges_[e].node];
        for (uint32_t t = kid.first_token; t < kid.first_token + kid.num_tokens; ++t) {
          visit(tokens_[t]);
        }
        if (kid.num_children > 0) stack.push_back({edges_[e].node, next});
      }
    }
  }

 private:
  struct Node {
    uint32_t first_child = 0, num_children = 0;  // into edges_
    uint32_t first_token = 0, num_tokens = 0;    // into tokens_
  };
  struct Edge {
    uint8_t byte;
    uint32_t node;
  };
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_
