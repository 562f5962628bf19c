// The vocabulary as bytes, for token masks: each token's bytes as they stand inside a text
// (a word's leading space kept), arranged in a trie so a mask walks shared prefixes once, and
// in a trie of byte classes so a mask treats tokens of the same shape at once.
// A special token has bytes no text has (SpecialTokenBytes), so it appears in a constrained
// output only where a pattern the worker builds names it (a tool call's marker, when the
// model's tokenizer has it as a special token); a stop token may end any output (Matcher).
// Immutable once built; one per worker, shared by every constrained request.
#ifndef LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_
#define LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
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
  // The longest token's bytes.
  int max_token_bytes() const { return max_depth_; }
  // Token id's bytes (empty: never allowed under a constraint).
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Calls `visit(token)` (or `visit(token, state)`, the state after its last byte) for every
  // token whose bytes `step` accepts byte by byte (a `step(state, byte, node)` is also told
  // the trie node the byte leads into): `step(state,
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
      if constexpr (!kWithNode<Step>) {
        if (step(state, byte) < 0) continue;
      }
      WalkSubtree(first, state, path, step, visit);
    }
  }

  // A 3-argument step is told a class node (which stands for many byte nodes) as its index
  // with this bit set; ClassMembers lists the byte nodes it stands for.
  static constexpr uint32_t kClassNode = uint32_t{1} << 31;
  std::span<const uint32_t> ClassMembers(uint32_t class_node) const {
    const ClassNode& n = class_nodes_[class_node & ~kClassNode];
    return {members_.data() + n.first_member, n.num_members};
  }

  // ForEachAccepted over the tokens whose bytes pass through trie node `node` (a node a
  // 3-argument `step(state, byte, node)` was given), the walk entering it from `state`.
  template <typename Step, typename Visit>
  void ForEachAcceptedUnder(uint32_t node, int32_t state, Step step, Visit visit) const {
    thread_local std::vector<int32_t> path;
    path.resize(static_cast<size_t>(max_depth_) + 1);
    WalkSubtree(node, state, path, step, visit);
  }

  // Bytes fall into kNumClasses classes (ClassOf): ASCII letters, ASCII digits, each other
  // ASCII byte that JSON or a pattern tells apart (punctuation, space, tab, newline, return,
  // DEL), the other control bytes, and the ranges UTF-8's well-formedness tells apart. Within
  // a JSON string or a run of free text, every byte of a class leads to the same state, so a
  // walk over classes treats most of the vocabulary's 150k tokens as a few thousand shapes.
  static constexpr int kNumClasses = 53;
  static int ClassOf(uint8_t byte) { return kClassOf[byte]; }
  // A class's lowest byte.
  static uint8_t FirstByteOf(int cls) { return kFirstByte[cls]; }
  // Bit c set when every byte of class c leads to the same state by `next(byte)`: the
  // `uniform` MaskByClass takes, for one state.
  template <typename Next>
  static uint64_t UniformClasses(Next next) {
    uint64_t split = 0;
    for (int b = 0; b < 256; ++b) {
      const int c = ClassOf(static_cast<uint8_t>(b));
      split |= next(static_cast<uint8_t>(b)) == next(FirstByteOf(c)) ? 0 : uint64_t{1} << c;
    }
    return ~split & ((uint64_t{1} << kNumClasses) - 1);
  }

  // Sets in `words` (bit t of words[t / 64] for token t) exactly the tokens ForEachAccepted
  // visits, walking a trie of the tokens' class sequences: where bit c of `uniform(state)` is
  // set, every byte of class c leads from `state` to `step(state, FirstByteOf(c))`, and a class
  // node stands for all its tokens at once (their bits kept as words); where it is clear, the
  // node's bytes are walked one by one (ForEachAccepted over its byte-trie subtrees). A state
  // inside a JSON string, which allows nearly the whole vocabulary, walks about 22k class
  // nodes and ORs 89k words instead of walking 333k byte nodes and setting 150k bits (qwen3).
  // `words` holds at least (vocab_size() + 63) / 64 words.
  template <typename Step, typename Uniform>
  void MaskByClass(int32_t state, Step step, Uniform uniform, std::span<uint64_t> words) const {
    thread_local std::vector<int32_t> path;  // the state after each depth's class or byte
    path.resize(static_cast<size_t>(max_depth_) + 1);
    path[0] = state;
    const auto visit = [&](int32_t t) {
      words[static_cast<uint32_t>(t) / 64] |= uint64_t{1} << (static_cast<uint32_t>(t) % 64);
    };
    for (uint32_t i = 1; i < class_nodes_.size();) {
      const ClassNode& n = class_nodes_[i];
      const int32_t from = path[n.depth - 1u];
      if ((uniform(from) >> n.cls & 1u) == 0) {
        for (uint32_t m = n.first_member; m < n.first_member + n.num_members; ++m) {
          WalkSubtree(members_[m], from, path, step, visit);
        }
        i = n.end;
        continue;
      }
      int32_t next;
      if constexpr (kWithNode<Step>) {
        next = step(from, FirstByteOf(n.cls), i | kClassNode);
      } else {
        next = step(from, FirstByteOf(n.cls));
      }
      if (next < 0) {
        i = n.end;
        continue;
      }
      path[n.depth] = next;
      for (uint32_t w = n.first_word; w < n.first_word + n.num_words; ++w) {
        words[class_words_[w]] |= class_bits_[w];
      }
      ++i;
    }
  }

 private:
  // A step that is told the trie node it leads into.
  template <typename Step>
  static constexpr bool kWithNode = std::is_invocable_v<Step&, int32_t, uint8_t, uint32_t>;

  // Walks byte node `root`'s subtree, `root` entered from `from`; path[d] is the state after
  // depth d's byte.
  template <typename Step, typename Visit>
  void WalkSubtree(uint32_t root, int32_t from, std::vector<int32_t>& path, Step& step,
                   const Visit& visit) const {
    const uint16_t base = nodes_[root].depth;
    path[base - 1u] = from;
    for (uint32_t i = root; i < nodes_[root].end;) {
      const Node& n = nodes_[i];
      int32_t next;
      if constexpr (kWithNode<Step>) {
        next = step(path[n.depth - 1u], n.byte, i);
      } else {
        next = step(path[n.depth - 1u], n.byte);
      }
      if (next < 0) {
        i = n.end;
        continue;
      }
      path[n.depth] = next;
      for (uint32_t t = n.first_token; t < n.first_token + n.num_tokens; ++t) {
        if constexpr (std::is_invocable_v<const Visit&, int32_t, int32_t>) {
          visit(tokens_[t], next);
        } else {
          visit(tokens_[t]);
        }
      }
      ++i;
    }
  }
  void BuildClassTrie();

  static const std::array<uint8_t, 256> kClassOf;
  static const std::array<uint8_t, kNumClasses> kFirstByte;

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
  // The class trie, in preorder like nodes_: a node per distinct class sequence of a token
  // prefix, with the byte nodes it stands for (members_) and the tokens that end there, as
  // mask words (word class_words_[w] gets the bits class_bits_[w]).
  struct ClassNode {
    uint8_t cls = 0;
    uint16_t depth = 0;
    uint32_t end = 0;
    uint32_t first_word = 0, num_words = 0;      // into class_words_ and class_bits_
    uint32_t first_member = 0, num_members = 0;  // into members_
  };
  std::vector<ClassNode> class_nodes_;
  std::vector<uint32_t> class_words_;
  std::vector<uint64_t> class_bits_;
  std::vector<uint32_t> members_;
};

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_TOKEN_TABLE_H_
