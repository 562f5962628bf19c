#include "worker/constraint/token_table.h"

#include <algorithm>
#include <map>
#include <memory>

namespace llm::constraint {
namespace {

// A pointer trie while building; flattened into arrays afterwards.
struct BuildNode {
  std::map<uint8_t, std::unique_ptr<BuildNode>> kids;
  std::vector<int32_t> tokens;
};

// Bytes that share a group share a class (see ClassOf); any other byte is a class alone.
constexpr int GroupOf(int b) {
  if (b == '\t' || b == '\n' || b == '\r') return b;
  if (b < 0x20) return 1000;
  if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) return 1001;
  if (b >= '0' && b <= '9') return 1002;
  if (b < 0x80) return b;
  // UTF-8: continuation bytes as a second byte after E0, ED, F0 and F4 tell these apart; lead
  // bytes by the sequences they start.
  constexpr int kLows[] = {0x80, 0x90, 0xA0, 0xC0, 0xC2, 0xE0, 0xE1,
                           0xED, 0xEE, 0xF0, 0xF1, 0xF4, 0xF5};
  int group = 0;
  for (int i = 0; i < 13; ++i) {
    if (b >= kLows[i]) group = 2000 + i;
  }
  return group;
}

constexpr std::array<uint8_t, 256> MakeClassOf() {
  std::array<uint8_t, 256> cls{};
  std::array<int, 256> groups{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    int c = n;
    for (int i = 0; i < n; ++i) {
      if (groups[i] == GroupOf(b)) c = i;
    }
    if (c == n) groups[n++] = GroupOf(b);
    cls[b] = static_cast<uint8_t>(c);
  }
  return cls;
}

constexpr std::array<uint8_t, TokenTable::kNumClasses> MakeFirstByte() {
  constexpr std::array<uint8_t, 256> cls = MakeClassOf();
  std::array<uint8_t, TokenTable::kNumClasses> first{};
  for (int b = 255; b >= 0; --b) first[cls[b]] = static_cast<uint8_t>(b);
  return first;
}

constexpr int NumClasses() {
  int n = 0;
  for (uint8_t c : MakeClassOf()) n = c + 1 > n ? c + 1 : n;
  return n;
}
static_assert(NumClasses() == TokenTable::kNumClasses);

}  // namespace

const std::array<uint8_t, 256> TokenTable::kClassOf = MakeClassOf();
const std::array<uint8_t, TokenTable::kNumClasses> TokenTable::kFirstByte = MakeFirstByte();

std::string SpecialTokenBytes(int32_t id) { return "\xFF" + std::to_string(id) + "\xFE"; }

TokenTable::TokenTable(const std::vector<std::string>& bytes)
    : vocab_size_(static_cast<int32_t>(bytes.size())), bytes_(bytes) {
  BuildNode root;
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty()) continue;
    if (bytes[id].find_first_of("\xFE\xFF") != std::string::npos &&
        bytes[id] != SpecialTokenBytes(static_cast<int32_t>(id))) {
      bytes_[id].clear();  // not UTF-8 text: it could spell a special token's bytes
      continue;
    }
    BuildNode* at = &root;
    for (char c : bytes[id]) {
      auto& kid = at->kids[static_cast<uint8_t>(c)];
      if (!kid) kid = std::make_unique<BuildNode>();
      at = kid.get();
    }
    at->tokens.push_back(static_cast<int32_t>(id));
  }
  // Preorder: each subtree is one run of nodes_ (the walk skips a run where it stops).
  struct Frame {
    const BuildNode* node;
    uint8_t byte;
    uint16_t depth;
  };
  std::vector<Frame> stack = {{&root, 0, 0}};
  std::vector<uint32_t> open;  // nodes_ indices whose subtree is not closed yet, by depth
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    while (open.size() > f.depth) {
      nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    Node n;
    n.byte = f.byte;
    n.depth = f.depth;
    n.first_token = static_cast<uint32_t>(tokens_.size());
    n.num_tokens = static_cast<uint32_t>(f.node->tokens.size());
    tokens_.insert(tokens_.end(), f.node->tokens.begin(), f.node->tokens.end());
    open.push_back(static_cast<uint32_t>(nodes_.size()));
    nodes_.push_back(n);
    max_depth_ = std::max(max_depth_, f.depth);
    // Children pushed in reverse byte order so that they come out in order.
    for (auto it = f.node->kids.rbegin(); it != f.node->kids.rend(); ++it) {
      stack.push_back({it->second.get(), it->first, static_cast<uint16_t>(f.depth + 1)});
    }
  }
  for (uint32_t i : open) nodes_[i].end = static_cast<uint32_t>(nodes_.size());
  for (uint32_t i = 1; i < nodes_.size(); i = nodes_[i].end)
    first_level_.push_back({nodes_[i].byte, i});
  BuildClassTrie();
}

// A class node stands for the byte nodes whose paths have its class sequence; its children
// group those nodes' children by class. Built depth first, so that it comes out in preorder.
void TokenTable::BuildClassTrie() {
  struct Frame {
    std::vector<uint32_t> members;
    uint8_t cls;
    uint16_t depth;
  };
  std::vector<Frame> stack;
  stack.push_back({{0}, 0, 0});
  std::vector<uint32_t> open;  // class_nodes_ indices whose subtree is not closed yet
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    while (open.size() > f.depth) {
      class_nodes_[open.back()].end = static_cast<uint32_t>(class_nodes_.size());
      open.pop_back();
    }
    ClassNode n;
    n.cls = f.cls;
    n.depth = f.depth;
    n.first_member = static_cast<uint32_t>(members_.size());
    n.num_members = static_cast<uint32_t>(f.members.size());
    std::map<uint8_t, std::vector<uint32_t>> kids;
    std::map<uint32_t, uint64_t> bits;  // the tokens ending here, by mask word
    for (uint32_t m : f.members) {
      const Node& b = nodes_[m];
      for (uint32_t t = b.first_token; t < b.first_token + b.num_tokens; ++t) {
        const auto id = static_cast<uint32_t>(tokens_[t]);
        bits[id / 64] |= uint64_t{1} << (id % 64);
      }
      members_.push_back(m);
      for (uint32_t k = m + 1; k < b.end; k = nodes_[k].end) {
        kids[static_cast<uint8_t>(ClassOf(nodes_[k].byte))].push_back(k);
      }
    }
    n.first_word = static_cast<uint32_t>(class_words_.size());
    n.num_words = static_cast<uint32_t>(bits.size());
    for (const auto& [word, b] : bits) {
      class_words_.push_back(word);
      class_bits_.push_back(b);
    }
    open.push_back(static_cast<uint32_t>(class_nodes_.size()));
    class_nodes_.push_back(n);
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      stack.push_back({std::move(it->second), it->first, static_cast<uint16_t>(f.depth + 1)});
    }
  }
  for (uint32_t i : open) class_nodes_[i].end = static_cast<uint32_t>(class_nodes_.size());
}

}  // namespace llm::constraint
